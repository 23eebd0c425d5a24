"""The event stream: producers publish, consumers subscribe.

``publish`` calls each subscriber in the publisher's thread, so subscribers must be quick and
thread-safe (the UI's subscriber only posts a message; the recorder appends a line).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Subscriber = Callable[[Any], None]


class EventBus:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Add ``subscriber``; returns a function that removes it."""
        with self._lock:
            self._subscribers = [*self._subscribers, subscriber]

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = [s for s in self._subscribers if s is not subscriber]

        return unsubscribe

    def publish(self, event: Any) -> None:
        for subscriber in self._subscribers:
            subscriber(event)
