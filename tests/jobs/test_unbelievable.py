"""Values a server gives that cannot be true are logged once each, and a server that gives endless
new ones fills no log: after the first TOLD_KEPT, nothing more is logged."""

from __future__ import annotations

from cliff_tui.events import ServerReading
from cliff_tui.jobs.attach import TOLD_KEPT, Endpoint, Poller

URL = "http://127.0.0.1:8080"


def _reading(used: int) -> ServerReading:
    why = f"unreadable: the server said {used} tokens in use of n_ctx 1536"
    return ServerReading(0.0, "llama-server", URL, "ok", reasons={"slot 0 tokens": why})


def test_each_unbelievable_value_is_logged_once():
    poller = Poller(Endpoint("llama-server", URL), 0.5)
    assert len(poller.unbelievable(_reading(2000))) == 1
    assert poller.unbelievable(_reading(2000)) == []


def test_endless_new_values_stop_being_logged_once_as_many_as_kept_were():
    poller = Poller(Endpoint("llama-server", URL), 0.5)
    logged = [line for used in range(1537, 1537 + 10 * TOLD_KEPT) for line in poller.unbelievable(_reading(used))]
    assert len(logged) == TOLD_KEPT
