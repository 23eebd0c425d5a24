"""Outside text made inert: no control, escape, bidi or invisible character survives, printable text
is untouched, markup is left for the screens to draw literally, and long text is cut with a note."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cliff_tui.text import LINE_LIMIT, cut, file_name, inert, inert_tree, is_inert
from hostile import HOSTILE, hostile_text

RUNS = {"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"}


def runnable(text: str, multiline: bool = False) -> list[str]:
    """The characters a terminal could act on (or that hide or reorder text)."""
    return [ch for ch in text if unicodedata.category(ch) in RUNS and not (multiline and ch == "\n")]


def test_escape_sequences_are_shown_not_run():
    assert inert("\x1b]0;TITLE\x07") == "␛]0;TITLE␇"
    assert inert("\x1b[2J\x1b[31mred") == "␛[2J␛[31mred"
    assert inert("\x1b]52;c;aGk=\x1b\\") == "␛]52;c;aGk=␛\\"
    assert inert("\x9b2J \x9d0;x") == "<U+009B>2J <U+009D>0;x"  # C1 CSI and OSC
    assert inert("\x1bP1$r\x1b\\") == "␛P1$r␛\\"  # DCS


def test_bidi_and_invisible_characters_are_named():
    assert inert("abc\u202edcba") == "abc<U+202E>dcba"
    assert inert("a\u2066b\u2069c\u200bd\ufeff") == "a<U+2066>b<U+2069>c<U+200B>d<U+FEFF>"
    assert inert("line\u2028sep") == "line<U+2028>sep"


def test_newlines_only_where_several_lines_are_expected():
    assert inert("a\nb\r\n") == "a␊b␍␊"
    assert inert("a\nb\r\n", multiline=True) == "a\nb␍\n"
    assert inert("a\tb") == "a b"


def test_printable_text_and_markup_are_untouched():
    for text in ("SmolLM2 135M", "Qwen2.5 7B · 量子化 · ünïcödé 🦙", "[blink]x[/blink] [b]y", "a\u00a0b", "\ue000"):
        assert inert(text) == text


def test_long_text_is_cut_with_a_note_and_cutting_twice_is_cutting_once():
    name = "x" * 1_048_576
    shown = inert(name)
    assert len(shown) == LINE_LIMIT and shown.endswith("… [cut from 1,048,576 chars]")
    assert inert(shown) == shown
    assert cut("short", 10) == "short"


def test_stand_ins_count_towards_the_limit():
    shown = inert("\x9b" * 5000)  # each C1 CSI is shown as 8 characters
    assert len(shown) == LINE_LIMIT and shown.endswith("… [cut from 5,000 chars]")
    assert shown.startswith("<U+009B>" * 100) and "<U+009B>… [cut" in shown  # only whole stand-ins kept
    assert inert(shown) == shown
    short = "\u202e" * 200  # 200 characters, 1,600 once shown: cut too
    assert len(inert(short)) <= LINE_LIMIT and inert(short).endswith("… [cut from 200 chars]")


@settings(max_examples=300, deadline=None)
@given(hostile_text(), st.integers(1, 3000), st.booleans(), st.sampled_from([LINE_LIMIT, 80, 40]))
def test_never_longer_than_the_limit_and_idempotent(text, times, multiline, limit):
    long = text * times
    shown = inert(long, multiline=multiline, limit=limit)
    assert len(shown) <= limit
    assert inert(shown, multiline=multiline, limit=limit) == shown
    assert is_inert(shown, multiline=multiline) and not runnable(shown, multiline)
    if long.isprintable() and len(long) <= limit:
        assert shown == long


def test_a_tree_is_made_inert_keys_too():
    tree = {"machine": {"hostname": "h\x1b]0;x\x07"}, "command": ["run", "\x1b[2J"], "n": 3, "k\x07": None}
    assert inert_tree(tree) == {"machine": {"hostname": "h␛]0;x␇"}, "command": ["run", "␛[2J"], "n": 3, "k␇": None}


def test_the_hostile_strings_are_all_made_inert():
    for text in HOSTILE:
        assert runnable(text) or "[" in text, text  # each one holds a sequence, or markup
        assert not runnable(inert(text)) and is_inert(inert(text))


@settings(max_examples=1000, deadline=None)
@given(hostile_text(), st.booleans())
def test_nothing_runnable_survives(text, multiline):
    shown = inert(text, multiline=multiline)
    assert not runnable(shown, multiline)
    assert is_inert(shown, multiline=multiline)
    assert inert(shown, multiline=multiline) == shown
    assert "\x1b" not in shown and len(shown) <= max(len(text), LINE_LIMIT)
    if text.isprintable():
        assert shown == text[:LINE_LIMIT] or len(text) > LINE_LIMIT


@pytest.mark.parametrize(
    "path, name",
    [
        ("/models/q.gguf", "q.gguf"),
        ("C:\\models\\q.gguf", "q.gguf"),
        ("q.gguf", "q.gguf"),
        ("/models/dir/", "dir"),
        ("/", ""),
        ("", ""),
    ],
)
def test_a_file_name_is_the_last_part_of_a_path_from_any_platform(path, name):
    assert file_name(path) == name
