"""Typed decoding: a JSON object into a dataclass, every field checked against its annotation.

``build(cls, data)`` checks each field ``data`` has against the field's annotation and builds the
instance; a field of the wrong type raises ``FieldTypeError`` naming it (``gpus[2].mem_used_mib is str,
expected float | None``), so a bad line is refused whole rather than becoming an event the fold trips on.
What is checked:

- ``int`` (not a bool), ``bool`` (not an int), ``str`` (valid Unicode: no lone surrogate, which JSON's
  ``\\ud800`` escapes can produce and no UTF-8 output can write);
- ``float``: an int is taken (as a float; one too large for a float is refused), and so is a float, but
  only a finite one: JSON as Python writes it may hold ``NaN`` and ``Infinity``, which no view or sum
  expects. A field that may be non-finite says so: ``Annotated[float, NON_FINITE]``;
- ``X | None``, ``Literal[...]``, ``list[T]``, ``dict[K, V]`` (an ``int`` key is read from its JSON
  string, as ``ProcSample.gpu_mem_mib``'s GPU indices are), nested dataclasses, and ``Any`` (anything).

Unknown keys are ignored (a newer writer's fields); a missing key takes the field's default, and a
field without one must be there. The annotations are resolved once per class (``typing.get_type_hints``)
into a tuple of small checking functions, so decoding a large sample costs little more than building it.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")

NON_FINITE = "non-finite"
"""Annotation metadata (``Annotated[float | None, NON_FINITE]``): the field may be NaN or an infinity."""

_INT_KEY = re.compile(r"[0-9]+")
"""An integer key of a JSON object: an index (a GPU's), never negative."""
_SHOWN = 40
"""How much of a wrong value an error quotes."""


class FieldTypeError(ValueError):
    """A field whose value does not match its annotation (or a required field that is missing)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"field {path!r} {problem}")
        self.path = path
        self.problem = problem


class _Bad(ValueError):
    """Raised by a checker; the containers on the way out add where (innermost first)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.where: list[str] = []


Check = Callable[[Any], Any]


def _kind(value: Any) -> str:
    """A wrong value, as an error names it: its type, or itself when the type is right but the value not."""
    if value is None:
        return "null"
    return type(value).__name__


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


# -- checkers ---------------------------------------------------------------------------------------------


def _any(value: Any) -> Any:
    return value


_FLOAT_LIMIT = 2**1024
"""Integers from here on do not convert to a float, so no sum or ratio with one could be taken: refused."""


def _int(value: Any) -> int:
    if type(value) is int:
        if -_FLOAT_LIMIT < value < _FLOAT_LIMIT:
            return value
        raise _Bad("is an integer out of range (beyond what a float holds)")
    raise _Bad(f"is {_kind(value)}, expected int")


def _float(value: Any) -> float:
    kind = type(value)
    if kind is float:
        if value - value == 0.0:  # nan - nan and inf - inf are nan
            return value
        raise _Bad(f"is {value!r}, expected a finite float")
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            raise _Bad("is an integer out of range (beyond what a float holds)") from None
    raise _Bad(f"is {_kind(value)}, expected float")


def _float_any(value: Any) -> float:
    """A float that may be NaN or an infinity (``NON_FINITE``)."""
    if type(value) is float:
        return value
    return _float(value)


def _str(value: Any) -> str:
    if type(value) is str:
        if value.isascii():
            return value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _Bad("is not valid Unicode (a lone surrogate)") from None
        return value
    raise _Bad(f"is {_kind(value)}, expected str")


def _bool(value: Any) -> bool:
    if type(value) is bool:
        return value
    raise _Bad(f"is {_kind(value)}, expected bool")


def _none(value: Any) -> None:
    if value is None:
        return None
    raise _Bad(f"is {_kind(value)}, expected null")


def _or_null(bad: _Bad, name: str) -> _Bad:
    """The error of ``X | None``'s X, saying that null would do too."""
    suffix = f", expected {name}"
    if not bad.where and bad.problem.endswith(suffix):
        bad.problem += " | None"
        bad.args = (bad.problem,)
    return bad


def _opt_float(value: Any) -> float | None:
    if value is None or (type(value) is float and value - value == 0.0):
        return value
    try:
        return _float(value)
    except _Bad as bad:
        raise _or_null(bad, "float") from None


def _opt_int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return _int(value)
    except _Bad as bad:
        raise _or_null(bad, "int") from None


def _opt_str(value: Any) -> str | None:
    if value is None or (type(value) is str and value.isascii()):
        return value
    try:
        return _str(value)
    except _Bad as bad:
        raise _or_null(bad, "str") from None


_OPTIONALS: dict[Check, Check] = {_float: _opt_float, _int: _opt_int, _str: _opt_str}
"""The common ``X | None`` as one function each (a sample holds hundreds of them)."""


def _optional(inner: Check, name: str) -> Check:
    if inner in _OPTIONALS:
        return _OPTIONALS[inner]

    def check(value: Any) -> Any:
        if value is None:
            return None
        try:
            return inner(value)
        except _Bad as bad:
            raise _or_null(bad, name) from None

    return check


def _union(options: list[Check], name: str) -> Check:
    def check(value: Any) -> Any:
        for option in options:
            try:
                return option(value)
            except _Bad:
                continue
        raise _Bad(f"is {_kind(value)}, expected {name}")

    return check


def _literal(values: tuple[Any, ...]) -> Check:
    allowed = {(type(v), v) for v in values}
    expected = ", ".join(repr(v) for v in values)

    def check(value: Any) -> Any:
        try:
            if (type(value), value) in allowed:
                return value
        except TypeError:  # unhashable: a list or an object
            pass
        raise _Bad(f"is {_shown(value)}, expected one of {expected}")

    return check


def _list(inner: Check, name: str) -> Check:
    def check(value: Any) -> list[Any]:
        if type(value) is not list:
            raise _Bad(f"is {_kind(value)}, expected {name}")
        try:
            return [inner(item) for item in value]
        except _Bad:
            pass
        for i, item in enumerate(value):  # the failure again, to say which item
            try:
                inner(item)
            except _Bad as bad:
                bad.where.append(f"[{i}]")
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    return check


def _key_int(key: Any) -> int:
    if type(key) is int and key >= 0:
        return key
    if type(key) is str and _INT_KEY.fullmatch(key):
        return _int(int(key))
    raise _Bad(f"has key {_shown(key)}, expected an index >= 0")


def _dict(key: Check | None, inner: Check, name: str) -> Check:
    """``key`` None: string keys, as JSON objects always have."""
    plain = key is None and inner is _any

    def check(value: Any) -> dict[Any, Any]:
        if type(value) is not dict:
            raise _Bad(f"is {_kind(value)}, expected {name}")
        if plain:
            return value
        out = {}
        for k, v in value.items():
            if key is not None:
                k = key(k)  # a bad key: the error is the map's
            try:
                out[k] = inner(v)
            except _Bad as bad:
                bad.where.append(f"[{_shown(k)}]")
                raise
        return out

    return check


def _nested(cls: type) -> Check:
    def check(value: Any) -> Any:
        if type(value) is not dict:
            raise _Bad(f"is {_kind(value)}, expected a {cls.__name__} object")
        return _build(cls, value)

    return check


# -- compiling an annotation ------------------------------------------------------------------------------

_SCALARS: dict[Any, tuple[Check, str]] = {int: (_int, "int"), float: (_float, "float"), str: (_str, "str"),
                                          bool: (_bool, "bool"), type(None): (_none, "None"), Any: (_any, "any"),
                                          object: (_any, "any")}


def compile_type(tp: Any) -> tuple[Check, str]:
    """The checking function for one annotation (it returns the value, converted where the annotation says,
    or raises a ValueError), and how an error names what it expects."""
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        if tp.__metadata__ == (NON_FINITE,):
            inner = typing.get_args(tp)[0]
            if inner is float:
                return _float_any, "float"
            if set(typing.get_args(inner)) == {float, type(None)}:
                return _optional(_float_any, "float"), "float | None"
        return compile_type(args[0])
    if origin is Union or origin is types.UnionType:
        rest = [a for a in args if a is not type(None)]
        parts = [compile_type(a) for a in rest]
        name = " | ".join(n for _, n in parts)
        inner = parts[0][0] if len(parts) == 1 else _union([c for c, _ in parts], name)
        if len(rest) < len(args):
            return _optional(inner, name), f"{name} | None"
        return inner, name
    if origin is Literal:
        return _literal(args), "one of " + ", ".join(repr(a) for a in args)
    if origin is list:
        inner, inner_name = compile_type(args[0]) if args else (_any, "any")
        name = f"list[{inner_name}]"
        return _list(inner, name), name
    if origin is dict:
        key_tp, value_tp = args if args else (str, Any)
        value, value_name = compile_type(value_tp)
        if key_tp is int:
            return _dict(_key_int, value, f"dict[int, {value_name}]"), f"dict[int, {value_name}]"
        if key_tp is not str:
            raise TypeError(f"dict keys of {key_tp!r} are not decoded from JSON")
        return _dict(None, value, f"dict[str, {value_name}]"), f"dict[str, {value_name}]"
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _nested(tp), tp.__name__
    raise TypeError(f"no decoding for the annotation {tp!r}")


# -- building ---------------------------------------------------------------------------------------------

_Spec = tuple[tuple[str, Check, bool], ...]
_SPECS: dict[type, _Spec] = {}


def _spec(cls: type) -> _Spec:
    """(field, check, required) for each init field of a dataclass, resolved once."""
    spec = _SPECS.get(cls)
    if spec is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        spec = tuple(
            (f.name, compile_type(hints[f.name])[0],
             f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
            for f in dataclasses.fields(cls) if f.init
        )
        _SPECS[cls] = spec
    return spec


def _build(cls: type, data: Mapping[str, Any]) -> Any:
    kwargs = {}
    for name, check, required in _spec(cls):
        if name in data:
            try:
                kwargs[name] = check(data[name])
            except _Bad as bad:
                bad.where.append(name)
                raise
        elif required:
            bad = _Bad("is missing")
            bad.where.append(name)
            raise bad
    return cls(**kwargs)


def _path(where: list[str]) -> str:
    out = ""
    for part in reversed(where):
        out += part if part.startswith("[") or not out else "." + part
    return out


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number a float holds (an int or a float, not a bool), else
    None: for the plain JSON inside events (``Any``: vLLM's metrics, per-request records), which decoding
    does not look into, so whoever reads a number there takes any value."""
    kind = type(value)
    if kind is float:
        return value if value - value == 0.0 else None
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            return None
    return None


def build(cls: type[T], data: Mapping[str, Any]) -> T:
    """An instance of the dataclass ``cls`` from a JSON object, every field checked (``FieldTypeError``)."""
    try:
        return typing.cast(T, _build(cls, data))
    except _Bad as bad:
        raise FieldTypeError(_path(bad.where), bad.problem) from None
