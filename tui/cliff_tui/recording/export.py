"""``cliff-tui export``: a recording as tables for spreadsheets (csv), scripts (json) and bug
reports (md), or as a recording again (jsonl: to share, with ``--redact``). The events go through
the same store as a replay, so alerts and the triangulation are recomputed, not copied."""

from __future__ import annotations

import json
import time
from typing import Any

from cliff_tui.events import Alert, Sample
from cliff_tui.recording.reader import Recording, open_recording
from cliff_tui.recording.redact import recording_lines, redact_recording
from cliff_tui.report.runs import RUN_COLUMNS, failure_record, run_record, run_rows
from cliff_tui.report.samples import sample_record
from cliff_tui.report.tables import csv_table, dumps, markdown_table
from cliff_tui.report.triangulation import triangulation_markdown, triangulation_output
from cliff_tui.store import Store
from cliff_tui.text import inert
from cliff_tui.units import fmt_bytes, fmt_duration


def export(path: str, fmt: str, table: str = "samples", redact: bool = False) -> str:
    recording = open_recording(path)
    if redact:
        recording = redact_recording(recording)
    if fmt == "jsonl":
        return recording_lines(recording)
    store = replay_all(recording)
    if fmt == "csv":
        return _csv(recording, store, table)
    if fmt == "json":
        return json.dumps(_json(recording, store), indent=2, default=str)
    return _markdown(recording, store)


def replay_all(recording: Recording) -> Store:
    store = Store()
    for event in recording.events:
        store.feed(event)
    return store


def samples(recording: Recording) -> list[Sample]:
    return [e for e in recording.events if isinstance(e, Sample)]


def sample_row(s: Sample) -> dict[str, Any]:
    row: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s.t)) + f".{int(s.t % 1 * 1000):03d}Z",
        "t": round(s.t, 3),
        "ram_used_bytes": s.ram.used_bytes,
        "ram_total_bytes": s.ram.total_bytes,
        "ram_available_bytes": s.ram.available_bytes,
        "swap_used_bytes": s.swap.used_bytes,
        "swap_total_bytes": s.swap.total_bytes,
    }
    for g in s.gpus:
        for name in (
            "vram_used_bytes",
            "vram_total_bytes",
            "shared_used_bytes",
            "util_pct",
            "temperature_c",
            "pcie_rx_bytes_s",
            "pcie_tx_bytes_s",
        ):
            row[f"gpu{g.index}_{name}"] = getattr(g, name)
    if s.process is not None:
        row["process_pid"] = s.process.pid
        row["process_rss_bytes"] = s.process.total_rss_bytes
    if s.cgroup is not None:
        row.update(
            cgroup_limit_bytes=s.cgroup.limit_bytes,
            cgroup_usage_bytes=s.cgroup.usage_bytes,
            cgroup_swap_bytes=s.cgroup.swap_bytes,
        )
    if s.cpu_quota is not None:
        row.update(
            cpu_quota_cpus=s.cpu_quota.cpus,
            cpu_periods=s.cpu_quota.periods,
            cpu_throttled_periods=s.cpu_quota.throttled_periods,
        )
    return row


def _csv(recording: Recording, store: Store, table: str) -> str:
    if table == "runs":
        return dumps([run_record(r) for r in store.runs.results], "csv")  # as `run -o csv` writes them
    if table == "alerts":
        return csv_table([alert_row(a) for a in store.signs.alerts], ALERT_COLUMNS)  # a header, even with none
    return csv_table([sample_row(s) for s in samples(recording)])


ALERT_COLUMNS = ("t", "sign", "level", "message")


def alert_row(a: Alert) -> dict[str, Any]:
    return dict(zip(ALERT_COLUMNS, (a.t, a.sign, a.level, a.message)))


def _json(recording: Recording, store: Store) -> dict[str, Any]:
    triangulation = json.loads(triangulation_output(store, "json")) if store.runs.results else None
    return {
        "header": recording.header,
        "problems": recording.problems or None,
        "samples": [sample_record(s) for s in samples(recording)],
        "runs": [run_record(r) for r in store.runs.results],
        "failures": [failure_record(f) for f in store.runs.failures],
        "alerts": [alert_row(a) for a in store.signs.alerts],
        "triangulation": triangulation,
    }


def _markdown(recording: Recording, store: Store) -> str:
    h = recording.header
    ss = samples(recording)
    lines = [f"# cliff-tui recording: {inert(recording.path)}", ""]
    machine = h.get("machine") or {}
    lines.append(
        f"- recorded by cliff-tui {h.get('tool_version', '?')} on {machine.get('hostname', '?')} "
        f"({machine.get('os', machine.get('platform', '?'))}), command: `{' '.join(h.get('command') or [])}`"
    )
    if h.get("gpus"):
        lines.append(
            "- GPUs: " + ", ".join(str(g.get("name", "?")) for g in h["gpus"]) + f" (driver {h.get('driver')})"
        )
    if ss:
        lines.append(
            f"- {len(ss)} samples over {fmt_duration(ss[-1].t - ss[0].t)}; RAM peak "
            f"{fmt_bytes(max(s.ram.used_bytes for s in ss))} of {fmt_bytes(ss[-1].ram.total_bytes)}"
        )
        for index in sorted({g.index for s in ss for g in s.gpus}):
            used = [g.vram_used_bytes for s in ss for g in s.gpus if g.index == index and g.vram_used_bytes is not None]
            if used:
                lines.append(f"- GPU{index} dedicated VRAM peak {fmt_bytes(max(used))}")
    if h.get("redacted"):
        lines.append(f"- redacted: {', '.join(map(str, h['redacted']))} replaced")
    if recording.problems:
        lines.append(f"- damaged: {inert(recording.problems)}")
    if store.runs.results or store.runs.failures:
        lines += ["", "## Runs", ""]
        lines.append(
            triangulation_markdown(store.runs.triangulations(), store.runs.results, store.runs.failures)
            if store.runs.plan
            else markdown_table(run_rows(store.runs.results), RUN_COLUMNS)
        )
        for r in store.runs.results:
            lines.append(f"- {r.run_id}: {r.verdict.level} — {r.verdict.text}")
    if store.signs.alerts:
        lines += ["", "## Alerts (recomputed)", ""]
        start = ss[0].t if ss else 0.0
        lines += [f"- +{fmt_duration(a.t - start)} sign {a.sign} {a.level}: {a.message}" for a in store.signs.alerts]
    return "\n".join(lines)
