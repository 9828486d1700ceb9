"""Where a ``$ref`` points: an index of one schema document's resources and anchors.

Every subschema is addressed by its JSON pointer from the document root (that is what rule
names and report pointers use). ``$id`` changes the base URI that relative references resolve
against; ``$anchor`` / ``$dynamicAnchor`` name a subschema. References that leave the document
(remote ``$ref``) resolve to ``None``: the compiler reports them.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import unquote, urljoin

from formcast.errors import SchemaError

DEFAULT_BASE: Final = "https://formcast.invalid/schema.json"

# Keywords whose value is a schema, a list of schemas, or a map of name -> schema.
SCHEMA_VALUED: Final = {"additionalProperties", "propertyNames", "items", "additionalItems", "contains",
                 "not", "if", "then", "else", "unevaluatedItems", "unevaluatedProperties",
                 "contentSchema"}
SCHEMA_LISTS: Final = {"allOf", "anyOf", "oneOf", "prefixItems", "items"}
SCHEMA_MAPS: Final = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
               "dependencies"}


def split_fragment(uri: str) -> tuple[str, str]:
    """``uri`` without its fragment, and the fragment (RFC 3986: after the first ``#``).
    ``urllib.parse.urldefrag`` parses the whole URI and puts it back together; a schema's
    references are split a few times each, and that was most of their cost."""
    head, _, fragment = uri.partition("#")
    return head, fragment


def resolve_uri(base: str, ref: str) -> str:
    """``ref`` resolved against ``base`` (RFC 3986), including bases like ``urn:uuid:...`` that
    ``urljoin`` leaves alone: a fragment-only reference keeps the base document."""
    if ref.startswith("#"):
        return split_fragment(base)[0] + ref
    if ":" in ref.split("/", 1)[0]:  # has a scheme: absolute
        return ref
    return urljoin(base, ref)


def escape_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def unescape_token(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


# Pointers are made for every subschema a compile visits (reports name them): the plain
# case, no "~" and no "/" in a token, skips the escaping.
def join_pointer(pointer: str, *tokens: str | int) -> str:
    for token in tokens:
        pointer = join_token(pointer, token)
    return pointer


def join_token(pointer: str, token: str | int) -> str:
    """``join_pointer`` of one token. Code that receives ``*tokens`` loops over this: passing
    the tuple on as ``join_pointer(p, *tokens)`` is a generic Python call under mypyc."""
    text = token if type(token) is str else str(token)
    if "~" in text or "/" in text:
        text = escape_token(text)
    return f"{pointer}/{text}"  # one string built: ``+`` twice built two


def split_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise SchemaError(f"{pointer!r} is not a JSON pointer (it must start with '/')")
    tokens = pointer[1:].split("/")
    return [unescape_token(t) for t in tokens] if "~" in pointer else tokens


class Loc:
    """A subschema's place: pointer from the document root and the base URI in effect inside
    it (its own ``$id`` included). A compile makes one for every subschema: as a plain,
    undecorated class it is native under mypyc (construction is a C call, ``loc.pointer`` a
    struct read); any decorator but ``dataclass`` (even ``typing.final``) makes mypyc build
    an ordinary Python class, and a named tuple ran its ``__new__`` as Python code."""

    __slots__ = ("pointer", "base")

    def __init__(self, pointer: str, base: str) -> None:
        self.pointer = pointer
        self.base = base

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Loc) and self.pointer == other.pointer and self.base == other.base

    def __hash__(self) -> int:
        return hash((self.pointer, self.base))

    def __repr__(self) -> str:
        return f"Loc(pointer={self.pointer!r}, base={self.base!r})"



class SchemaIndex:
    """Resources (``$id``) and anchors of one schema document."""

    def __init__(self, root: Any, anchored: bool = True) -> None:
        """``anchored=False``: the caller knows no subschema has an ``$id`` or an anchor (a
        search of the schema's JSON text), so the walk that finds them is skipped."""
        self.root = root
        self.resources: dict[str, str] = {}  # absolute URI (no fragment) -> pointer
        self.anchors: dict[str, str] = {}  # absolute URI#anchor -> pointer
        base = DEFAULT_BASE
        if isinstance(root, dict) and isinstance(root.get("$id"), str):
            base = split_fragment(resolve_uri(DEFAULT_BASE, root["$id"]))[0]
        self.root_base = base
        self.resources[DEFAULT_BASE] = ""
        if anchored:
            self._walk(root, "", base, set())

    def _walk(self, node: Any, pointer: str, base: str, seen: set[int]) -> None:
        if not isinstance(node, dict) or id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node.get("$id"), str):
            uri = split_fragment(resolve_uri(base, node["$id"]))[0]
            base = uri
            self.resources.setdefault(uri, pointer)
        for key in ("$anchor", "$dynamicAnchor"):
            name = node.get(key)
            if isinstance(name, str):
                self.anchors.setdefault(f"{base}#{name}", pointer)
        for key, value in node.items():
            if key in SCHEMA_VALUED and isinstance(value, dict):
                self._walk(value, join_pointer(pointer, key), base, seen)
            if key in SCHEMA_LISTS and isinstance(value, list):
                for i, item in enumerate(value):
                    self._walk(item, join_pointer(pointer, key, i), base, seen)
            if key in SCHEMA_MAPS and isinstance(value, dict):
                for name, item in value.items():
                    self._walk(item, join_pointer(pointer, key, name), base, seen)

    def child(self, loc: Loc, node: Any, *tokens: str | int) -> Loc:
        """The location of ``node``, found at ``tokens`` below ``loc``."""
        base = loc.base
        if isinstance(node, dict) and isinstance(node.get("$id"), str):
            base = split_fragment(resolve_uri(base, node["$id"]))[0]
        pointer = loc.pointer
        for token in tokens:
            pointer = join_token(pointer, token)
        return Loc(pointer, base)

    def resolve(self, ref: str, base: str) -> str | None:
        """The root pointer ``ref`` names, or None when it points outside this document."""
        full = resolve_uri(base, ref)
        doc, frag = split_fragment(full)
        if doc not in self.resources:
            if doc == self.root_base:
                start = ""
            else:
                return None
        else:
            start = self.resources[doc]
        if frag == "":
            return start
        if frag.startswith("/"):
            return start + unquote(frag)
        return self.anchors.get(f"{doc}#{unquote(frag)}")

    def node_at(self, pointer: str) -> Any:
        """The value at ``pointer`` in the document."""
        node = self.root
        for token in split_pointer(pointer):
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise SchemaError(f"$ref target {pointer!r} does not exist", pointer=pointer)
        return node

    def loc_of(self, pointer: str) -> Loc:
        """The location of the subschema at ``pointer``, with the base URI its ``$id``s set."""
        node = self.root
        base = self.root_base
        for token in split_pointer(pointer):
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise SchemaError(f"$ref target {pointer!r} does not exist", pointer=pointer)
            if isinstance(node, dict) and isinstance(node.get("$id"), str):
                base = split_fragment(resolve_uri(base, node["$id"]))[0]
        return Loc(pointer, base)
