"""JSON for sectionmark's data models, derived from their dataclasses.

The section map and the profile session are versioned JSON documents. Writing
each field by hand twice (to and from JSON) is where typos and half-checked
input come from, so both directions are derived here from the dataclass
fields and their type hints. Reading validates as it goes: every value must
have its declared type (an ``int`` field rejects ``1.5`` and ``true``; a
``float`` field rejects NaN and infinities), and an error names the place,
e.g. ``sites[3].shares[0].weight: expected a finite number, got NaN``.

Supported field types: ``str``, ``int``, ``float``, ``bool``, ``Optional[T]``,
``list[T]``, ``tuple[str, ...]`` (section paths), ``dict[str, T]`` and nested
dataclasses. Field names are the JSON keys; a field with a default may be
missing from the input. A field made with `json_field` can say more about its
JSON form: ``rounded`` (its numbers are written as integers, for nanosecond
totals kept as floats in memory), ``entries=(key, value)`` (a dict, or a list
of pairs, written as a list of ``{key: ..., value: ...}`` objects: section
paths cannot be JSON object keys), ``stored=False`` (in memory only, such
as per-event arrays: neither written nor read), ``omit_none`` (left out of
the output while None, so that one of several alternative keys is written;
read back as its default) and ``bounds=(low, high)`` (its number, or each
number of its list, must lie in ``low <= x < high``: a count or a size read
from a file must be one a machine can have, or sums of it overflow later). Read-only properties named in
a class's ``JSON_PROPERTIES`` are written too, for readers' convenience, and
ignored when reading.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import lru_cache
from typing import Any, NamedTuple, Optional, TypeVar, Union

T = TypeVar("T")


class SchemaError(ValueError):
    """Input that does not match the dataclass schema; the message names the place."""


class _FieldOptions(NamedTuple):
    rounded: bool = False
    entries: Optional[tuple[str, str]] = None
    stored: bool = True
    omit_none: bool = False
    bounds: Optional[tuple[float, float]] = None


_OPTIONS = "sectionmark.serialization"
_PLAIN = _FieldOptions()


def json_field(
    *, rounded: bool = False, entries: Optional[tuple[str, str]] = None, stored: bool = True, omit_none: bool = False,
    bounds: Optional[tuple[float, float]] = None, **field_arguments: Any
) -> Any:
    """``dataclasses.field(**field_arguments)`` with the JSON options described in the module docstring."""
    options = _FieldOptions(rounded, entries, stored, omit_none, bounds)
    return dataclasses.field(metadata={_OPTIONS: options}, **field_arguments)


def _options(field: dataclasses.Field) -> _FieldOptions:
    return field.metadata.get(_OPTIONS, _PLAIN)


def check_version(data: Any, expected: int, document: str, advice: str) -> None:
    """Refuse anything but a JSON object of this document's ``version`` (SchemaError, one line)."""
    if not isinstance(data, dict) or "version" not in data:
        raise SchemaError(f"not a sectionmark {document} (no 'version' field)")
    # The version is an integer field like any other: JSON true equals 1 in Python, and is refused.
    if type(data["version"]) is not int or data["version"] != expected:
        raise SchemaError(f"{document} version {data['version']!r} is not supported (expected {expected}); {advice}")


def from_versioned_json(cls: type, data: Any, *, version: int, document: str, root: str, advice: str,
                        error: type[Exception] = SchemaError) -> Any:
    """`check_version`, then `from_json`: one line ("malformed sectionmark <document>: <place>: ..."), raised as
    ``error`` (the caller's one exception type for bad input)."""
    try:
        check_version(data, version, document, advice)
        try:
            return from_json(cls, data, root)
        except SchemaError as problem:
            raise SchemaError(f"malformed sectionmark {document}: {problem}") from None
    except SchemaError as problem:
        if error is SchemaError:
            raise
        raise error(str(problem)) from None


def _property(value: Any, name: str) -> Any:
    """A JSON property's value: an attribute, or what a method called without arguments returns."""
    attribute = getattr(value, name)
    return attribute() if callable(attribute) else attribute


def to_json(value: Any) -> Any:
    """A dataclass (or list/tuple/dict of them) as plain JSON-serialisable values."""
    kind = type(value)
    if kind in _SCALARS:  # most values: first, for speed
        return value
    if kind is list or kind is tuple:
        return [item if type(item) in _SCALARS else to_json(item) for item in value]
    plan = _write_plan(kind)
    if plan is not None:
        fields, properties, omitted_when_none = plan
        data = {name: _write_field(options, getattr(value, name)) for name, options in fields}
        for name in omitted_when_none:
            if data[name] is None:
                del data[name]
        data.update((name, to_json(_property(value, name))) for name in properties)
        return data
    if isinstance(value, (str, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    return value


_SCALARS = frozenset((str, int, float, bool, type(None)))


@lru_cache(maxsize=None)
def _write_plan(cls: type) -> Optional[tuple[tuple[tuple[str, _FieldOptions], ...], tuple[str, ...], tuple[str, ...]]]:
    """A dataclass's stored fields with their options, its JSON properties and the fields left out while None;
    None for other types.

    Worked out once per class: a section map writes tens of thousands of fields.
    """
    if not dataclasses.is_dataclass(cls):
        return None
    fields = tuple((field.name, _options(field)) for field in _fields(cls))
    return (fields, tuple(getattr(cls, "JSON_PROPERTIES", ())),
            tuple(name for name, options in fields if options.omit_none))


def _write_field(options: _FieldOptions, value: Any) -> Any:
    if options is _PLAIN:
        return value if type(value) in _SCALARS else to_json(value)
    if options.entries:
        key_name, value_name = options.entries
        value = [{key_name: key, value_name: item} for key, item in (value.items() if isinstance(value, dict) else value)]
    value = to_json(value)
    return _rounded(value) if options.rounded else value


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value)
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    return value


def from_json(cls: type[T], data: Any, where: str = "") -> T:
    """Build ``cls`` from JSON data, checking every value against the field types."""
    return _read(cls, data, where or cls.__name__)


@lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return tuple(field for field in dataclasses.fields(cls) if field.init and _options(field).stored)


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _read(kind: Any, data: Any, where: str) -> Any:
    if kind is float:  # scalars first: most values are
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise SchemaError(f"{where}: expected a number, got {_describe(data)}")
        try:
            value = float(data)
        except OverflowError:  # an integer beyond any float (10**400)
            raise SchemaError(f"{where}: expected a finite number, got an integer of {data.bit_length()} bits") from None
        if not math.isfinite(value):
            raise SchemaError(f"{where}: expected a finite number, got {data}")
        return value
    if kind is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise SchemaError(f"{where}: expected an integer, got {_describe(data)}")
        return data
    if kind is str:
        return _text(data, where)
    if kind is bool:
        return _expect(kind, data, where)
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, types.UnionType):
        options = [option for option in arguments if option is not type(None)]
        if data is None:
            if len(options) < len(arguments):
                return None
            raise SchemaError(f"{where}: must not be null")
        return _read(options[0] if len(options) == 1 else Union[tuple(options)], data, where)
    if dataclasses.is_dataclass(kind):
        return _read_dataclass(kind, data, where)
    if origin is list:
        return [_read(arguments[0], item, f"{where}[{index}]") for index, item in enumerate(_expect(list, data, where))]
    if origin is tuple:
        items = _expect(list, data, where)
        return tuple(_read(arguments[0], item, f"{where}[{index}]") for index, item in enumerate(items))
    if origin is dict:
        mapping = _expect(dict, data, where)
        return {_read(arguments[0], key, f"{where} key"): _read(arguments[1], item, f"{where}.{key}") for key, item in mapping.items()}
    if kind is Any:
        return data
    raise TypeError(f"serialization: unsupported field type {kind!r} at {where}")


def _read_dataclass(cls: type, data: Any, where: str) -> Any:
    mapping = _expect(dict, data, where)
    hints = _hints(cls)
    values = {}
    for field in _fields(cls):
        if field.name in mapping:
            here, options = f"{where}.{field.name}", _options(field)
            kind, data_here = hints[field.name], mapping[field.name]
            values[field.name] = (_read_entries(kind, options.entries, data_here, here) if options.entries
                                  else _read(kind, data_here, here))
            if options.bounds is not None:
                _check_bounds(values[field.name], options.bounds, here)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise SchemaError(f"{where}: missing field '{field.name}'")
    return cls(**values)


def _check_bounds(value: Any, bounds: tuple[float, float], where: str) -> None:
    """A number (or each number of a list; None passes) in ``low <= x < high``, else one SchemaError naming it."""
    low, high = bounds
    for index, number in enumerate(value if isinstance(value, list) else [value]):
        if number is not None and not low <= number < high:
            here = f"{where}[{index}]" if isinstance(value, list) else where
            power = int(high).bit_length() - 1
            high_text = f"2**{power}" if high == 2**power and power >= 32 else f"{high:g}"
            raise SchemaError(f"{here}: expected a number from {low:g} to below {high_text}, got {_describe(number)}")


def _read_entries(kind: Any, names: tuple[str, str], data: Any, where: str) -> Any:
    """A ``dict[K, V]`` or ``list[tuple[K, V]]`` field from its list of ``{names[0]: K, names[1]: V}`` objects."""
    is_dict = typing.get_origin(kind) is dict
    key_kind, value_kind = typing.get_args(kind if is_dict else typing.get_args(kind)[0])
    pairs = []
    for index, item in enumerate(_expect(list, data, where)):
        here = f"{where}[{index}]"
        item = _expect(dict, item, here)
        missing = [name for name in names if name not in item]
        if missing:
            raise SchemaError(f"{here}: missing field '{missing[0]}'")
        pairs.append((_read(key_kind, item[names[0]], f"{here}.{names[0]}"),
                      _read(value_kind, item[names[1]], f"{here}.{names[1]}")))
    return dict(pairs) if is_dict else pairs


def _text(data: Any, where: str) -> str:
    """A JSON string that is also valid Unicode: JSON's ``"\\ud800"`` (a lone surrogate) cannot be written as UTF-8."""
    text = _expect(str, data, where)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise SchemaError(f"{where}: not valid Unicode (a lone surrogate)") from None
    return text


def _expect(kind: type, data: Any, where: str) -> Any:
    if not isinstance(data, kind) or (kind is not bool and isinstance(data, bool)):
        names = {dict: "an object", list: "a list", str: "a string", bool: "true or false"}
        raise SchemaError(f"{where}: expected {names.get(kind, kind.__name__)}, got {_describe(data)}")
    return data


def _describe(data: Any) -> str:
    if data is None:
        return "null"
    text = repr(data)
    return f"{type(data).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"
