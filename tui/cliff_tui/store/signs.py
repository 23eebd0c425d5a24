"""The signs' state: each sign as it stands, the alerts raised when one grew worse, and the memory
evidence of the session outside a run (an attached server, or a plain watch)."""

from __future__ import annotations

from collections import deque
from typing import cast

from cliff_tui.analysis.cliff import RunWatch
from cliff_tui.analysis.signs import SignState, sign3
from cliff_tui.events import Alert
from cliff_tui.records import AlertLevel

ALERTS_KEPT = 200
WAITING: dict[int, SignState] = {
    1: SignState(1, "na", "…", "waiting for a sample"),
    2: SignState(2, "ok", "RAM trend …", "collecting samples"),
    3: sign3(None),
}


class SignsState:
    def __init__(self) -> None:
        self.current: dict[int, SignState] = dict(WAITING)
        self.alerts: deque[Alert] = deque(maxlen=ALERTS_KEPT)
        self.session_watch = RunWatch()  # an attached server's, or a watch's with no run
        self.throttle: set[str] = set()  # GPU clock-throttle reasons seen while generating, since the run began

    def update(self, t: float, signs: dict[int, SignState]) -> list[Alert]:
        """The signs now; an alert for each that grew worse (kept, and returned)."""
        raised = []
        for sign, state in signs.items():
            old = self.current.get(sign)
            if state.alarming and (old is None or _rank(state) > _rank(old)):
                level = cast(AlertLevel, state.level)  # alarming: amber or red
                alert = Alert(t, sign, level, f"{state.headline}: {state.detail}")
                self.alerts.append(alert)
                raised.append(alert)
        self.current = dict(signs)
        return raised


def _rank(state: SignState) -> int:
    return {"amber": 1, "red": 2}.get(state.level, 0)
