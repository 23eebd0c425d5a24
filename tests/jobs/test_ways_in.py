"""Every way in to a running llama-server gives one reading: found by its process with no URL, named by
its URL, from the default command; and through a TCP proxy that hides its process, no word about its
memory taken from this machine's RAM."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import psutil
import pytest

from chat import chat
from cliff_process import cliff
from cliff_tui.jobs.attach import AttachJob
from cliff_tui.jobs.attach_once import attach_once
from cliff_tui.probes.endpoints import discovery
from cliff_tui.probes.sampler import Sampler
from cliff_tui.store import Store
from cliff_tui.units import GiB, MiB
from llama_server import started_llama_server
from needs import need
from paths import ROOT

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with started_llama_server(tmp_path_factory.mktemp("ways-in"), "--metrics", ctx="3072") as started:
        yield started


def only(monkeypatch, pid: int) -> None:
    """Discovery follows the test's server (others may run on this machine)."""
    real_find = discovery.find_servers

    def ours(*args, **kwargs):
        return discovery.Found([s for s in real_find(*args, **kwargs).servers if s.pid == pid])

    monkeypatch.setattr("cliff_tui.jobs.attach.find_servers", ours)


def once(urls: dict[str, str | None]) -> dict:
    record, ok = attach_once(AttachJob.from_urls(urls, 0.2, 2.0), Sampler(), sleep=time.sleep)
    assert ok, record
    return record


def comparable(record: dict) -> dict:
    """What must not depend on how the server was named: less ``how``, and less the readings that
    move between two calls (RSS, rates)."""
    attached = {k: v for k, v in record["attached"].items() if k not in ("how", "text", "tokens_held", "processing")}
    memory = record["memory"]
    pool = {k: v for k, v in (record["pool"] or {}).items() if k not in ("log", "largest_context_by_memory")}
    return {
        "attached": attached,
        "context_in_effect": record["llama_server"]["context_in_effect"],
        "pool": pool,
        "memory": (sorted(memory), memory.get("kv_cache"), memory.get("cache_ram")),
    }


def test_a_server_named_by_url_reads_as_much_as_one_found_by_its_process(server, monkeypatch):
    only(monkeypatch, server.proc.pid)
    found = once({"llama-server": None})
    named = once({"llama-server": server.url})
    assert comparable(named) == comparable(found)
    assert named["attached"]["pid"] == server.proc.pid and "named by URL" in named["attached"]["how"]
    assert named["pool"]["max_context"] == 3072 and named["memory"]["kv_cache"] > 0
    assert "does not say which" not in named["llama_server"]["context_in_effect"]["text"]
    assert named["signs"]["2"]["level"] != "na"


def test_the_command_line_by_url_carries_the_process_flags_pool_and_memory(server):
    out = cliff("attach", "--llama-server", f"http://localhost:{server.port}", "--once", "--json")
    record = json.loads(out)
    assert record["attached"]["pid"] == server.proc.pid
    assert record["attached"]["settings"]["ctx_size"]["value"] == "3072"
    assert record["pool"]["max_context"] == 3072 and "kv_cache" in record["memory"]


def test_the_default_command_finds_the_server(server):
    record = json.loads(cliff("--once", "--json"))
    ours = [s for s in record["servers"] if s["pid"] == server.proc.pid]
    assert ours and ours[0]["url"] == server.url and ours[0]["settings"]["ctx_size"]["value"] == "3072"
    assert "llama-server" in record["servers_text"]
    text = cliff("--once")
    assert "servers: attached to llama-server at" in text or "llama-server" in text.splitlines()[-1]


def test_the_default_command_s_screen_shows_the_server(server):
    screen = run_in_tmux([sys.executable, "-m", "cliff_tui"], until=lambda s: "cells in use" in s, limit=30)
    assert f"127.0.0.1:{server.port}" in screen and "attach" in screen
    assert "cells in use" in screen and "RSS" in screen


def test_through_a_proxy_sign_2_never_blames_this_machine_s_ram(server):
    with tcp_proxy(server.port) as port, growing_process(1536 * MiB) as grower, generating(server.url):
        store, levels = attach_for(f"http://127.0.0.1:{port}", seconds=12)
        grew = grower.rss()
    attached = store.servers.attached
    assert attached is not None and attached.pid is None and "proxy" in attached.how
    assert grew >= GiB, "the other process never grew: the test proves nothing"
    assert store.servers.processing or any(r.requests_processing for r in store.servers.readings.values())
    assert "amber" not in levels and "red" not in levels, levels
    final = store.signs.current[2]
    assert final.level == "na" and "not visible from here" in final.detail


def test_attach_after_the_chat_reads_the_prompt_cache_as_the_server_counts_it(tmp_path):
    with started_llama_server(
        tmp_path, "-np", "2", "--cache-ram", "128", "-lv", "4", "--metrics", ctx="8192"
    ) as server:
        talk(server.url, conversations=6, turns=3)
        truth = cache_state(server.log.read_text())
        record = json.loads(cliff("attach", "--llama-server", server.url, "--once", "--json"))
    prompts, mib = truth
    assert prompts >= 3, "the server saved too few prompts: the test proves nothing"
    memory = record["memory"]
    assert abs(memory["prompt_cache"] / MiB - mib) <= 0.25 * mib, (memory["prompt_cache"] / MiB, mib)
    assert memory["cache_ram"] == 128 * MiB and memory["saved_tokens"] > 0
    assert "pagemap" in memory["cache_basis"] and "capped by --cache-ram 128 MiB" in memory["text"]


# --- helpers --------------------------------------------------------------------------------------


def talk(url: str, conversations: int, turns: int) -> None:
    """Conversations one after another, each a few turns of the README: the server saves each
    finished one's prompt to make room in its two slots."""
    words = (ROOT / "README.md").read_text().split()
    for c in range(conversations):
        messages: list[dict] = []
        for t in range(turns):
            start = (c * turns + t) * 120
            messages.append({"role": "user", "content": " ".join(words[start : start + 120])})
            code, answer = chat(url, messages, max_tokens=8)
            assert code == 200, answer
            messages.append({"role": "assistant", "content": answer})


def cache_state(log: str) -> tuple[int, float]:
    """The server's own last word on its prompt cache (``-lv 4``): prompts held and MiB."""
    states = re.findall(r"cache state: (\d+) prompts, ([\d.]+) MiB", log)
    assert states, "the server never logged its cache state"
    return int(states[-1][0]), float(states[-1][1])


def attach_for(url: str, seconds: float) -> tuple[Store, list[str]]:
    """A live attach by URL, with the machine sampled as the screen's session does; sign 2's levels."""
    store, lock, levels = Store(), threading.Lock(), []
    cancel = threading.Event()

    def publish(event) -> None:
        with lock:
            store.feed(event)

    job = AttachJob.from_urls({"llama-server": url}, interval=0.2, timeout=2.0)
    worker = threading.Thread(target=job.run, args=(publish, cancel, lambda *a: None), daemon=True)
    worker.start()
    sampler = Sampler()
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            publish(sampler.sample())
            with lock:
                levels.append(store.signs.current[2].level)
            time.sleep(0.2)
    finally:
        cancel.set()
        worker.join(10)
    return store, levels


@contextmanager
def tcp_proxy(target_port: int):
    """A loopback TCP proxy (as an SSH tunnel or a published container port looks): its own port."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        listener.close()
        thread.join(5)


class Grower:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def rss(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss


GROW = """
import sys, time
chunks, total = [], int(sys.argv[1])
while sum(len(c) for c in chunks) < total:
    chunks.append(bytearray(64 << 20))
    time.sleep(0.25)
time.sleep(120)
"""


@contextmanager
def growing_process(total: int):
    """Another process on this machine taking ``total`` bytes of RAM, 64 MiB every quarter second."""
    proc = subprocess.Popen([sys.executable, "-c", GROW, str(total)])
    try:
        yield Grower(proc)
    finally:
        proc.kill()
        proc.wait(10)


@contextmanager
def generating(url: str):
    """The server generating throughout (a chat after another), so sign 2 judges while it generates."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            chat(url, [{"role": "user", "content": "Tell a long story about rivers."}], max_tokens=200)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(120)


def run_in_tmux(argv: list[str], until, limit: float) -> str:
    """A command in a detached 120×40 tmux session: the screen's text once ``until`` holds or
    ``limit`` seconds pass; the session is killed at the end."""
    tmux = shutil.which("tmux")
    need(tmux, "no tmux: apt-get install tmux (.ci/run does)")
    name = f"cliff-ways-in-{os.getpid()}"
    env = ["-e", f"PYTHONPATH={ROOT / 'tui'}", "-e", "TERM=xterm-256color"]
    subprocess.run([tmux, "new-session", "-d", "-s", name, "-x", "120", "-y", "40", *env, shlex.join(argv)], check=True)
    screen, deadline = "", time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            done = subprocess.run([tmux, "capture-pane", "-p", "-t", name], capture_output=True, text=True)
            screen = " ".join(done.stdout.split())
            if until(screen):
                break
            time.sleep(0.5)
        return screen
    finally:
        subprocess.run([tmux, "kill-session", "-t", name], capture_output=True)
