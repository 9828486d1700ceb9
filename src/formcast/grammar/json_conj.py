"""A conjunction of schemas, flattened: what ``allOf``, ``$ref`` with siblings and plain keyword
lists all reduce to before a grammar is built.

``Conj`` gathers every constraint that applies to one JSON value, keyword by keyword, from any
number of schema objects: types intersect, bounds tighten, per-property and per-item schemas
accumulate into lists (they are compiled together later), ``anyOf``/``oneOf`` are kept as
groups to distribute. Keywords that no grammar can enforce are collected as ``issues``; the
compiler reports them unless an exact route (a finite ``enum``) makes them moot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from formcast.errors import SchemaError
from formcast.grammar.json_refs import Loc, SchemaIndex, join_pointer
from formcast.grammar.json_text import is_json_number, to_decimal

ALL_TYPES: Final = ("object", "array", "string", "number", "integer", "boolean", "null")

# Keywords that never constrain a value.
ANNOTATIONS: Final = {
    "title", "description", "examples", "default", "$comment", "deprecated", "readOnly",
    "writeOnly", "$schema", "$id", "$anchor", "$dynamicAnchor", "$vocabulary", "$defs",
    "definitions", "contentMediaType", "contentEncoding", "contentSchema", "discriminator",
    "nullable", "example", "externalDocs", "xml", "$recursiveAnchor", "id",
}
# Keywords whose constraint takes effect only together with another one.
DEPENDENT: Final = {"then", "else", "minContains", "maxContains", "additionalItems"}

CONSTRAINTS: Final = {
    "$ref", "$dynamicRef", "$recursiveRef", "allOf", "anyOf", "oneOf", "not", "if", "type",
    "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "format", "items", "prefixItems", "contains",
    "maxItems", "minItems", "uniqueItems", "unevaluatedItems", "properties",
    "patternProperties", "additionalProperties", "propertyNames", "required", "maxProperties",
    "minProperties", "dependentRequired", "dependentSchemas", "dependencies",
    "unevaluatedProperties",
} | DEPENDENT


def json_key(value: Any) -> Any:
    """A hashable key under JSON Schema equality (``1 == 1.0``, ``true != 1``, key order free)."""
    if value is None or isinstance(value, bool | str):
        return (type(value).__name__, value)
    if is_json_number(value):
        return ("n", to_decimal(value).normalize())
    if isinstance(value, list):
        return ("a", tuple(json_key(v) for v in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, json_key(v)) for k, v in value.items()))
    raise SchemaError(f"not a JSON value: {value!r}")


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if is_json_number(value):
        d = to_decimal(value)
        return "integer" if d == d.to_integral_value() else "number"
    if isinstance(value, list):
        return "array"
    return "object"


def expand_types(types: set[str]) -> set[str]:
    return types | {"integer"} if "number" in types else set(types)


def normalize_types(types: set[str]) -> set[str]:
    return types - {"integer"} if "number" in types else types


Sub = tuple[Any, Loc]  # a subschema and where it is


@dataclass(frozen=True)
class Negated:
    """A synthetic subschema meaning NOT ``schema`` (made by negation, never by users)."""

    schema: Any


class ObjectPart:
    """The object keywords of one schema object (they interact, so they stay together)."""

    def __init__(self, properties: dict[str, Sub], patterns: list[tuple[str, Sub]],
                 additional: Sub | None, loc: Loc) -> None:
        self.properties = properties
        self.patterns = patterns
        self.additional = additional
        self.loc = loc


class ArrayPart:
    def __init__(self, prefix: list[Sub], items: Sub | None, loc: Loc) -> None:
        self.prefix = prefix
        self.items = items
        self.loc = loc


class Contains:
    def __init__(self, schema: Any, loc: Loc, min: int, max: int | None,
                 pointer: str) -> None:
        self.schema = schema
        self.loc = loc
        self.min = min
        self.max = max
        self.pointer = pointer  # of the "contains" keyword


class Group:
    def __init__(self, kind: str, branches: list[Sub], loc: Loc,
                 pieces: list[Conj] | None = None) -> None:
        self.kind = kind  # "anyOf" | "oneOf" | "if" | "pieces" (a disjunction of conjunctions)
        self.branches = branches
        self.loc = loc
        self.pieces = pieces


# Conj's fields in order (``field_items``, ``clone``). Plain classes, not dataclasses: mypyc
# compiles a plain class's ``__init__``, but a dataclass's generated ``__init__`` stays
# interpreted, and a schema compile makes a Conj for every subschema (an eighth of a large
# anyOf's front end went to it).
CONJ_FIELDS: Final = (
    "sources", "types", "values", "false", "issues", "seen", "low", "high", "multiples",
    "min_len", "max_len", "length_ptrs", "patterns", "formats", "arrays", "min_items",
    "max_items", "unique", "contains", "objects", "required", "property_names", "min_props",
    "max_props", "count_ptrs", "dependencies", "object_issues", "groups", "nots", "inlined",
    "string_dfas", "excluded_numbers",
)


class Conj:
    """Every constraint gathered for one JSON value (see the module docstring)."""

    def __init__(self) -> None:
        self.sources: list[Sub] = []
        self.types: set[str] | None = None
        self.values: list[Any] | None = None
        self.false = False
        self.issues: list[tuple[str, str, str]] = []
        self.seen: list[tuple[str, str]] = []
        # numbers
        self.low: tuple[Decimal, bool] | None = None
        self.high: tuple[Decimal, bool] | None = None
        self.multiples: list[tuple[Decimal, str]] = []
        # strings
        self.min_len = 0
        self.max_len: int | None = None
        self.length_ptrs: list[str] = []
        self.patterns: list[tuple[str, str]] = []
        self.formats: list[tuple[str, str]] = []
        # arrays
        self.arrays: list[ArrayPart] = []
        self.min_items = 0
        self.max_items: int | None = None
        self.unique: list[str] = []
        self.contains: list[Contains] = []
        # objects
        self.objects: list[ObjectPart] = []
        self.required: list[str] = []
        self.property_names: list[Sub] = []
        self.min_props = 0
        self.max_props: int | None = None
        self.count_ptrs: list[str] = []
        self.dependencies: list[tuple[str, list[str], str]] = []
        self.object_issues: list[tuple[str, str, str]] = []
        # composition
        self.groups: list[Group] = []
        self.nots: list[Sub] = []
        self.inlined: set[str] = set()  # $ref targets merged in at this position
        # produced by negation (json_negate), never by a keyword directly
        self.string_dfas: list[Any] = []  # charfa.DFA the string must match
        self.excluded_numbers: list[Decimal] = []

    def __repr__(self) -> str:
        blank = Conj()
        set_fields = ", ".join(f"{name}={value!r}" for name, value in field_items(self)
                               if value != getattr(blank, name))
        return f"Conj({set_fields})"

    def clone(self) -> Conj:
        """A copy whose lists and sets are copies too (their items are shared)."""
        out = Conj()
        for name, value in field_items(self):
            if isinstance(value, list):
                value = list(value)
            elif isinstance(value, set):
                value = set(value)
            setattr(out, name, value)
        return out

    def constrains_anything(self) -> bool:
        """Whether anything beyond the raw sources was gathered."""
        blank = Conj()
        for name, value in field_items(self):
            if name in ("sources", "seen", "issues", "inlined"):
                continue
            if value != getattr(blank, name):
                return True
        return False

    def merge(self, other: Conj) -> None:
        """Add every constraint of ``other`` (the conjunction of both)."""
        if other.types is not None:
            self.add_types(other.types)
        if other.values is not None:
            self.add_values(other.values)
        self.false = self.false or other.false
        if other.low is not None:
            Accumulator._low(self, other.low[0], other.low[1])
        if other.high is not None:
            Accumulator._high(self, other.high[0], other.high[1])
        self.min_len = max(self.min_len, other.min_len)
        self.min_items = max(self.min_items, other.min_items)
        self.min_props = max(self.min_props, other.min_props)
        for name in ("max_len", "max_items", "max_props"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None:
                setattr(self, name, theirs if mine is None else min(mine, theirs))
        for name in ("sources", "issues", "seen", "multiples", "length_ptrs", "patterns",
                     "formats", "arrays", "unique", "contains", "objects", "property_names",
                     "count_ptrs", "dependencies", "object_issues", "groups", "nots",
                     "string_dfas", "excluded_numbers"):
            getattr(self, name).extend(getattr(other, name))
        for name in other.required:
            if name not in self.required:
                self.required.append(name)
        self.inlined |= other.inlined

    def add_types(self, types: set[str]) -> None:
        if self.types is None:
            self.types = normalize_types(set(types))
        else:
            self.types = normalize_types(expand_types(self.types) & expand_types(types))

    def add_values(self, values: list[Any]) -> None:
        if all(isinstance(v, str) for v in values):
            # A string enum (hundreds of country codes): strings are equal under JSON Schema
            # exactly when they are equal, and never equal a value of another type.
            if self.values is None:
                self.values = list(dict.fromkeys(values))
            else:
                strings = set(values)
                self.values = [v for v in self.values if isinstance(v, str) and v in strings]
            return
        if self.values is None:
            seen: set[Any] = set()
            self.values = []
            for v in values:
                k = json_key(v)
                if k not in seen:
                    seen.add(k)
                    self.values.append(v)
        else:
            keys = {json_key(v) for v in values}
            self.values = [v for v in self.values if json_key(v) in keys]


def _conditional(sub: Conj, *extra: str) -> bool:
    """Whether the evaluated locations of ``sub`` depend on which subschemas validate."""
    kinds = {"anyOf", "oneOf", "if", "$dynamicRef", "$recursiveRef", *extra}
    return any(kw in kinds for _, kw in sub.seen)


def field_items(conj: Conj) -> list[tuple[str, Any]]:
    """Each field's name and value (``vars`` would miss a compiled class's fields)."""
    return [(name, getattr(conj, name)) for name in CONJ_FIELDS]


class Accumulator:
    """Folds schema objects into a ``Conj`` (resolving ``$ref`` inline, with a cycle guard)."""

    def __init__(self, index: SchemaIndex, legacy_refs: bool) -> None:
        self.index = index
        self.legacy_refs = legacy_refs  # draft 7 and older: siblings of $ref are ignored
        self.unknown: set[str] = set()

    def add(self, conj: Conj, schema: Any, loc: Loc, stack: tuple[str, ...] = ()) -> None:
        if isinstance(schema, Negated):
            conj.nots.append((schema.schema, loc))
            return
        if schema is True:
            return
        if schema is False:
            conj.false = True
            return
        if not isinstance(schema, dict):
            raise SchemaError("a schema must be an object or a boolean", pointer=loc.pointer)
        conj.sources.append((schema, loc))
        if self.legacy_refs and "$ref" in schema:
            self._ref(conj, schema, loc, stack)
            return
        handlers = _HANDLERS
        for key, value in schema.items():
            handler = handlers.get(key)
            if handler is None:
                if key not in CONSTRAINTS and key not in ANNOTATIONS and key not in DEPENDENT:
                    self.unknown.add(key)
                continue
            ptr = f"{loc.pointer}/{key}"  # no keyword needs escaping in a pointer
            conj.seen.append((ptr, key))
            handler(self, conj, value, schema, loc, ptr, stack)

    # -- references and composition

    def _ref(self, conj: Conj, schema: dict, loc: Loc, stack: tuple[str, ...]) -> None:
        ref = schema["$ref"]
        ptr = join_pointer(loc.pointer, "$ref")
        conj.seen.append((ptr, "$ref"))
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", pointer=ptr)
        target = self.index.resolve(ref, loc.base)
        if target is None:
            conj.issues.append((ptr, "$ref", f"$ref {ref!r} points outside this document "
                                             "(remote references are not fetched)"))
            return
        if target in stack:
            conj.issues.append((ptr, "$ref", f"$ref {ref!r} loops back to itself without any "
                                             "intervening structure"))
            return
        conj.inlined.add(target)
        self.add(conj, self.index.node_at(target), self.index.loc_of(target), stack + (target,))

    def _kw_ref(self, conj, value, schema, loc, ptr, stack) -> None:
        conj.seen.pop()  # _ref records it
        self._ref(conj, schema, loc, stack)

    def _kw_dynamicRef(self, conj, value, schema, loc, ptr, stack) -> None:
        conj.issues.append((ptr, "$dynamicRef", "$dynamicRef depends on the dynamic scope at "
                                                "validation time; not compiled"))

    def _kw_recursiveRef(self, conj, value, schema, loc, ptr, stack) -> None:
        # (a method, not an alias of _kw_dynamicRef: mypyc compiles no aliased methods)
        self._kw_dynamicRef(conj, value, schema, loc, ptr, stack)

    def _subs(self, value: Any, loc: Loc, key: str) -> list[Sub]:
        if not isinstance(value, list) or not value:
            raise SchemaError(f"{key} must be a non-empty array of schemas",
                              pointer=join_pointer(loc.pointer, key))
        return [(v, self.index.child(loc, v, key, i)) for i, v in enumerate(value)]

    def _kw_allOf(self, conj, value, schema, loc, ptr, stack) -> None:
        for sub, sub_loc in self._subs(value, loc, "allOf"):
            self.add(conj, sub, sub_loc, stack)

    def _kw_anyOf(self, conj, value, schema, loc, ptr, stack) -> None:
        conj.groups.append(Group("anyOf", self._subs(value, loc, "anyOf"), loc))

    def _kw_oneOf(self, conj, value, schema, loc, ptr, stack) -> None:
        conj.groups.append(Group("oneOf", self._subs(value, loc, "oneOf"), loc))

    def _kw_not(self, conj, value, schema, loc, ptr, stack) -> None:
        conj.nots.append((value, self.index.child(loc, value, "not")))

    def _kw_if(self, conj, value, schema, loc, ptr, stack) -> None:
        then = schema.get("then", True)
        other = schema.get("else", True)
        if then is True and other is True:
            return  # "if" alone has no effect
        if value is True or value is False:
            key = "then" if value is True else "else"
            chosen = then if value is True else other
            self.add(conj, chosen, self.index.child(loc, chosen, key), stack)
            return
        conj.groups.append(Group("if", [(value, self.index.child(loc, value, "if")),
                                        (then, self.index.child(loc, then, "then")),
                                        (other, self.index.child(loc, other, "else"))], loc))

    # -- any type

    def _kw_type(self, conj, value, schema, loc, ptr, stack) -> None:
        types = [value] if isinstance(value, str) else value
        if not isinstance(types, list) or not all(t in ALL_TYPES for t in types):
            raise SchemaError(f"type must be one of {', '.join(ALL_TYPES)} or an array of them",
                              pointer=ptr)
        conj.add_types(set(types))

    def _kw_enum(self, conj, value, schema, loc, ptr, stack) -> None:
        if not isinstance(value, list):
            raise SchemaError("enum must be an array", pointer=ptr)
        conj.add_values(value)

    def _kw_const(self, conj, value, schema, loc, ptr, stack) -> None:
        conj.add_values([value])

    # -- numbers

    def _number(self, value: Any, ptr: str) -> Decimal:
        if not is_json_number(value):
            raise SchemaError("must be a number", pointer=ptr)
        return to_decimal(value)

    def _kw_minimum(self, conj, value, schema, loc, ptr, stack) -> None:
        excl = schema.get("exclusiveMinimum") is True  # draft 4 form
        self._low(conj, self._number(value, ptr), excl)

    def _kw_exclusiveMinimum(self, conj, value, schema, loc, ptr, stack) -> None:
        if isinstance(value, bool):
            return  # draft 4 modifier, read by "minimum"
        self._low(conj, self._number(value, ptr), True)

    def _kw_maximum(self, conj, value, schema, loc, ptr, stack) -> None:
        excl = schema.get("exclusiveMaximum") is True
        self._high(conj, self._number(value, ptr), excl)

    def _kw_exclusiveMaximum(self, conj, value, schema, loc, ptr, stack) -> None:
        if isinstance(value, bool):
            return
        self._high(conj, self._number(value, ptr), True)

    @staticmethod
    def _low(conj: Conj, value: Decimal, excl: bool) -> None:
        if conj.low is None or value > conj.low[0] or (value == conj.low[0] and excl):
            conj.low = (value, excl)

    @staticmethod
    def _high(conj: Conj, value: Decimal, excl: bool) -> None:
        if conj.high is None or value < conj.high[0] or (value == conj.high[0] and excl):
            conj.high = (value, excl)

    def _kw_multipleOf(self, conj, value, schema, loc, ptr, stack) -> None:
        m = self._number(value, ptr)
        if m <= 0:
            raise SchemaError("multipleOf must be greater than 0", pointer=ptr)
        conj.multiples.append((m, ptr))

    # -- strings

    def _count(self, value: Any, ptr: str) -> int:
        if is_json_number(value) and to_decimal(value) == int(to_decimal(value)) and value >= 0:
            return int(value)
        raise SchemaError("must be a non-negative integer", pointer=ptr)

    def _kw_minLength(self, conj, value, schema, loc, ptr, stack) -> None:
        conj.min_len = max(conj.min_len, self._count(value, ptr))
        conj.length_ptrs.append(ptr)

    def _kw_maxLength(self, conj, value, schema, loc, ptr, stack) -> None:
        n = self._count(value, ptr)
        conj.max_len = n if conj.max_len is None else min(conj.max_len, n)
        conj.length_ptrs.append(ptr)

    def _kw_pattern(self, conj, value, schema, loc, ptr, stack) -> None:
        if not isinstance(value, str):
            raise SchemaError("pattern must be a string", pointer=ptr)
        conj.patterns.append((value, ptr))

    def _kw_format(self, conj, value, schema, loc, ptr, stack) -> None:
        if not isinstance(value, str):
            raise SchemaError("format must be a string", pointer=ptr)
        conj.formats.append((value, ptr))

    # -- arrays

    def _kw_items(self, conj, value, schema, loc, ptr, stack) -> None:
        if isinstance(value, list):  # draft 2019 and older: tuple form
            prefix = [(v, self.index.child(loc, v, "items", i)) for i, v in enumerate(value)]
            rest = schema.get("additionalItems")
            items = None if rest is None else (rest, self.index.child(loc, rest, "additionalItems"))
            conj.arrays.append(ArrayPart(prefix, items, loc))
            return
        if "prefixItems" in schema:
            return  # read together by _kw_prefixItems
        conj.arrays.append(ArrayPart([], (value, self.index.child(loc, value, "items")), loc))

    def _kw_prefixItems(self, conj, value, schema, loc, ptr, stack) -> None:
        prefix = self._subs(value, loc, "prefixItems")
        rest = schema.get("items")
        items = None if rest is None else (rest, self.index.child(loc, rest, "items"))
        conj.arrays.append(ArrayPart(prefix, items, loc))

    def _kw_minItems(self, conj, value, schema, loc, ptr, stack) -> None:
        conj.min_items = max(conj.min_items, self._count(value, ptr))

    def _kw_maxItems(self, conj, value, schema, loc, ptr, stack) -> None:
        n = self._count(value, ptr)
        conj.max_items = n if conj.max_items is None else min(conj.max_items, n)

    def _kw_uniqueItems(self, conj, value, schema, loc, ptr, stack) -> None:
        if value is True:
            conj.unique.append(ptr)

    def _kw_contains(self, conj, value, schema, loc, ptr, stack) -> None:
        low = schema.get("minContains", 1)
        high = schema.get("maxContains")
        if low == 0 and high is None:
            return  # contains with minContains 0 accepts every array
        conj.contains.append(Contains(value, self.index.child(loc, value, "contains"),
                                      self._count(low, join_pointer(loc.pointer, "minContains")),
                                      None if high is None else self._count(
                                          high, join_pointer(loc.pointer, "maxContains")), ptr))

    def _kw_unevaluatedItems(self, conj, value, schema, loc, ptr, stack) -> None:
        # Exact when the schema object's own in-place subtree has no conditional applicators:
        # then the evaluated positions are its prefixItems (and all of them once "items" is
        # present or "contains" looks at them).
        sub = Conj()
        self._scoped(sub, schema, loc, "unevaluatedItems", stack)
        if sub.issues or _conditional(sub, "contains"):
            conj.issues.append((ptr, "unevaluatedItems", "unevaluatedItems next to anyOf/oneOf/"
                                "if/not/contains depends on which branches validate"))
            return
        if any(p.items is not None for p in sub.arrays):
            return
        n = max((len(p.prefix) for p in sub.arrays), default=0)
        conj.arrays.append(ArrayPart([(True, loc)] * n,
                                     (value, self.index.child(loc, value, "unevaluatedItems")), loc))

    def _scoped(self, sub: Conj, schema: dict, loc: Loc, drop: str,
                stack: tuple[str, ...]) -> None:
        self.add(sub, {k: v for k, v in schema.items() if k != drop}, loc, stack)

    # -- objects

    def _kw_properties(self, conj, value, schema, loc, ptr, stack) -> None:
        self._object_part(conj, schema, loc)

    def _kw_patternProperties(self, conj, value, schema, loc, ptr, stack) -> None:
        if "properties" not in schema:
            self._object_part(conj, schema, loc)

    def _kw_additionalProperties(self, conj, value, schema, loc, ptr, stack) -> None:
        if "properties" not in schema and "patternProperties" not in schema:
            self._object_part(conj, schema, loc)

    def _object_part(self, conj: Conj, schema: dict, loc: Loc) -> None:
        props = schema.get("properties", {})
        pats = schema.get("patternProperties", {})
        if not isinstance(props, dict) or not isinstance(pats, dict):
            raise SchemaError("properties and patternProperties must be objects",
                              pointer=loc.pointer)
        add = schema.get("additionalProperties")
        conj.objects.append(ObjectPart(
            {k: (v, self.index.child(loc, v, "properties", k)) for k, v in props.items()},
            [(p, (v, self.index.child(loc, v, "patternProperties", p))) for p, v in pats.items()],
            None if add is None else (add, self.index.child(loc, add, "additionalProperties")),
            loc,
        ))

    def _kw_required(self, conj, value, schema, loc, ptr, stack) -> None:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SchemaError("required must be an array of strings", pointer=ptr)
        for name in value:
            if name not in conj.required:
                conj.required.append(name)

    def _kw_propertyNames(self, conj, value, schema, loc, ptr, stack) -> None:
        conj.property_names.append((value, self.index.child(loc, value, "propertyNames")))

    def _kw_minProperties(self, conj, value, schema, loc, ptr, stack) -> None:
        conj.min_props = max(conj.min_props, self._count(value, ptr))
        conj.count_ptrs.append(ptr)

    def _kw_maxProperties(self, conj, value, schema, loc, ptr, stack) -> None:
        n = self._count(value, ptr)
        conj.max_props = n if conj.max_props is None else min(conj.max_props, n)
        conj.count_ptrs.append(ptr)

    def _kw_dependentRequired(self, conj, value, schema, loc, ptr, stack) -> None:
        if not isinstance(value, dict) or not all(
                isinstance(v, list) and all(isinstance(x, str) for x in v) for v in value.values()):
            raise SchemaError("dependentRequired must map names to arrays of names", pointer=ptr)
        for key, needed in value.items():
            if needed:
                conj.dependencies.append((key, list(needed), ptr))

    def _kw_dependentSchemas(self, conj, value, schema, loc, ptr, stack) -> None:
        if isinstance(value, dict) and any(v is not True for v in value.values()):
            conj.object_issues.append((ptr, "dependentSchemas",
                                       "dependentSchemas (a schema applying when a property is "
                                       "present) is left to the validator"))

    def _kw_dependencies(self, conj, value, schema, loc, ptr, stack) -> None:
        if not isinstance(value, dict):
            raise SchemaError("dependencies must be an object", pointer=ptr)
        for key, dep in value.items():  # draft 7: an array is dependentRequired
            if isinstance(dep, list) and all(isinstance(x, str) for x in dep):
                if dep:
                    conj.dependencies.append((key, list(dep), ptr))
            elif dep is not True and dep != {}:
                conj.object_issues.append((join_pointer(ptr, key), "dependencies",
                                           "a schema dependency (applying when a property is "
                                           "present) is left to the validator"))

    def _kw_unevaluatedProperties(self, conj, value, schema, loc, ptr, stack) -> None:
        sub = Conj()
        self._scoped(sub, schema, loc, "unevaluatedProperties", stack)
        if sub.issues or sub.object_issues or _conditional(sub, "dependentSchemas"):
            conj.issues.append((ptr, "unevaluatedProperties", "unevaluatedProperties next to "
                                "anyOf/oneOf/if/not/dependentSchemas depends on which branches "
                                "validate"))
            return
        if any(p.additional is not None for p in sub.objects):
            return
        props: dict[str, Sub] = {}
        pats: list[tuple[str, Sub]] = []
        for p in sub.objects:
            for k in p.properties:
                props.setdefault(k, (True, loc))
            for pat, _ in p.patterns:
                pats.append((pat, (True, loc)))
        conj.objects.append(ObjectPart(props, pats, (value, self.index.child(
            loc, value, "unevaluatedProperties")), loc))


# keyword -> its handler (Accumulator._kw_<keyword>), looked up once: add() meets hundreds of
# keywords. Unbound, so an Accumulator holds no bound methods of itself (that cycle kept
# every compile's schema index alive until the cyclic collector ran). Annotations and
# keywords read by another one's handler ("then") have none.
_HANDLERS: Final[dict[str, Callable[..., None]]] = {
    key: getattr(Accumulator, "_kw_" + key.lstrip("$"))
    for key in CONSTRAINTS - ANNOTATIONS - DEPENDENT}
