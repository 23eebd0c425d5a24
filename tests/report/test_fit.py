"""What fits, as ``cliff-tui fit`` prints it: markdown and the JSON record, on SmolLM2's header."""

from __future__ import annotations

import json

import pytest

from cliff_tui.analysis.fit import MeasuredLine, fit_table
from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.report.fit import fit_record, format_fit_markdown

pytestmark = pytest.mark.model  # every table here is SmolLM2's

MiB = 2**20


@pytest.fixture(scope="module")
def smol(smollm2):
    return read_model_info(smollm2)


def test_markdown_and_record_carry_the_same_table(smol):
    table = fit_table(smol, 200 * MiB, reserve_bytes=16 * MiB)
    text = format_fit_markdown(table)
    assert "| q4_0 ★ | on | no | theory |" in text
    assert "Suggested: `llama-server -m" in text and "compute buffer: not included" in text
    record = json.loads(json.dumps(fit_record(table)))
    assert record["best_command"] == table.best.command
    assert [o["type_k"] for o in record["options"]] == [o.type_k for o in table.options]
    assert record["usable_bytes"] == 184 * MiB


def test_rows_on_a_measured_base_say_where_it_came_from(smol):
    f16_theory = 30 * 3 * 64 * 2 * 2
    line = MeasuredLine(
        bytes_per_token=f16_theory + 4000, intercept_bytes=150 * MiB, type_k="f16", type_v="f16", flash_attn=True
    )
    text = format_fit_markdown(fit_table(smol, 2**30, n_seq=1, measured=[line], target_ctx=4096))
    assert "measured (triangulation: its intercept less its fixed KV" in text and "compute buffer: not" not in text
    assert "the rows with flash attention off grow faster" in text


def test_a_reserve_above_the_capacity_reads_as_nothing_usable(smol):
    table = fit_table(smol, 2**30, reserve_bytes=3 * 2**30, target_ctx=4096)
    assert "1.00 GiB less 3.00 GiB reserve = 0 B usable" in format_fit_markdown(table)
