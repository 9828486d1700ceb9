"""Build the chat messages for a structured-output request from the schema itself.

The schema is the one source of truth: the same document that compiles the constraint and
drives validation also tells the model which fields to write, in which order, what they mean
(``description``) and which values are allowed (``enum``/``const``). Nothing here keeps a second,
hand-written copy of the field list that could drift from the schema.

The field list is written in schema order because the grammar emits properties in that order;
telling the model the same order keeps the constrained and unconstrained outputs comparable
(and lets a "reasoning before label" schema work as intended).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from formcast.errors import SchemaError

DEFAULT_SYSTEM = (
    "You turn the user's request into one JSON object. "
    "Reply with the JSON object only: no explanation, no markdown code fence."
)

_MAX_DEPTH = 6


def schema_messages(schema: Mapping[str, Any], task: str, *,
                    system: str = DEFAULT_SYSTEM) -> list[dict[str, str]]:
    """Chat messages asking for a JSON value that matches ``schema`` for ``task``.

    The system message holds the instruction and a field-by-field description of the schema;
    the user message holds the task text unchanged.
    """
    if not isinstance(schema, Mapping):
        raise SchemaError(f"a schema must be a JSON object, got {type(schema).__name__}")
    parts = [system]
    title = schema.get("title")
    description = schema.get("description")
    if title or description:
        parts.append(" ".join(str(x) for x in (title and f"Output: {title}.", description) if x))
    parts.append(describe_schema(schema))
    return [
        {"role": "system", "content": "\n\n".join(parts)},
        {"role": "user", "content": task.strip()},
    ]


def plain_messages(task: str, *, system: str | None = None) -> list[dict[str, str]]:
    """Chat messages for a grammar or regex constraint, where there is no schema to describe."""
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": task.strip()})
    return messages


def describe_schema(schema: Mapping[str, Any]) -> str:
    """A plain-language outline of ``schema``: one line per field, nested fields indented."""
    root = _resolve(schema, schema, "")
    if _type_of(root) == "object" and isinstance(root.get("properties"), Mapping):
        lines = ["The JSON object has these fields, in this order:"]
        lines += _describe_properties(schema, root, "", depth=0)
    else:
        lines = [f"The JSON value is {_summary(schema, root, '', 0)}."]
    return "\n".join(lines)


def _describe_properties(doc: Mapping[str, Any], node: Mapping[str, Any], pointer: str,
                         depth: int) -> list[str]:
    props = node.get("properties") or {}
    if not isinstance(props, Mapping):
        raise SchemaError("'properties' must be an object", pointer=f"{pointer}/properties")
    required = set(node.get("required") or ())
    indent = "  " * depth
    lines: list[str] = []
    for name, sub in props.items():
        sub_ptr = f"{pointer}/properties/{_escape(name)}"
        resolved = _resolve(doc, sub, sub_ptr)
        need = "required" if name in required else "optional"
        line = f"{indent}- {json.dumps(name)} ({_summary(doc, resolved, sub_ptr, depth)}, {need})"
        text = resolved.get("description") if isinstance(resolved, Mapping) else None
        if text:
            line += f": {str(text).strip()}"
        lines.append(line)
        if depth + 1 < _MAX_DEPTH and isinstance(resolved, Mapping):
            lines += _describe_children(doc, resolved, sub_ptr, depth + 1)
    return lines


def _describe_children(doc: Mapping[str, Any], node: Mapping[str, Any], pointer: str,
                       depth: int) -> list[str]:
    """Nested fields of an object, or of the objects an array holds."""
    if _type_of(node) == "object" and isinstance(node.get("properties"), Mapping):
        return _describe_properties(doc, node, pointer, depth)
    items = node.get("items")
    if _type_of(node) == "array" and isinstance(items, Mapping):
        item = _resolve(doc, items, f"{pointer}/items")
        if _type_of(item) == "object" and isinstance(item.get("properties"), Mapping):
            return _describe_properties(doc, item, f"{pointer}/items", depth)
    return []


def _summary(doc: Mapping[str, Any], node: Any, pointer: str, depth: int) -> str:
    """A short type phrase: 'string, one of "a", "b"', 'list of objects', 'integer >= 0'..."""
    if node is True or node == {}:
        return "any JSON value"
    if not isinstance(node, Mapping):
        raise SchemaError("a schema must be an object or a boolean", pointer=pointer or "/")
    if "const" in node:
        return f"exactly {json.dumps(node['const'], ensure_ascii=False)}"
    if "enum" in node:
        values = node["enum"]
        if not isinstance(values, list) or not values:
            raise SchemaError("'enum' must be a non-empty array", pointer=f"{pointer}/enum")
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in values)
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            options = [
                _summary(doc, _resolve(doc, s, f"{pointer}/{key}/{i}"), f"{pointer}/{key}/{i}", depth)
                for i, s in enumerate(node[key])
            ]
            return " or ".join(options)
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    words = [str(kind) if kind else "any JSON value"]
    if kind == "array":
        items = node.get("items")
        if isinstance(items, Mapping | bool):
            inner = _summary(doc, _resolve(doc, items, f"{pointer}/items"), f"{pointer}/items", depth)
            words = [f"list of {_plural(inner)}"]
    if node.get("format"):
        words.append(f"format {node['format']}")
    if node.get("pattern"):
        words.append(f"matching {node['pattern']}")
    for key, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                    ("exclusiveMaximum", "<")):
        if isinstance(node.get(key), int | float) and not isinstance(node.get(key), bool):
            words.append(f"{op} {node[key]}")
    if isinstance(node.get("maxLength"), int):
        words.append(f"at most {node['maxLength']} characters")
    if isinstance(node.get("minItems"), int) and node["minItems"] > 0:
        words.append(f"at least {node['minItems']} item(s)")
    return ", ".join(words)


def _plural(phrase: str) -> str:
    head, sep, rest = phrase.partition(",")
    if head in {"string", "object", "integer", "number", "boolean"}:
        head += "s"
    return head + sep + rest


def _type_of(node: Any) -> str | None:
    if not isinstance(node, Mapping):
        return None
    kind = node.get("type")
    if kind is None and "properties" in node:
        return "object"
    if kind is None and "items" in node:
        return "array"
    return kind if isinstance(kind, str) else None


def _resolve(doc: Mapping[str, Any], node: Any, pointer: str) -> Any:
    """Follow local ``$ref`` pointers (``#/$defs/...``); remote references are not fetched."""
    seen: set[str] = set()
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        if not ref.startswith("#"):
            raise SchemaError(f"only local $ref is supported, got {ref!r}", pointer=f"{pointer}/$ref")
        if ref in seen:
            raise SchemaError(f"$ref cycle through {ref!r}", pointer=f"{pointer}/$ref")
        seen.add(ref)
        target: Any = doc
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise SchemaError(f"$ref {ref!r} does not resolve", pointer=f"{pointer}/$ref")
            target = target[part]
        node = target
    return node


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")
