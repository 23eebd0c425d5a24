"""Numbers on the command line that make no sense are refused by the parser: one line naming the
flag, exit 2, before anything starts."""

from __future__ import annotations

import pytest

from cliff_tui.cli.parser import build_parser, normalise_argv
from cliff_tui.engine.settings import usable_cpus

CPUS = usable_cpus()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["watch", "-i", "inf"], "-i/--interval: must be seconds from 0.05 to 3,600, not 'inf'"),
        (["watch", "-i", "nan"], "must be seconds from 0.05 to 3,600, not 'nan'"),
        (["watch", "-i", "0"], "must be seconds from 0.05"),
        (["watch", "-i", "0.000001"], "must be seconds from 0.05"),  # a sample a microsecond: a core and GBs an hour
        (["exporter", "-i", "1e10"], "-i/--interval: must be seconds from 0.05 to 3,600, not '1e10'"),  # time_t
        (["attach", "--timeout", "inf"], "--timeout: must be seconds from 0.01 to 3,600"),
        (["attach", "--timeout", "1e10"], "--timeout: must be seconds from 0.01 to 3,600"),  # the socket's
        (["triangulate", "--budget", "0"], "--budget: must be seconds from 1 to 2,592,000"),
        (["watch", "-i", "soon"], "-i/--interval: must be seconds from 0.05 to 3,600, not 'soon'"),
        (["watch", "--pid", "-1"], "--pid: must be a whole number from 1 to 2,147,483,647, not '-1'"),
        (["watch", "--pid", "abc"], "--pid: must be a whole number from 1 to 2,147,483,647, not 'abc'"),
        (["exporter", "--pid", "0"], "--pid: must be a whole number from 1"),
        (["run", "-t", "0"], "-t/--threads: must be a whole number from 1"),
        (["run", "-t", str(2**40)], "-t/--threads: must be a whole number from 1"),
        (
            ["triangulate", "-t", str(CPUS + 1)],
            f"-t/--threads: {CPUS + 1:,} threads on {CPUS:,} CPU{'s' if CPUS > 1 else ''} (what this process may use) "
            f"would wait for each other and slow every token: use at most {CPUS:,}",
        ),
        (["run", "-ub", "-512"], "-ub/--ubatch-size: must be a whole number from 1"),
        (
            ["run", "-ngl", "-5"],
            "-ngl/--n-gpu-layers: must be a layer count from 0 to 2,147,483,647, or all (-1): not '-5'",
        ),
        (["run", "-ngl", str(2**32 - 1)], "must be a layer count from 0"),  # a C int would wrap it to -1
        (
            ["triangulate", "-ngl", "auto"],
            "auto is llama.cpp's, not llama-cpp-python's: `cliff-tui fit` says how many fit",
        ),
        (["fit", "-np", "0"], "-np/--parallel: must be a whole number from 1"),
        (["fit", "-np", "257"], "-np/--parallel: llama.cpp serves at most 256 sequences, not 257"),
        (["triangulate", "--depths", ","], "--depths: no depth in ',': pass at least one, e.g. 16k,32k"),
        (["triangulate", "--depths", ""], "--depths: no depth in ''"),
        (["run", "--depth", "inf"], "--depth: not a whole number of tokens from 1 to 2,147,483,647: 'inf'"),
        (["run", "-c", "1e999"], "not a whole number of tokens"),
        (["run", "--n-gen", "nan"], "not a whole number of tokens"),
        (
            ["triangulate", "--depths", "16k,4000000k"],
            "not a whole number of tokens from 1 to 2,147,483,647: '4000000k'",
        ),
        (["fit", "--capacity", "9" * 400], "--capacity: not a size this machine could have"),
        (["triangulate", "--reserve", "99999999999t"], "not a size this machine could have"),
    ],
)
def test_a_number_that_makes_no_sense_is_refused_with_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(normalise_argv(argv))
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert words in error and "Traceback" not in error


@pytest.mark.parametrize(
    "argv, name, value",
    [
        (["watch", "-i", "0.25"], "interval", 0.25),
        (["watch", "--pid", "1"], "pid", 1),
        (["run", "--depth", "65k"], "depth", 65_000),
        (["run", "-c", "2147483647"], "ctx_size", 2**31 - 1),
        (["run", "-ngl", "-1"], "n_gpu_layers", -1),
        (["run", "-ngl", "all"], "n_gpu_layers", -1),
        (["run", "-ngl", "0"], "n_gpu_layers", 0),
        (["run", "-n", "8"], "n_gen", 8),  # llama.cpp's -n, not a prefix of -ngl
        (["triangulate", "-n", "16"], "n_gen", 16),
        (["fit", "-np", "256"], "parallel", 256),
        (["watch", "-i", "0.05"], "interval", 0.05),
        (["triangulate", "--reserve", "1.5GiB"], "reserve", 3 * 2**29),
    ],
)
def test_sensible_numbers_still_parse(argv, name, value):
    assert getattr(build_parser().parse_args(normalise_argv(argv)), name) == value
