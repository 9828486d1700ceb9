"""Negation of simple schemas, for ``not``, overlapping ``oneOf`` and ``if``/``then``/``else``.

A schema that only uses keywords with a simple failure set can be negated exactly: the values
that fail ``{"type": "string", "minLength": 2}`` are the non-strings plus the strings shorter
than 2. ``negate`` returns that failure set as a list of conjunctions to OR together (each
keyword contributes the values that fail it), or ``None`` when the schema uses a keyword whose
failure set has no grammar (``items``, ``properties`` with schemas, ``uniqueItems``...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from formcast.grammar import charfa
from formcast.grammar.ir import lit
from formcast.grammar.json_conj import (
    ALL_TYPES,
    Conj,
    Negated,
    ObjectPart,
    expand_types,
    field_items,
    json_type,
    normalize_types,
)
from formcast.grammar.json_refs import Loc
from formcast.grammar.json_text import to_decimal, union

if TYPE_CHECKING:  # pragma: no cover
    from formcast.grammar.json_schema import SchemaCompiler

# Conj fields a negatable schema may set (everything else makes negate() give up).
_SIMPLE: Final = {"sources", "seen", "inlined", "types", "values", "false", "low", "high", "min_len",
           "max_len", "length_ptrs", "patterns", "required", "min_props", "max_props",
           "count_ptrs", "min_items", "max_items", "string_dfas", "excluded_numbers"}


def negate(c: SchemaCompiler, schema: Any, loc: Loc) -> list[Conj] | None:
    """The values failing ``schema``, as conjunctions to OR; None when not expressible."""
    if schema is True:
        return []
    if schema is False:
        return [Conj()]
    conj = Conj()
    c.acc.add(conj, schema, loc, (loc.pointer,))
    if conj.false:
        return [Conj()]
    blank = Conj()
    for name, value in field_items(conj):
        if name == "objects" and all(_negatable_part(c, p) for p in value):
            continue
        if name not in _SIMPLE and value != getattr(blank, name):
            return None
    allowed = expand_types(conj.types) if conj.types is not None else set(ALL_TYPES)
    if "integer" in allowed and "number" not in allowed:
        return None  # the complement would need "non-integral numbers", which is not compiled
    pieces: list[Conj] = []
    other = normalize_types(set(ALL_TYPES) - allowed)
    if other:
        pieces.append(_typed(other))
    num = "number" if "number" in allowed else ("integer" if "integer" in allowed else None)

    if conj.values is not None:
        if any(isinstance(v, list | dict) for v in conj.values):
            return None
        strings = [v for v in conj.values if isinstance(v, str)]
        numbers = [to_decimal(v) for v in conj.values if json_type(v) in ("number", "integer")]
        if "string" in allowed:
            piece = _typed({"string"})
            if strings:
                listed = charfa.minimize(charfa.from_expr(union(lit(s) for s in strings)))
                piece.string_dfas.append(charfa.complement(listed))
            pieces.append(piece)
        if num is not None:
            piece = _typed({num})
            piece.excluded_numbers.extend(numbers)
            pieces.append(piece)
        if "boolean" in allowed:
            rest = [b for b in (True, False) if b not in [v for v in conj.values if v is b]]
            if rest:
                piece = _typed({"boolean"})
                piece.values = rest
                pieces.append(piece)
        if "null" in allowed and None not in conj.values:
            pieces.append(_typed({"null"}))
        pieces += [_typed({t}) for t in ("object", "array") if t in allowed]
        return pieces  # the value list already covers every other keyword's failures

    if num is not None:
        if conj.low is not None:
            piece = _typed({num})
            piece.high = (conj.low[0], not conj.low[1])
            pieces.append(piece)
        if conj.high is not None:
            piece = _typed({num})
            piece.low = (conj.high[0], not conj.high[1])
            pieces.append(piece)
        if conj.excluded_numbers:
            piece = _typed({num})
            piece.values = list(conj.excluded_numbers)
            pieces.append(piece)
    if "string" in allowed:
        if conj.min_len > 0:
            piece = _typed({"string"})
            piece.max_len = conj.min_len - 1
            pieces.append(piece)
        if conj.max_len is not None:
            piece = _typed({"string"})
            piece.min_len = conj.max_len + 1
            pieces.append(piece)
        for pattern, ptr in conj.patterns:
            dfa = c.pattern_dfa(pattern, ptr)
            if dfa is None:
                return None
            piece = _typed({"string"})
            piece.string_dfas.append(charfa.complement(dfa))
            pieces.append(piece)
        for dfa in conj.string_dfas:
            piece = _typed({"string"})
            piece.string_dfas.append(charfa.complement(dfa))
            pieces.append(piece)
    if "object" in allowed:
        for part in conj.objects:  # a named property present with a failing value
            for name, (sub, sub_loc) in part.properties.items():
                if sub is True:
                    continue
                piece = _typed({"object"})
                piece.required.append(name)
                piece.objects.append(ObjectPart({name: (Negated(sub), sub_loc)}, [], None, loc))
                pieces.append(piece)
        for name in conj.required:
            piece = _typed({"object"})
            piece.objects.append(ObjectPart({name: (False, loc)}, [], None, loc))
            pieces.append(piece)
        if conj.min_props > 0:
            piece = _typed({"object"})
            piece.max_props = conj.min_props - 1
            pieces.append(piece)
        if conj.max_props is not None:
            piece = _typed({"object"})
            piece.min_props = conj.max_props + 1
            pieces.append(piece)
    if "array" in allowed:
        if conj.min_items > 0:
            piece = _typed({"array"})
            piece.max_items = conj.min_items - 1
            pieces.append(piece)
        if conj.max_items is not None:
            piece = _typed({"array"})
            piece.min_items = conj.max_items + 1
            pieces.append(piece)
    return pieces


def _negatable_part(c: SchemaCompiler, part: ObjectPart) -> bool:
    """Properties only (no patterns or additionalProperties), each negatable itself."""
    if part.patterns or part.additional is not None:
        return False
    return all(sub is True or negate(c, sub, sub_loc) is not None
               for sub, sub_loc in part.properties.values())


def _typed(types: set[str]) -> Conj:
    piece = Conj()
    piece.types = normalize_types(set(types))
    return piece
