"""``cliff-tui attach --once``: one sample and one reading per endpoint (two, ``interval`` apart, for
llama-server's tok/s), as a JSON record with each rate's basis or the reason there is none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from cliff_tui.analysis.server_rates import ServerRateMeter
from cliff_tui.analysis.thresholds import default_reserve
from cliff_tui.codec import to_plain
from cliff_tui.events import ServerReading
from cliff_tui.jobs.attach import DISCOVERY_TIMEOUT_S, AttachJob, LiveRate, Poller, healthy
from cliff_tui.probes.endpoints.discovery import NOT_VISIBLE, describe_found, find_servers, found_line
from cliff_tui.probes.endpoints.kinds import reports
from cliff_tui.probes.endpoints.server_flags import setting_text
from cliff_tui.records import FoundServer, SlotReading
from cliff_tui.report.samples import sample_record
from cliff_tui.store import Store

NOTHING_GENERATED = "no tokens generated since the server started: send a chat request, then attach again"


def record_key(source: str) -> str:
    """An API's readings in the record: ``llama_server``, ``ollama``."""
    return source.replace("-", "_")


def attach_once(
    job: AttachJob, sampler: Any, *, sleep: Callable[[float], None] = time.sleep
) -> tuple[dict[str, Any], bool]:
    """Two polls of every server followed, ``interval`` apart (for tok/s and the memory's rate),
    fed to a :class:`Store` as the screen's are; the record is read from that store.

    ``ok`` is False when no endpoint answered as it should (the CLI exits 3); following a PID with
    nothing else asked for is fine on its own.
    """
    store = Store()

    def feed(event: object) -> None:
        store.feed(event)  # type: ignore[arg-type]  # a job publishes events only

    targets = job.targets(feed)
    pollers = job.pollers(targets)
    store.feed(sampler.sample())
    job.poll_all(pollers, feed)
    if not targets:
        job.announce_search(pollers, feed)
    first = {p.endpoint.source: p.last for p in pollers if p.last is not None}
    again = [p for p in pollers if p.last is not None and healthy(p.last)]
    if again:
        sleep(job.interval)
        store.feed(sampler.sample())
        job.poll_all(again, feed)
    return once_record(job, store, pollers, first)


def once_record(
    job: AttachJob, store: Store, pollers: list[Poller], first: dict[str, ServerReading]
) -> tuple[dict[str, Any], bool]:
    sample = store.machine.latest
    assert sample is not None
    record = sample_record(sample)
    attached = store.servers.attached
    if store.servers.found is not None:
        record["servers"] = [found_record(s) for s in store.servers.found.servers]
        record["attached"] = found_record(attached) if attached is not None else None
    notes = [n.text for n in store.messages.notices]
    if notes:
        record["discovery"] = notes[0] if len(notes) == 1 else "; ".join(notes)
    settings = {s.name: s.value for s in attached.settings} if attached is not None else {}
    for poller in pollers:
        if poller.last is None:
            continue
        before = first.get(poller.endpoint.source, poller.last)
        later = poller.last if poller.last is not before else None
        live = _total_live(poller.live) if later is not None else None
        record[record_key(poller.endpoint.source)] = endpoint_record(before, later, live, settings)
    if attached is not None:
        record["memory"] = _memory(store, pollers, attached)
        record["pool"] = _pool(store, pollers)
        memory = next((p.memory for p in pollers if p.memory is not None), None)
        if record["pool"] is not None and memory is not None and memory.per_cell and "pool_ctx" in settings:
            record["pool"]["largest_context_by_memory"] = memory_limit(
                int(settings["pool_ctx"]), memory.per_cell, sample
            )
    record["signs"] = {str(n): to_plain(state) for n, state in store.signs.current.items()}
    latest = {p.endpoint.source: p.last for p in pollers if p.last is not None}
    ok, reason = _verdict(job, latest, sample)
    record["ok"] = ok
    if reason:
        record["reason"] = reason
    return record, ok


def _total_live(rates: list[LiveRate]) -> LiveRate | None:
    """Every decoding slot together: the server's throughput."""
    if not rates:
        return None
    total = sum(r.n_tokens for r in rates)
    return LiveRate(rates[0].slot, total, max(r.seconds for r in rates), max(r.depth or 0 for r in rates))


def _verdict(job: AttachJob, latest: dict[str, ServerReading], sample: Any) -> tuple[bool, str | None]:
    if any(r.status == "ok" for r in latest.values()):
        return True, None
    process = sample.process
    following = process is not None and process.rss_bytes is not None
    if job.discover_defaults and following:
        return True, None
    problems = "; ".join(f"{r.source} {r.url}: {r.status} — {r.message}" for r in latest.values())
    return False, f"no server could be read ({problems})" if problems else "no server to read"


def endpoint_record(
    reading: ServerReading,
    later: ServerReading | None = None,
    live: LiveRate | None = None,
    settings: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A reading as ``--once --json`` reports it, with decode/prompt tok/s or the reason there are none."""
    latest = later or reading
    record: dict[str, Any] = {
        "source": latest.source,
        "url": latest.url,
        "status": latest.status,
        "message": latest.message,
        "reason": None if latest.status == "ok" else latest.message or latest.status,
    }
    record.update(_rates(reading, later, live))
    if reports(latest.source, "slots"):
        record.update(_llama_fields(latest, settings or {}))
    elif reports(latest.source, "kv_blocks"):
        record["kv_blocks"] = to_plain(latest.kv_blocks) if latest.kv_blocks is not None else None
    else:
        record["models"] = [_model_record(m) for m in latest.models]
    record["reasons"] = dict(latest.reasons)
    return record


def _rates(reading: ServerReading, later: ServerReading | None, live: LiveRate | None) -> dict[str, Any]:
    meter = ServerRateMeter()
    rates, _ = meter.update(reading)
    if later is not None:
        rates, _ = meter.update(later)
    latest = later or reading
    decode = _rate_or_average(
        rates.decode_tok_s,
        rates.decode_reason,
        latest,
        latest.tokens_predicted_total,
        latest.tokens_predicted_seconds_total,
        live,
    )
    prompt = _rate_or_average(
        rates.prompt_tok_s, rates.prompt_reason, latest, latest.prompt_tokens_total, latest.prompt_seconds_total
    )
    gap = later.t - reading.t if later is not None else None
    return {
        "decode_tok_s": decode[0],
        "decode_basis": decode[1],
        "decode_reason": decode[2],
        "prompt_tok_s": prompt[0],
        "prompt_basis": prompt[1],
        "prompt_reason": prompt[2],
        "readings_gap_s": round(gap, 3) if gap is not None else None,
    }


def _rate_or_average(
    rate: float | None,
    reason: str | None,
    latest: ServerReading,
    tokens: float | None,
    seconds: float | None,
    live: LiveRate | None = None,
) -> tuple[float | None, str | None, str | None]:
    """(tok/s, basis, reason): the server's counters between the two readings, else the running
    request's progress in /slots, else the server's lifetime average."""
    if latest.status != "ok" or not reports(latest.source, "counters"):
        return None, None, reason
    if rate is not None:
        return rate, "server counters between the two readings (a request finished in between)", None
    if live is not None:
        return live.tok_s, f"live: /slots n_decoded, {live.n_tokens} tokens in {live.seconds:.2f} s", None
    if tokens is None or seconds is None:
        return None, None, f"{latest.source}'s /metrics has no such counter (an older or newer server?)"
    if tokens > 0 and seconds > 0:
        return tokens / seconds, f"average since {latest.source} started (no tokens counted between the readings)", None
    return None, None, NOTHING_GENERATED


def _llama_fields(r: ServerReading, settings: dict[str, str]) -> dict[str, Any]:
    return {
        "requests_processing": r.requests_processing,
        "tokens_predicted_total": r.tokens_predicted_total,
        "tokens_predicted_seconds_total": r.tokens_predicted_seconds_total,
        "prompt_tokens_total": r.prompt_tokens_total,
        "prompt_seconds_total": r.prompt_seconds_total,
        "slots": [_slot_record(s) for s in r.slots],
        "context_in_effect": context_in_effect(r.slots, settings.get("kv_unified")),
    }


def context_in_effect(slots: Sequence[SlotReading], unified_setting: str | None = None) -> dict[str, Any] | None:
    """The context a request really gets: each slot's own n_ctx. With a unified cache (llama-server's
    default without -np) every slot reports the whole pool; split (-np without --kv-unified), each
    reports its share, n_ctx / slots padded to 256. The server does not say which: the slots prove
    a split when together they hold more tokens than one slot's n_ctx."""
    sizes = [s.n_ctx for s in slots if s.n_ctx]
    if not sizes:
        return None
    per_slot, n = min(sizes), len(slots)
    held = sum(s.tokens_used or 0 for s in slots)
    split = n > 1 and (held > per_slot or unified_setting == "false")
    if n > 1 and unified_setting == "true":
        unified, total = True, per_slot
        text = f"{n} slots draw on one pool of {per_slot:,} cells (unified KV cache, read from the server's flags)"
    elif n == 1:
        unified, total = None, per_slot
        text = f"1 slot, up to {per_slot:,} tokens"
    elif split:
        unified, total = False, per_slot * n
        text = f"n_ctx {per_slot:,} per slot, {n} slots share {total:,} (split: " + (
            "read from the server's flags)"
            if unified_setting == "false"
            else f"the slots hold {held:,} tokens together, more than one slot's n_ctx)"
        )
    else:
        unified, total = None, None
        text = (
            f"{n} slots, each up to {per_slot:,} tokens: one pool of {per_slot:,} if the cache is unified "
            f"(llama-server's default without -np), {n} × {per_slot:,} = {per_slot * n:,} split if -np "
            "without --kv-unified (the server does not say which)"
        )
    return {
        "n_ctx_per_slot": per_slot,
        "slots": n,
        "n_ctx_total": total,
        "unified": unified,
        "tokens_held": held,
        "text": text,
    }


def _slot_record(slot: Any) -> dict[str, Any]:
    record = to_plain(slot)
    used, n_ctx = slot.tokens_used, slot.n_ctx
    record["context_used_pct"] = round(100.0 * used / n_ctx, 2) if used is not None and n_ctx else None
    return record


def _model_record(model: Any) -> dict[str, Any]:
    record = to_plain(model)
    size, vram = model.size_bytes, model.size_vram_bytes
    in_ram = size - vram if size is not None and vram is not None else None
    record["in_ram_bytes"] = in_ram
    record["in_ram_pct"] = round(100.0 * in_ram / size, 1) if in_ram is not None and size else None
    record["context_in_effect"] = model.context_length
    if record["in_ram_pct"]:
        record["text"] = f"{record['in_ram_pct']:.0f} % of the model in system RAM"
    return record


def found_record(server: FoundServer) -> dict[str, Any]:
    """A found server as JSON: where, how it was found, its settings by name with their sources."""
    record = to_plain(server)
    record["settings"] = {s.name: {"value": s.value, "source": s.source} for s in server.settings}
    record["text"] = found_line(server)
    return record


def list_servers(timeout: float) -> tuple[dict[str, Any], str]:
    """``attach --list``: every server found (JSON record, and text: one line each, settings under)."""
    servers = find_servers(timeout=min(timeout, DISCOVERY_TIMEOUT_S))
    chosen = servers.chosen
    record = {
        "servers": [found_record(s) for s in servers.servers],
        "attached": chosen.url if chosen is not None else None,
        "text": describe_found(servers),
    }
    lines = [describe_found(servers)]
    for s in servers.servers:
        mark = "*" if s is chosen else "-"
        lines.append(f"{mark} {found_line(s)}")
        lines.extend(f"    {setting_text(x)}" for x in s.settings)
    return record, "\n".join(lines)


def _pool(store: Store, pollers: list[Poller]) -> dict[str, Any] | None:
    """The context pool gauge as the screen draws it, with what the log said of failures."""
    gauge = store.servers.pool_gauge()
    shown = store.servers.shown
    if gauge is None or shown is None:
        return None
    values = {s.name: s.value for s in store.servers.attached.settings} if store.servers.attached else {}
    return {
        "tokens": gauge.tokens,
        "max_context": gauge.max_context,
        "fraction": round(gauge.fraction, 4),
        "level": gauge.level,
        "unified": values.get("kv_unified") == "true",
        "what": gauge.tier,
        "failing": gauge.failing,
        "preempted_last_minute": gauge.preempted,
        "kv_blocks": to_plain(shown.kv_blocks) if shown.kv_blocks is not None else None,
        "context_failures_in_log": shown.context_failures,
        "log": shown.log or "no process to read a log from",
        "note": gauge.note,
    }


def _memory(store: Store, pollers: list[Poller], attached: FoundServer) -> dict[str, Any]:
    split = store.server_memory()
    if split is not None:
        return to_plain(split) | {"text": split.text()}
    if attached.pid is None:
        return {"reason": f"{NOT_VISIBLE}: {attached.how}"}
    problem = next((p.memory.problem for p in pollers if p.memory is not None and p.memory.problem), "")
    return {"reason": problem or "not read"}


def memory_limit(pool_ctx: int, per_cell: float, sample: Any) -> dict[str, Any]:
    """The largest -c this server could have before the memory cliff: its pool now plus as many
    cells as the room RAM (or the cgroup) has left above the reserve holds."""
    room = sample.ram_room_bytes - default_reserve(sample.ram_capacity_bytes)
    return {
        "tokens": max(0, int(pool_ctx + room / per_cell)),
        "basis": "theory + measured base: KV bytes per cell from the GGUF header and flags, and the room "
        "RAM has left now above the reserve",
    }
