"""Textual's private names that the screens use, each removable as a Textual release that renamed
it would remove it: cliff-tui's door (``ui/textual_private.py``) no longer finds it, while
Textual's own code, which would use the new name, goes on working.

    python tests/support/textual_names.py --without Widget._set_dirty -- watch -i 0.25

runs cliff-tui with the names given removed (the benchmark's A/B and the tests' real terminal).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from textual.driver import Driver
from textual.drivers import linux_driver  # noqa: F401 - imported first, Textual's driver keeps its own parser
from textual.screen import Screen
from textual.widget import Widget

from cliff_tui.ui import textual_private

MODULE_NAMES = ("textual._xterm_parser.XTermParser", "textual._parser.ParseError")
CLASS_NAMES = ("Widget._set_dirty", "Screen._on_timer_update")
INSTANCE_NAMES = ("Screen._dirty_widgets", "Driver._debug")
NAMES = MODULE_NAMES + CLASS_NAMES + INSTANCE_NAMES


@contextmanager
def _module_name_gone(name: str) -> Iterator[None]:
    module_name, attribute = name.rsplit(".", 1)
    module = sys.modules[module_name]
    value = getattr(module, attribute)
    delattr(module, attribute)
    try:
        yield
    finally:
        setattr(module, attribute, value)


@contextmanager
def _class_name_gone(name: str) -> Iterator[None]:
    cls: Any = {"Widget": Widget, "Screen": Screen}[name.split(".")[0]]
    attribute = name.split(".")[1]
    value = cls.__dict__[attribute]
    delattr(cls, attribute)
    try:
        yield
    finally:
        setattr(cls, attribute, value)


def _renaming(cls: Any, method: str, attribute: str) -> Callable[[], None]:
    """``cls.method`` patched to move ``attribute`` of the instance to another name once it has
    run; the undo returned."""
    original = cls.__dict__[method]

    def renamed(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if attribute in self.__dict__:
            self.__dict__[f"{attribute}_renamed"] = self.__dict__.pop(attribute)
        return result

    setattr(cls, method, renamed)
    return lambda: setattr(cls, method, original)


@contextmanager
def _instance_name_gone(name: str) -> Iterator[None]:
    """Screen's set is renamed only while the door probes (Textual's own code reads it by its
    old name); the driver's flag for as long as the block runs, as only the quiet driver reads it."""
    cls: Any
    cls, method = {
        "Screen._dirty_widgets": (Screen, "__init__"),
        "Driver._debug": (Driver, "__init__"),
    }[name]
    undo = _renaming(cls, method, name.split(".")[1])
    try:
        yield
    finally:
        undo()


def _gone(name: str) -> Any:
    if name in MODULE_NAMES:
        return _module_name_gone(name)
    if name in CLASS_NAMES:
        return _class_name_gone(name)
    return _instance_name_gone(name)


@contextmanager
def without(*names: str) -> Iterator[textual_private.Found]:
    """The door probes again with ``names`` gone, and the names the driver reads as it runs stay
    gone until the block ends; what the probe found is yielded."""
    unknown = set(names) - set(NAMES)
    if unknown:
        raise ValueError(f"not a private name the screens use: {', '.join(sorted(unknown))}")
    lasting = [name for name in names if name == "Driver._debug"]
    with ExitStack() as stack:
        for name in lasting:
            stack.enter_context(_gone(name))
        with ExitStack() as probing:
            for name in set(names) - set(lasting):
                probing.enter_context(_gone(name))
            found = textual_private.probe_again()
        try:
            yield found
        finally:
            textual_private.probe_again()


def main() -> int:
    parser = argparse.ArgumentParser(description="cliff-tui with some of Textual's private names removed")
    parser.add_argument("--without", action="append", default=[], choices=NAMES)
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="cliff-tui's arguments, after --")
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    from cliff_tui.cli import main as cliff_tui

    with without(*args.without):
        return cliff_tui(argv)


if __name__ == "__main__":
    raise SystemExit(main())
