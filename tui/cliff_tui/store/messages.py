"""What was said along the way: cliff-tui's notices and llama.cpp's raw log."""

from __future__ import annotations

from collections import deque

from cliff_tui.events import LogLine, Notice

LOG_LINES_KEPT = 4000
NOTICES_KEPT = 50


class MessagesState:
    def __init__(self) -> None:
        self.log: deque[LogLine] = deque(maxlen=LOG_LINES_KEPT)
        self.notices: deque[Notice] = deque(maxlen=NOTICES_KEPT)
