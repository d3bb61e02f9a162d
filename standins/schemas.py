"""Deterministic JSON instances of JSON schemas, and schema-aware corruption of them.

The stand-in judge server (:mod:`standins.openai_server`) answers structured requests from
the request's own schema, so it needs a generator that turns the schema pydantic emits for a
response model into a *valid* instance, without knowing the model. It also needs the opposite:
an instance that is valid JSON but breaks the schema in the ways a real judge does (an index out
of range, the same index twice, a missing field), for the fault-injection suite.

Supported schema features: ``$ref`` into ``$defs``/``definitions`` (any JSON pointer into the
root, as a fragment ``#/$defs/X`` or a root path ``/$defs/X``), ``allOf`` (merged),
``anyOf``/``oneOf`` (the first non-null option), ``enum``/``const``
(pydantic ``Literal``), ``type`` lists (the first non-null type), objects (every declared
property, required or not), ``additionalProperties`` maps with ``minProperties``, arrays with
``items``/``prefixItems``/``minItems``/``maxItems``/``uniqueItems``, strings with
``minLength``/``maxLength``/``format``, integers and numbers with ``minimum``/``maximum``/
``exclusiveMinimum``/``exclusiveMaximum``/``multipleOf``, booleans and nulls. ``pattern`` and
``not`` are ignored (a generated string is not guaranteed to match a pattern).

Array element *i* is generated with *variant* ``i``, and every ``enum`` below it takes
``enum[i % len(enum)]``: a list of items whose ``index`` is ``Literal[1, 2, 3]`` with
``minItems == maxItems == 3`` comes out with indices 1, 2, 3, unique as a judge's should be.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "InvalidVariant",
    "SchemaError",
    "find_embedded_schema",
    "invalid_instance",
    "schema_instance",
]

JSONSchema = Mapping[str, Any]
"""A JSON schema as parsed from JSON (a mapping; boolean schemas are handled separately)."""

InvalidVariant = Literal["cycle", "out_of_range", "duplicate", "missing"]
"""How :func:`invalid_instance` breaks an instance (``cycle`` is resolved by the caller)."""

# Recursive models (a tree whose nodes hold child nodes) would otherwise recurse forever; past
# this depth arrays and maps come out empty and objects only keep what they must.
_MAX_DEPTH = 24

# Values for string formats that pydantic and jsonschema validate.
_FORMAT_SAMPLES: dict[str, str] = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00",
    "duration": "P1D",
    "email": "judge@example.com",
    "idn-email": "judge@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "iri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "json-pointer": "/a",
    "regex": ".*",
}


class SchemaError(ValueError):
    """A schema cannot be interpreted (a dangling ``$ref``, a non-object schema...).

    Attributes:
        path: JSON-pointer-like location of the problem inside the schema.
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{message} (at schema path {path or '/'})")
        self.path = path


def schema_instance(schema: JSONSchema | bool, *, variant: int = 0) -> Any:
    """Build a deterministic JSON instance that validates against ``schema``.

    Args:
        schema: A JSON schema (draft 2020-12 / OpenAPI style as pydantic emits it). ``$ref``
            pointers are resolved against this root.
        variant: Which of several valid instances to build; enums take ``enum[variant % n]``.
            Array elements use their position as variant, so enum fields differ across items.

    Returns:
        A JSON-compatible value (dict, list, str, int, float, bool or None).

    Raises:
        SchemaError: If the schema is not a mapping or boolean, or a ``$ref`` cannot be resolved.
    """
    if isinstance(schema, bool):
        # ``true`` admits anything; ``false`` admits nothing, and null is as close as we get.
        return {} if schema else None
    if not isinstance(schema, Mapping):
        raise SchemaError(f"schema must be a JSON object, got {type(schema).__name__}", path="")
    return _Generator(schema).build(schema, variant=variant, depth=0, path="")


def find_embedded_schema(text: str, marker: str = "json_schema") -> dict[str, Any] | None:
    r"""Find the JSON schema embedded in a prompt after ``marker``.

    instructor's ``JSON`` and ``MD_JSON`` modes put the response model's schema into the system
    message as ``... json_schema:\n\n{...}``; this returns that object.

    Args:
        text: The prompt text to search.
        marker: The word that precedes the schema.

    Returns:
        The first JSON object that starts after ``marker`` and parses, or None.
    """
    decoder = json.JSONDecoder()
    start = text.find(marker)
    while start != -1:
        brace = text.find("{", start + len(marker))
        while brace != -1:
            try:
                value, _ = decoder.raw_decode(text, brace)
            except json.JSONDecodeError:
                brace = text.find("{", brace + 1)
                continue
            if isinstance(value, dict):
                return value
            brace = text.find("{", brace + 1)
        start = text.find(marker, start + len(marker))
    return None


def invalid_instance(
    instance: Any,
    schema: JSONSchema | None,
    variant: Literal["out_of_range", "duplicate", "missing"] = "out_of_range",
) -> tuple[Any, str]:
    """Corrupt a valid instance so that it is still JSON but fails ``schema``.

    The requested ``variant`` is used when the schema offers a place for it; otherwise the first
    applicable of ``out_of_range`` (an enum/const field set outside its values, e.g. a bonus-point
    index past the last point), ``duplicate`` (two array items share an enum field, e.g. the same
    index twice), ``missing`` (a required field deleted). When none applies, the instance is
    replaced by a value of the wrong JSON type (a list for an object schema, else an object).

    Args:
        instance: A valid instance of ``schema`` (not modified; a deep copy is changed).
        schema: The schema the instance must fail, or None when unknown.
        variant: The preferred way of breaking it.

    Returns:
        The corrupted instance and the variant actually applied (``"wrong_type"`` for the
        fallback).
    """
    if schema is None or not isinstance(schema, Mapping):
        return _wrong_type(instance), "wrong_type"
    broken = copy.deepcopy(instance)
    sites = _Sites()
    _Generator(schema).collect_sites(broken, schema, sites, depth=0)
    order: list[Literal["out_of_range", "duplicate", "missing"]] = [
        variant,
        "out_of_range",
        "duplicate",
        "missing",
    ]
    for kind in order:
        site = sites.first(kind)
        if site is not None:
            site()
            return broken, kind
    return _wrong_type(instance), "wrong_type"


def _wrong_type(instance: Any) -> Any:
    return [] if isinstance(instance, dict) else {"unexpected": True}


def _out_of_enum(values: Sequence[Any]) -> Any:
    """Return a value of the enum's own type that is not one of ``values``."""
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if numbers and len(numbers) == len(values):
        return max(numbers) + 1
    candidate = "not-a-listed-value"
    while candidate in values:
        candidate += "!"
    return candidate


class _Sites:
    """Places where an instance can be broken, found in document order."""

    def __init__(self) -> None:
        self.found: dict[str, list[Any]] = {"out_of_range": [], "duplicate": [], "missing": []}

    def add(self, kind: str, action: Any) -> None:
        self.found[kind].append(action)

    def first(self, kind: str) -> Any:
        actions = self.found.get(kind) or []
        return actions[0] if actions else None


class _Generator:
    """Walks one root schema; holds the root so ``$ref`` pointers resolve against it."""

    def __init__(self, root: JSONSchema) -> None:
        self.root = root

    # -- schema resolution ------------------------------------------------------------------

    def resolve(self, schema: Any, path: str) -> dict[str, Any]:
        """Follow ``$ref`` and merge ``allOf`` until a plain schema remains."""
        if isinstance(schema, bool):
            return {} if schema else {"not": {}}
        if not isinstance(schema, Mapping):
            raise SchemaError(
                f"schema must be a JSON object, got {type(schema).__name__}", path=path
            )
        seen: set[str] = set()
        current: dict[str, Any] = dict(schema)
        while "$ref" in current:
            ref = current.pop("$ref")
            if not isinstance(ref, str) or ref in seen:
                raise SchemaError(f"cannot resolve $ref {ref!r}", path=path)
            seen.add(ref)
            target = self._pointer(ref, path)
            # Sibling keywords next to $ref (description, default) refine the target.
            current = {**target, **current}
        if "allOf" in current:
            merged: dict[str, Any] = {}
            for index, part in enumerate(current.pop("allOf") or []):
                merged = _merge(merged, self.resolve(part, f"{path}/allOf/{index}"))
            current = _merge(merged, current)
        return current

    def _pointer(self, ref: str, path: str) -> dict[str, Any]:
        if ref.startswith("/"):
            # A path reference without a fragment resolves against the root document (these
            # schemas have no $id): litellm sends Anthropic tools ``/$defs/Model`` refs (its
            # issue 7755), which Anthropic's API takes as pointers into the root.
            ref = "#" + ref
        if not ref.startswith("#"):
            raise SchemaError(f"only local $ref pointers are supported, got {ref!r}", path=path)
        node: Any = self.root
        for raw in ref[1:].split("/")[1:] if ref != "#" else []:
            key = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                raise SchemaError(f"$ref {ref!r} points nowhere", path=path)
        if not isinstance(node, Mapping):
            raise SchemaError(f"$ref {ref!r} does not point to a schema", path=path)
        return dict(node)

    def choose_option(self, schema: dict[str, Any], path: str) -> dict[str, Any] | None:
        """Pick the first non-null ``anyOf``/``oneOf`` option, resolved; None if all are null."""
        for keyword in ("anyOf", "oneOf"):
            options = schema.get(keyword)
            if not options:
                continue
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
            resolved = [
                self.resolve(option, f"{path}/{keyword}/{i}") for i, option in enumerate(options)
            ]
            for option in resolved:
                if _schema_type(option) != "null":
                    return _merge(rest, option)
            return None
        return schema

    # -- generation -------------------------------------------------------------------------

    def build(self, schema: Any, *, variant: int, depth: int, path: str) -> Any:
        """Build an instance of ``schema``; see :func:`schema_instance`."""
        resolved = self.resolve(schema, path)
        chosen = self.choose_option(resolved, path)
        if chosen is None:
            return None
        if chosen is not resolved:
            # The chosen option may itself be a union (nested Optional[Union[...]]).
            return self.build(chosen, variant=variant, depth=depth + 1, path=path)
        if "const" in resolved:
            return copy.deepcopy(resolved["const"])
        if "enum" in resolved:
            values = resolved["enum"]
            if not isinstance(values, list) or not values:
                raise SchemaError("enum must be a non-empty list", path=f"{path}/enum")
            return copy.deepcopy(values[variant % len(values)])
        kind = _schema_type(resolved)
        if kind == "object":
            return self._object(resolved, variant=variant, depth=depth, path=path)
        if kind == "array":
            return self._array(resolved, depth=depth, path=path)
        if kind == "string":
            return _string(resolved, variant)
        if kind == "integer":
            return _integer(resolved, variant)
        if kind == "number":
            return _number(resolved, variant)
        if kind == "boolean":
            return variant % 2 == 0
        # "null", or a schema with no constraint at all (pydantic ``Any``): null is valid.
        return None

    def _object(self, schema: dict[str, Any], *, variant: int, depth: int, path: str) -> Any:
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        result: dict[str, Any] = {}
        for name, sub in properties.items():
            if depth >= _MAX_DEPTH and name not in required:
                continue
            result[name] = self.build(
                sub, variant=variant, depth=depth + 1, path=f"{path}/properties/{name}"
            )
        extra = schema.get("additionalProperties")
        wanted = int(schema.get("minProperties") or 0)
        index = 0
        while len(result) < wanted and depth < _MAX_DEPTH:
            key = f"key{index}"
            index += 1
            if key in result:
                continue
            sub_schema = extra if isinstance(extra, Mapping) else {}
            result[key] = self.build(
                sub_schema,
                variant=index,
                depth=depth + 1,
                path=f"{path}/additionalProperties",
            )
        return result

    def _array(self, schema: dict[str, Any], *, depth: int, path: str) -> list[Any]:
        prefix = schema.get("prefixItems") or []
        items = schema.get("items", {})
        minimum = int(schema.get("minItems") or 0)
        maximum = schema.get("maxItems")
        # One element even when none is required, so that callers see a non-trivial instance
        # (an empty list of bonus points exercises nothing); recursion depth caps this.
        count = max(minimum, len(prefix), 0 if depth >= _MAX_DEPTH else 1)
        if items is False:
            count = len(prefix)
        if maximum is not None:
            count = min(count, int(maximum))
        unique = bool(schema.get("uniqueItems"))
        result: list[Any] = []
        seen: list[str] = []
        attempt = 0
        while len(result) < count:
            position = len(result)
            if position < len(prefix):
                sub = prefix[position]
                sub_path = f"{path}/prefixItems/{position}"
            else:
                sub = items
                sub_path = f"{path}/items"
            value = self.build(sub, variant=attempt, depth=depth + 1, path=sub_path)
            attempt += 1
            key = json.dumps(value, sort_keys=True)
            if unique and key in seen:
                if attempt > count + 64:
                    raise SchemaError("cannot build enough unique items", path=path)
                continue
            seen.append(key)
            result.append(value)
        return result

    # -- corruption -------------------------------------------------------------------------

    def collect_sites(self, instance: Any, schema: Any, sites: _Sites, *, depth: int) -> None:
        """Record where ``instance`` can be broken against ``schema`` (document order)."""
        if depth > _MAX_DEPTH:
            return
        try:
            resolved = self.resolve(schema, "")
            chosen = self.choose_option(resolved, "")
        except SchemaError:
            return
        if chosen is None:
            return
        if chosen is not resolved:
            self.collect_sites(instance, chosen, sites, depth=depth + 1)
            return
        if isinstance(instance, dict):
            self._object_sites(instance, resolved, sites, depth=depth)
        elif isinstance(instance, list):
            self._array_sites(instance, resolved, sites, depth=depth)

    def _enum_values(self, schema: Any) -> list[Any] | None:
        try:
            resolved = self.resolve(schema, "")
            chosen = self.choose_option(resolved, "")
        except SchemaError:
            return None
        if chosen is None:
            return None
        if "const" in chosen:
            return [chosen["const"]]
        values = chosen.get("enum")
        return list(values) if isinstance(values, list) and values else None

    def _object_sites(
        self, instance: dict[str, Any], schema: dict[str, Any], sites: _Sites, *, depth: int
    ) -> None:
        properties: Mapping[str, Any] = schema.get("properties") or {}
        for name, sub in properties.items():
            if name not in instance:
                continue
            values = self._enum_values(sub)
            if values is not None:
                bad = _out_of_enum(values)
                sites.add("out_of_range", _setter(instance, name, bad))
            self.collect_sites(instance[name], sub, sites, depth=depth + 1)
        for name in schema.get("required") or []:
            if name in instance:
                sites.add("missing", _deleter(instance, name))

    def _array_sites(
        self, instance: list[Any], schema: dict[str, Any], sites: _Sites, *, depth: int
    ) -> None:
        items = schema.get("items")
        if isinstance(items, Mapping) and len(instance) >= 2:
            try:
                item_schema = self.choose_option(self.resolve(items, ""), "") or {}
            except SchemaError:
                item_schema = {}
            properties: Mapping[str, Any] = item_schema.get("properties") or {}
            first, second = instance[0], instance[1]
            for name, sub in properties.items():
                if (
                    isinstance(first, dict)
                    and isinstance(second, dict)
                    and name in first
                    and self._enum_values(sub) is not None
                ):
                    sites.add("duplicate", _setter(second, name, copy.deepcopy(first[name])))
                    break
            if self._enum_values(items) is not None:
                sites.add("duplicate", _setter(instance, 1, copy.deepcopy(instance[0])))
        for index, element in enumerate(instance):
            prefix = schema.get("prefixItems") or []
            sub = prefix[index] if index < len(prefix) else items
            if sub is None or isinstance(sub, bool):
                continue
            self.collect_sites(element, sub, sites, depth=depth + 1)


def _setter(container: Any, key: Any, value: Any) -> Any:
    def apply() -> None:
        container[key] = value

    return apply


def _deleter(container: dict[str, Any], key: str) -> Any:
    def apply() -> None:
        container.pop(key, None)

    return apply


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Merge two schemas the way ``allOf`` means it, for the keywords the generator reads."""
    merged = dict(base)
    for key, value in extra.items():
        if key == "properties" and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **value}
        elif key == "required" and isinstance(merged.get(key), list):
            merged[key] = list(dict.fromkeys([*merged[key], *value]))
        else:
            merged[key] = value
    return merged


def _schema_type(schema: Mapping[str, Any]) -> str | None:
    declared = schema.get("type")
    if isinstance(declared, list):
        non_null = [t for t in declared if t != "null"]
        return non_null[0] if non_null else ("null" if declared else None)
    if isinstance(declared, str):
        return declared
    if "properties" in schema or "additionalProperties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return None


def _string(schema: Mapping[str, Any], variant: int) -> str:
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMAT_SAMPLES:
        return _FORMAT_SAMPLES[fmt]
    text = "text" if variant == 0 else f"text{variant}"
    minimum = int(schema.get("minLength") or 0)
    maximum = schema.get("maxLength")
    if len(text) < minimum:
        text = text + "x" * (minimum - len(text))
    if maximum is not None and len(text) > int(maximum):
        # Keep the variant digits at the end so short strings stay distinct across items.
        text = text[-int(maximum) :] if int(maximum) > 0 else ""
    return text


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, float | None, bool, bool]:
    low = schema.get("minimum")
    high = schema.get("maximum")
    low_open = high_open = False
    exclusive_low = schema.get("exclusiveMinimum")
    exclusive_high = schema.get("exclusiveMaximum")
    if _is_number(exclusive_low) and (low is None or exclusive_low >= low):
        low, low_open = exclusive_low, True
    if _is_number(exclusive_high) and (high is None or exclusive_high <= high):
        high, high_open = exclusive_high, True
    return low, high, low_open, high_open


def _integer(schema: Mapping[str, Any], variant: int) -> int:
    low, high, low_open, high_open = _bounds(schema)
    lowest = None if low is None else (math.floor(low) + 1 if low_open else math.ceil(low))
    highest = None if high is None else (math.ceil(high) - 1 if high_open else math.floor(high))
    if lowest is not None:
        value = lowest + variant
    elif highest is not None:
        value = min(0, highest) - variant
    else:
        value = variant
    step = schema.get("multipleOf")
    if isinstance(step, int) and step > 0:
        value = -(-value // step) * step
    if highest is not None and value > highest:
        value = highest if lowest is None else max(lowest, highest - (variant % 2))
    return int(value)


def _number(schema: Mapping[str, Any], variant: int) -> float:
    low, high, low_open, high_open = _bounds(schema)
    if low is not None:
        value = float(low) + variant + (0.5 if low_open else 0.0)
    elif high is not None:
        value = min(0.0, float(high) - (0.5 if high_open else 0.0)) - variant
    else:
        value = float(variant)
    if high is not None and (value > high or (high_open and value >= high)):
        # Squeeze into the interval: the midpoint is strictly inside an open range.
        value = (float(low) + float(high)) / 2 if low is not None else float(high) - 0.5
    step = schema.get("multipleOf")
    if isinstance(step, int | float) and not isinstance(step, bool) and step > 0:
        value = math.ceil(value / step) * step
    return value
