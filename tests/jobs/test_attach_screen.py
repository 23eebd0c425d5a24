"""``cliff-tui attach`` next to a real llama-server on a random port, on the real Textual app at
120×40: the server found by its process, its flags, its memory split and the context-pool gauge,
without a key; then the server dies mid-attach: one line, and the screen keeps going."""

from __future__ import annotations

import pytest

from cliff_tui.jobs.attach import AttachJob
from cliff_tui.probes.endpoints import discovery
from cliff_tui.probes.sampler import Sampler
from cliff_tui.recording.reader import open_recording
from cliff_tui.session import Session
from cliff_tui.ui.app import CliffApp
from llama_server import post_json, started_llama_server, stop
from paths import DATA
from screen import screen_text, wait_for

ATTACH_RECORDING = DATA / "attach_chat.jsonl"
VLLM_RECORDING = DATA / "attach_vllm.jsonl"


@pytest.mark.model
@pytest.mark.slow
async def test_attach_shows_the_server_its_flags_memory_and_pool_then_survives_its_death(tmp_path, monkeypatch):
    with started_llama_server(tmp_path, "-np", "2", "--kv-unified", "--cache-ram", "128", ctx="2048") as server:
        real_find = discovery.find_servers

        def only_ours(*args, **kwargs):  # other servers may run on this machine: follow the test's
            return discovery.Found([s for s in real_find(*args, **kwargs).servers if s.pid == server.proc.pid])

        monkeypatch.setattr("cliff_tui.jobs.attach.find_servers", only_ours)
        body = {"messages": [{"role": "user", "content": "Name three rivers."}], "max_tokens": 8}
        post_json(server.url + "/v1/chat/completions", body)
        job = AttachJob.from_urls({"llama-server": None, "ollama": None}, interval=0.25, timeout=2.0)
        app = CliffApp("attach", Session(sampler=Sampler(), job=job, interval=0.25))
        async with app.run_test(size=(120, 40)) as pilot:
            try:
                await wait_for(pilot, lambda: "cells in use" in screen_text(app) and "RSS" in screen_text(app), 15)
            except AssertionError:
                print(screen_text(app))
                raise
            text = screen_text(app)
            flat = " ".join(text.split())
            assert f"127.0.0.1:{server.port}" in flat and f"process {server.proc.pid}" in flat
            assert "flags: ctx_size=2048 parallel=2" in flat and "cache_ram=128MiB kv_unified=true" in flat
            assert "mapped + KV 45.0 MiB + other" in flat and "/ --cache-ram 128 MiB" in flat
            assert "of 2,048 cells in use" in flat and "unified KV" in flat
            stop(server.proc)
            await wait_for(pilot, lambda: "unreachable" in " ".join(screen_text(app).split()))
            after = " ".join(screen_text(app).split())
            assert f"llama-server http://127.0.0.1:{server.port} unreachable" in after
            assert "before it stopped answering: RSS" in after  # its memory is the last one read, and says so
            await pilot.pause(1.0)
            assert app.is_running and "Traceback" not in screen_text(app)


async def test_a_recorded_attach_replays_to_the_server_its_flags_memory_and_pool():
    """A recording of ``cliff-tui`` (no command) next to a real llama-server (scripts/record_attach_session.py) draws
    what the live screen drew: how the server was found, its flags, its memory and the pool."""
    app = CliffApp("replay", Session(recording=open_recording(ATTACH_RECORDING)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "end")
        await wait_for(pilot, lambda: "51s / 51s" in screen_text(app))
        screen = screen_text(app)
    assert "cells in use" in screen and "unified KV pool" in screen
    assert "found: process 1 listening on 127.0.0.1:50435 (llama-server" in screen
    assert "flags: ctx_size=2048 parallel=4 n_gpu_layers=0 kv_unified=true" in screen
    assert "RSS 181 MiB = model 92.1 MiB mapped + KV 45.0 MiB" in screen


async def test_a_recorded_vllm_attach_replays_to_the_gauge_red_with_its_preemptions():
    """A recording of ``attach --vllm`` next to a real vLLM under eight long requests
    (scripts/record_vllm_session.py) draws, at the moment of the screenshot, the gauge red with the
    preemptions of the last minute and the KV line; a little earlier, amber with every block in use."""
    app = CliffApp("replay", Session(recording=open_recording(VLLM_RECORDING)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "end", "left")
        await wait_for(pilot, lambda: "50s / 1m00s" in screen_text(app))
        red = " ".join(screen_text(app).split())
        await pilot.press("left")
        await wait_for(pilot, lambda: "40s / 1m00s" in screen_text(app))
        amber = " ".join(screen_text(app).split())
    assert "1,280 of 1,280 KV tokens in use: vLLM preempts, 4 in the last minute" in red, red
    assert "KV: 10 blocks × 128 tokens · 3 running, 5 waiting (5 for blocks) · 4 preempted since start" in red
    assert "max-model-len 1,024" in red and "process 1 listens on port" in red
    assert "every block in use, preemption next" in amber and "0 preempted since start" in amber, amber
