"""The report's JSON codec: a record (a dataclass or a msgspec Struct) to a JSON object and
back, by its fields.

Each field is written under its name, in the order the class declares it (so a class declares
its fields in the order of its keys in docs/json.md), and read back by its annotation:

- `float`: a finite number >= 0; `int` the same, truncated (counts are written as numbers);
  `bool`; `str`; a `Literal`: one of its values; `X | None`: null or an X;
- `list[str]` (or a tuple of them): checked whole; `dict[str, float]`: each value a number;
- a list or tuple of records, or one: each read by this codec, its index in the path.

A key a saved report lacks (one an older hlogap wrote) keeps the field's default; a field
without a default is required (KeyError naming its path). A wrong value is a ValueError naming
its path (`ops[3].flops is 'x', not a number`), which `load_json` turns into one line.

What a dataclass field needs beyond its annotation it says in its metadata
(`field(metadata=meta(...))`; a Struct's fields have none: each is written under its name):
another key, written only when set or never, its own reader or writer, the value read where the
key is absent. A class adds keys that are not fields with `JSON_EXTRA` (a derived property, or a
value the writer passes, such as a row's `rank`), each written after the key it names; it
checks what spans several keys in `json_check(raw, where)`, and fills what an older report
lacks from what it has in `json_older(values)`.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from functools import cache
from typing import TYPE_CHECKING, Literal, TypeVar, get_args, get_origin

from msgspec import Struct
from msgspec.structs import fields as struct_fields

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    Record = DataclassInstance | Struct

Reader = Callable[[object, str], object]


class _Unset(enum.Enum):
    UNSET = "unset"


UNSET = _Unset.UNSET  # no value read in place of an absent key: the field's default is kept
Writer = Callable[[object], object]
Written = Literal["always", "if set", "never"]


class JsonField(Struct, frozen=True):
    """How a field is written and read where its annotation does not say it all."""

    key: str | None = None  # its JSON key, where not the field's name
    written: Written = "always"  # "if set": left out when empty or None; "never": not written
    read: Reader | None = None  # its own reader of the JSON value and its path
    write: Writer | None = None  # its own writer (what it returns is written as it is)
    required: bool = False  # a saved report must have the key (the field has a default)
    absent: object = UNSET  # read in place of the key where it is absent
    ranked: bool = False  # a list of rows, each written with its `rank` (1 first)


def meta(
    *,
    key: str | None = None,
    written: Written = "always",
    read: Reader | None = None,
    write: Writer | None = None,
    required: bool = False,
    absent: object = UNSET,
    ranked: bool = False,
) -> dict[str, JsonField]:
    """A field's metadata for this codec (`field(metadata=meta(key="per_device"))`)."""
    return {"json": JsonField(key, written, read, write, required, absent, ranked)}


Decoded = TypeVar("Decoded")


class _Slot(Struct, frozen=True):
    """A key of a class's JSON object and where its value comes from."""

    key: str
    name: str  # the field, property or given value it is written from
    source: Literal["field", "property", "given"]
    plain: bool = True  # its value is written as it is (no dataclass or tuple inside)
    if_set: bool = False
    ranked: bool = False
    write: Writer | None = None


def encode(obj: Record, **given: object) -> dict[str, object]:
    """`obj` as a JSON object; `given`: the values of its `JSON_EXTRA` keys that are not
    properties (None where not given)."""
    out: dict[str, object] = {}
    for slot in _layout(type(obj)):
        value = given.get(slot.name) if slot.source == "given" else getattr(obj, slot.name)
        if slot.if_set and not value:
            continue
        if slot.write is not None:
            out[slot.key] = slot.write(value)
        elif slot.ranked and isinstance(value, (list, tuple)):
            out[slot.key] = [encode(row, rank=k) for k, row in enumerate(value, 1)]
        else:
            out[slot.key] = value if slot.plain else _value(value)
    return out


def _value(value: object) -> object:
    if isinstance(value, Struct) or (is_dataclass(value) and not isinstance(value, type)):
        # An earlier stage's type (memory, mesh, a raised chip figure) writes itself.
        to_dict = getattr(value, "to_dict", None)
        return to_dict() if callable(to_dict) else encode(value)
    if isinstance(value, (list, tuple)):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    return value


@cache
def _layout(cls: type) -> tuple[_Slot, ...]:
    hints = typing.get_type_hints(cls)
    slots = [
        _Slot(
            key=spec.key or name,
            name=name,
            source="field",
            plain=_is_plain(hints[name]),
            if_set=spec.written == "if set",
            ranked=spec.ranked,
            write=spec.write,
        )
        for name, spec, _ in _fields(cls)
        if spec.written != "never"
    ]
    extra: Mapping[str, str | None] = getattr(cls, "JSON_EXTRA", {})
    for key, after in extra.items():
        derived = isinstance(getattr(cls, key, None), property)
        at = 0 if after is None else next(i for i, s in enumerate(slots) if s.key == after) + 1
        slots.insert(at, _Slot(key, key, "property" if derived else "given"))
    return tuple(slots)


def _is_plain(hint: object) -> bool:
    """Whether values of this type are JSON as they are: no record or tuple inside."""
    if isinstance(hint, type):
        return not _is_record(hint) and hint is not tuple
    if get_origin(hint) is tuple:
        return False
    if get_origin(hint) is Literal:
        return True
    return all(_is_plain(a) for a in get_args(hint))


def _is_record(cls: type) -> bool:
    """A dataclass or a msgspec Struct: written and read field by field."""
    return is_dataclass(cls) or issubclass(cls, Struct)


def _fields(cls: type) -> list[tuple[str, JsonField, bool]]:
    """Each field of a record class: its name, how it is written and read, whether it has a
    default."""
    if issubclass(cls, Struct):
        return [(f.name, PLAIN, not f.required) for f in struct_fields(cls)]
    if not is_dataclass(cls):
        raise TypeError(f"the report's codec reads no {cls}")
    return [
        (f.name, _spec(f), not (f.default is MISSING and f.default_factory is MISSING))
        for f in fields(cls)
    ]


def _spec(f: Field[object]) -> JsonField:
    spec = f.metadata.get("json")
    return spec if isinstance(spec, JsonField) else PLAIN


PLAIN = JsonField()


def decode(cls: type[Decoded], raw: object, where: str) -> Decoded:
    """An instance of `cls` from its JSON object at `where` (ValueError or KeyError when it is
    not one)."""
    check = getattr(cls, "json_check", None)
    if callable(check):
        check(raw, where)
    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not an object")
    plan = _PLANS.get(cls) or _PLANS.setdefault(cls, _Plan.of(cls))
    values: dict[str, object] = {}
    for name, key, read, absent in plan.readers:
        value = raw.get(key, absent)
        if value is not UNSET:
            values[name] = read(value, f"{where}.{key}")
    for key in plan.required:
        if key not in raw:
            raise KeyError(f"{where}.{key}")
    older = getattr(cls, "json_older", None)
    if callable(older):
        older(values)
    return cls(**values)


class _Plan(Struct, frozen=True):
    """How a class is read: (field, key, reader, value where absent) per field, in order; the
    keys a saved report must have."""

    readers: tuple[tuple[str, str, Reader, object], ...]
    required: tuple[str, ...]

    @classmethod
    def of(cls, decoded: type) -> _Plan:
        hints = typing.get_type_hints(decoded)
        readers, required = [], []
        for name, spec, has_default in _fields(decoded):
            key = spec.key or name
            if spec.written == "never":
                continue
            readers.append((name, key, spec.read or _reader(hints[name]), spec.absent))
            if spec.absent is UNSET and (spec.required or not has_default):
                required.append(key)
        return cls(tuple(readers), tuple(required))


_PLANS: dict[type, _Plan] = {}


def _reader(hint: object) -> Reader:
    """The reader of a JSON value of type `hint`."""
    if hint is float:
        return number
    if hint is int:
        return count
    if hint is bool:
        return _bool
    if hint is str:
        return text
    if isinstance(hint, type) and _is_record(hint):
        return lambda raw, where: decode(hint, raw, where)
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return _one_of(args)
    if origin in (types.UnionType, typing.Union) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        read = _reader(inner)
        return lambda raw, where: None if raw is None else read(raw, where)
    if origin in (list, tuple) and args[0] is str:
        return _strings if origin is list else lambda raw, where: tuple(_strings(raw, where))
    if origin in (list, tuple):
        item = _reader(args[0])

        def items(raw: object, where: str) -> object:
            if not isinstance(raw, list):
                raise ValueError(f"{where} is not a list")
            found = [item(r, f"{where}[{k}]") for k, r in enumerate(raw)]
            return found if origin is list else tuple(found)

        return items
    if origin is dict and args == (str, float):
        return _numbers
    raise TypeError(f"the report's codec reads no {hint}")


def number(value: object, what: str) -> float:
    """A count or a time of a saved report: a finite number, never negative. The JSON writer
    turns non-finite numbers into null, so null here means a degenerate report."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} is {value!r}, not a number")
    found = float(value)
    if not math.isfinite(found) or found < 0:
        raise ValueError(f"{what} is {value!r}, not a finite number >= 0")
    return found


def count(value: object, what: str) -> int:
    return int(number(value, what))


def optional_number(value: object, what: str) -> float | None:
    return None if value is None else number(value, what)


def text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is {value!r}, not a string")
    return value


def _bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} is {value!r}, not true or false")
    return value


def _one_of(allowed: tuple[object, ...]) -> Reader:
    def read(value: object, what: str) -> object:
        if value not in allowed:
            raise ValueError(f"{what} is {value!r}, not one of {allowed}")
        return value

    return read


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(h, str) for h in value):
        raise ValueError(f"{what} is not a list of strings")
    return value


def _numbers(value: object, what: str) -> dict[str, float]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"{what} is not an object of numbers")
    return {k: number(u, f"{what}.{k}") for k, u in value.items()}
