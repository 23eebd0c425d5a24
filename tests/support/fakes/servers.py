"""Loopback stand-ins for llama-server and Ollama, serving the recorded bodies in tests/data/endpoints."""

from __future__ import annotations

from fakes.http_server import FakeHttpServer, Route

BUSY = [Route.file("llama_metrics_busy_1.txt"), Route.file("llama_metrics_busy_2.txt")]
DECODING = [Route.file("llama_slots_decoding_1.json"), Route.file("llama_slots_decoding_2.json")]


def llama(metrics: Route | list[Route], slots: Route | None = None, **more: Route) -> FakeHttpServer:
    routes = {
        "/metrics": metrics,
        "/slots": slots or Route.file("llama_slots.json"),
        **{"/" + k.replace("_", "/"): v for k, v in more.items()},
    }
    return FakeHttpServer(routes).start()


def plain(routes: dict[str, Route]) -> FakeHttpServer:
    return FakeHttpServer(routes).start()


def ollama(ps: Route) -> FakeHttpServer:
    return FakeHttpServer({"/api/ps": ps, "/api/version": Route.file("ollama_version.json")}).start()
