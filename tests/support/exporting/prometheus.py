"""A real Prometheus (Debian's ``prometheus`` package; .ci/run installs it) scraping an exporter
every second, started and stopped by the test."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fakes.http_server import free_port
from needs import unavailable

DEPLOY_CONFIG = Path(__file__).resolve().parents[3] / "deploy" / "prometheus.yml"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        unavailable("no prometheus binary: apt-get install prometheus (.ci/run does)")
    return found


def config_for(target: str) -> str:
    """deploy/prometheus.yml with this test's target and a 1 s scrape."""
    text = DEPLOY_CONFIG.read_text()
    text = re.sub(r"scrape_interval: \d+s", "scrape_interval: 1s", text)
    text = re.sub(r"scrape_timeout: \d+s", "scrape_timeout: 1s", text)
    text, n = re.subn(r"(- targets:\n)(\s+- \S+\n)+", rf"\g<1>          - {target}\n", text)
    assert n == 1, "deploy/prometheus.yml no longer has one static targets list"
    return text


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> tuple[int, dict[str, Any]]:
        query = urllib.parse.urlencode(params)
        try:
            with _OPENER.open(f"{self.url}{path}?{query}", timeout=10) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def query(self, promql: str) -> tuple[int, dict[str, Any]]:
        return self.get("/api/v1/query", query=promql)

    def wait_for(self, promql: str, limit: float = 60) -> list[dict[str, Any]]:
        """The instant vector once it is not empty (Prometheus scrapes every second)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            status, body = self.query(promql)
            assert status == 200 and body["status"] == "success", body
            if body["data"]["result"]:
                return body["data"]["result"]
            time.sleep(0.5)
        raise AssertionError(f"Prometheus has no {promql} after {limit:.0f} s")


@contextmanager
def scraping(target: str, workdir: Path) -> Iterator[Prometheus]:
    config = workdir / "prometheus.yml"
    config.write_text(config_for(target))
    port = free_port()
    log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 - the server writes it until the block ends
    proc = subprocess.Popen(
        [
            binary(),
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    prometheus = Prometheus(f"http://127.0.0.1:{port}")
    try:
        _wait_ready(prometheus, proc, workdir / "prometheus.log")
        yield prometheus
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_ready(prometheus: Prometheus, proc: subprocess.Popen, log: Path, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with _OPENER.open(prometheus.url + "/-/ready", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"prometheus was not ready in {limit:.0f} s: {log.read_text()[-2000:]}")
