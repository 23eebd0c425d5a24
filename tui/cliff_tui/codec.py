"""Records ↔ plain JSON-able values, with the types checked on the way back in.

Recordings and headless output use this; a recording that does not match the record types
raises :class:`DecodeError` (one line, no traceback) instead of building half a record.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import lru_cache
from typing import Any, Union

from cliff_tui.events import EVENT_NAMES, EVENT_TYPES


class DecodeError(ValueError):
    """A plain value does not have the shape of the record it should be."""


def to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def event_to_plain(event: Any) -> dict[str, Any]:
    plain = to_plain(event)
    plain["type"] = EVENT_NAMES[type(event)]
    return plain


def event_from_plain(plain: Any) -> Any:
    if not isinstance(plain, dict):
        raise DecodeError("an event must be a JSON object")
    name = plain.get("type")
    cls = EVENT_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise DecodeError(f"unknown event type {name!r}")
    body = {k: v for k, v in plain.items() if k != "type"}
    return from_plain(cls, body)


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_plain(tp: Any, value: Any, where: str = "") -> Any:
    """Build a value of type ``tp`` from ``value`` or raise :class:`DecodeError`."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return _from_union(typing.get_args(tp), value, where)
    if dataclasses.is_dataclass(tp):
        return _from_dataclass(tp, value, where)
    if origin is tuple:
        return _from_tuple(typing.get_args(tp), value, where)
    if origin is dict:
        return _from_dict(typing.get_args(tp)[1], value, where)
    if tp is Any:
        return value
    return _from_scalar(tp, value, where)


def _from_union(args: tuple, value: Any, where: str) -> Any:
    if value is None:
        if type(None) in args:
            return None
        raise DecodeError(f"{where or 'value'} must not be null")
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return from_plain(arg, value, where)
        except DecodeError as exc:
            errors.append(str(exc))
    raise DecodeError(errors[0] if errors else f"{where}: bad value")


def _from_dataclass(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise DecodeError(f"{where or cls.__name__} must be an object")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in value:
            kwargs[f.name] = from_plain(hints[f.name], value[f.name], f"{where}.{f.name}".lstrip("."))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DecodeError(f"{where or cls.__name__} lacks field {f.name!r}")
    return cls(**kwargs)


def _from_tuple(args: tuple, value: Any, where: str) -> tuple:
    if not isinstance(value, list):
        raise DecodeError(f"{where} must be a list")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(from_plain(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if len(args) != len(value):
        raise DecodeError(f"{where} must have {len(args)} items")
    return tuple(from_plain(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))


def _from_dict(value_type: Any, value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise DecodeError(f"{where} must be an object")
    return {str(k): from_plain(value_type, v, f"{where}.{k}") for k, v in value.items()}


def _from_scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DecodeError(f"{where} must be a number")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DecodeError(f"{where} must be an integer")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise DecodeError(f"{where} must be true or false")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise DecodeError(f"{where} must be a string")
        return value
    raise DecodeError(f"{where}: unsupported type {tp!r}")
