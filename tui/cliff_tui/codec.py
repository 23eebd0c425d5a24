"""Records ↔ plain JSON-able values, with the types checked on the way back in.

Recordings and headless output use this; a recording that does not match the record types
raises :class:`DecodeError` (one line, no traceback) instead of building half a record. Every
string read back is outside text: it comes out inert (:func:`cliff_tui.text.inert`), cut to a
line's length, except the generated text, which keeps its newlines.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, Literal, Union

from cliff_tui.events import EVENT_NAMES, EVENT_TYPES, FORMER_EVENT_NAMES, GeneratedText
from cliff_tui.text import TEXT_LIMIT, inert
from cliff_tui.units import is_number


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
    plain: dict[str, Any] = to_plain(event)
    plain["type"] = EVENT_NAMES[type(event)]
    return plain


def event_from_plain(plain: Any) -> Any:
    if not isinstance(plain, dict):
        raise DecodeError("an event must be a JSON object")
    name = plain.get("type")
    cls = (EVENT_TYPES.get(name) or FORMER_EVENT_NAMES.get(name)) if isinstance(name, str) else None
    if cls is None:
        raise DecodeError(f"unknown event type {name!r}")
    return from_plain(cls, plain)


def from_plain(tp: Any, value: Any) -> Any:
    """Build a value of type ``tp`` from ``value`` or raise :class:`DecodeError`."""
    try:
        return _decoder(tp)(value)
    except _Bad as bad:
        raise DecodeError(bad.message()) from None


class _Bad(Exception):
    """A decoding failure on its way up: each dataclass level adds its field name."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []

    def message(self) -> str:
        where = ".".join(reversed(self.path)).replace(".[", "[")
        return f"{where} {self.problem}" if where else f"value {self.problem}"


Decoder = Callable[[Any], Any]


@cache
def _decoder(tp: Any) -> Decoder:
    """One decoder per type, built once (a recording holds thousands of samples)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return _union_decoder(typing.get_args(tp))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if origin is tuple:
        return _tuple_decoder(typing.get_args(tp))
    if origin is dict:
        return _dict_decoder(typing.get_args(tp)[1])
    if origin is Literal:
        return _literal_decoder(typing.get_args(tp))
    if tp is Any:
        return lambda value: value
    return _SCALARS[tp]


def _literal_decoder(words: tuple[object, ...]) -> Decoder:
    allowed = frozenset(words)
    shown = ", ".join(repr(w) for w in words)

    def decode(value: Any) -> Any:
        if type(value) is not str or value not in allowed:
            raise _Bad(f"must be one of {shown}, not {value!r:.40}")
        return value

    return decode


def _union_decoder(args: tuple[Any, ...]) -> Decoder:
    nullable = type(None) in args
    decoders = [_decoder(a) for a in args if a is not type(None)]

    def decode(value: Any) -> Any:
        if value is None:
            if nullable:
                return None
            raise _Bad("must not be null")
        first: _Bad | None = None
        for decoder in decoders:
            try:
                return decoder(value)
            except _Bad as bad:
                first = first or bad
        raise first or _Bad("has a bad value")

    return decode


def _dataclass_decoder(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls)
    fields = [
        (
            f.name,
            _MULTILINE.get((cls, f.name)) or _decoder(hints[f.name]),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    ]

    def decode(value: Any) -> Any:
        if type(value) is not dict:
            raise _Bad("must be an object")
        kwargs = {}
        for name, field_decoder, required in fields:
            if name in value:
                try:
                    kwargs[name] = field_decoder(value[name])
                except _Bad as bad:
                    bad.path.append(name)
                    raise
            elif required:
                raise _Bad(f"lacks field {name!r}")
        return cls(**kwargs)  # keys that are not fields (the event's "type") are ignored

    return decode


def _tuple_decoder(args: tuple[Any, ...]) -> Decoder:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])

        def decode_all(value: Any) -> tuple[Any, ...]:
            if type(value) is not list:
                raise _Bad("must be a list")
            out = []
            for i, v in enumerate(value):
                try:
                    out.append(item(v))
                except _Bad as bad:
                    bad.path.append(f"[{i}]")
                    raise
            return tuple(out)

        return decode_all
    items = [_decoder(a) for a in args]

    def decode_fixed(value: Any) -> tuple[Any, ...]:
        if type(value) is not list or len(value) != len(items):
            raise _Bad(f"must be a list of {len(items)}")
        return tuple(d(v) for d, v in zip(items, value))

    return decode_fixed


def _dict_decoder(value_type: Any) -> Decoder:
    item = _decoder(value_type)

    def decode(value: Any) -> dict[str, Any]:
        if type(value) is not dict:
            raise _Bad("must be an object")
        out = {}
        for k, v in value.items():
            key = inert(str(k))
            try:
                out[key] = item(v)
            except _Bad as bad:
                bad.path.append(key)  # the message is shown: the key is outside text too
                raise
        return out

    return decode


def _float(value: Any) -> float:
    if is_number(value):
        return float(value)
    if type(value) in (int, float):  # never written: to_plain writes null for NaN and Infinity
        raise _Bad(f"must be a finite number below 2^63, not {value!r:.40}")
    raise _Bad("must be a number")


def _int(value: Any) -> int:
    if type(value) is int and is_number(value):
        return value
    if type(value) is int:
        raise _Bad(f"must be an integer below 2^63, not {value!r:.40}")
    raise _Bad("must be an integer")


def _bool(value: Any) -> bool:
    if type(value) is bool:
        return value
    raise _Bad("must be true or false")


def _str(value: Any) -> str:
    if type(value) is str:
        return inert(value)
    raise _Bad("must be a string")


def _text(value: Any) -> str:
    if type(value) is str:
        return inert(value, multiline=True, limit=TEXT_LIMIT)
    raise _Bad("must be a string")


_SCALARS: dict[Any, Decoder] = {float: _float, int: _int, bool: _bool, str: _str}
_MULTILINE: dict[tuple[type, str], Decoder] = {(GeneratedText, "text"): _text}
