"""Numbers on the command line that make no sense are refused by the parser: one line naming the
flag, exit 2, before anything starts."""

from __future__ import annotations

import pytest

from cliff_tui.cli import build_parser, normalise_argv


@pytest.mark.parametrize("argv, words", [
    (["watch", "-i", "inf"], "-i/--interval: must be a number > 0, not 'inf'"),
    (["watch", "-i", "nan"], "must be a number > 0, not 'nan'"),
    (["watch", "-i", "0"], "must be a number > 0"),
    (["attach", "--timeout", "inf"], "--timeout: must be a number > 0"),
    (["watch", "-i", "soon"], "-i/--interval: must be a number > 0, not 'soon'"),
    (["watch", "--pid", "-1"], "--pid: must be a whole number from 1 to 2,147,483,647, not '-1'"),
    (["watch", "--pid", "abc"], "--pid: must be a whole number from 1 to 2,147,483,647, not 'abc'"),
    (["exporter", "--pid", "0"], "--pid: must be a whole number from 1"),
    (["run", "-t", "0"], "-t/--threads: must be a whole number from 1"),
    (["run", "-t", str(2**40)], "-t/--threads: must be a whole number from 1"),
    (["run", "-ub", "-512"], "-ub/--ubatch-size: must be a whole number from 1"),
    (["fit", "-np", "0"], "-np/--parallel: must be a whole number from 1"),
    (["run", "--depth", "inf"], "--depth: not a whole number of tokens from 1 to 2,147,483,647: 'inf'"),
    (["run", "-c", "1e999"], "not a whole number of tokens"),
    (["run", "--n-gen", "nan"], "not a whole number of tokens"),
    (["triangulate", "--depths", "16k,4000000k"], "not a whole number of tokens from 1 to 2,147,483,647: '4000000k'"),
    (["fit", "--capacity", "9" * 400], "--capacity: not a size this machine could have"),
    (["triangulate", "--reserve", "99999999999t"], "not a size this machine could have"),
])
def test_a_number_that_makes_no_sense_is_refused_with_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(normalise_argv(argv))
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert words in error and "Traceback" not in error


@pytest.mark.parametrize("argv, name, value", [
    (["watch", "-i", "0.25"], "interval", 0.25),
    (["watch", "--pid", "1"], "pid", 1),
    (["run", "--depth", "65k"], "depth", 65_000),
    (["run", "-c", "2147483647"], "ctx_size", 2**31 - 1),
    (["run", "-ngl", "-1"], "n_gpu_layers", -1),
    (["triangulate", "--reserve", "1.5GiB"], "reserve", 3 * 2**29),
])
def test_sensible_numbers_still_parse(argv, name, value):
    assert getattr(build_parser().parse_args(normalise_argv(argv)), name) == value
