"""Record tests/data/attach_chat.jsonl: ``cliff-tui`` with no command (it finds the server by its
process, as ``attach`` does) on a 120×40 pseudo-terminal, next to a real llama-server with a small unified pool
(``-c 2048 -np 4 --kv-unified``) and four conversations summarising the README turn by turn until
the pool is nearly full. The recording is redacted; scripts/make_screenshots.py replays it.

    PYTHONPATH=tui:tests/support python scripts/record_attach_session.py [--turns 14]
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path

from pty_cliff import cliff_on_a_pty

from chat import chat_turn, document_turns
from llama_server import started_llama_server

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "attach_chat.jsonl"


def attach_on_a_pty(record: Path) -> tuple[int, int]:
    """``cliff-tui --record`` (no command) on a 120×40 pseudo-terminal: its PID and the terminal's fd."""
    return cliff_on_a_pty(["--record", str(record), "--force", "--redact"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=14, help="turns of the four conversations (default 14)")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        started_llama_server(Path(tmp), "-np", "4", "--kv-unified", "--metrics", ctx="2048") as server,
    ):
        pid, fd = attach_on_a_pty(OUT)
        try:
            time.sleep(5)  # found, its flags read, a baseline of its memory
            chats: list[list[dict]] = [[] for _ in range(4)]
            turns = document_turns()
            for turn in range(args.turns):
                answers = chat_turn(server.url, chats, [turns[(turn * 4 + i) % len(turns)] for i in range(4)])
                print(f"turn {turn + 1}: {[code for code, _ in answers]}", flush=True)
                time.sleep(1.5)
            time.sleep(3)
            os.write(fd, b"q")
            _, status = os.waitpid(pid, 0)
            print(f"attach ended: {status}; wrote {OUT.relative_to(ROOT)}")
        finally:
            try:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            os.close(fd)


if __name__ == "__main__":
    main()
