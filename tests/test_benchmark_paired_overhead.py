"""The pipeline throughput benchmark's paired overhead and its interval for the median."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(
            "pipeline_throughput_for_test", BENCHMARKS / "pipeline_throughput.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def enumerated_coverage(n: int, j: int) -> float:
    """P(x_(j) <= median <= x_(n+1-j)) by enumerating which of n values fall below the median."""
    hits = sum(j <= sum(below) <= n - j for below in itertools.product((0, 1), repeat=n))
    return hits / 2**n


@pytest.mark.parametrize("n", range(1, 13))
def test_median_interval_is_the_tightest_with_95_percent_coverage(bench, n):
    values = [float(v) for v in range(n, 0, -1)]  # unsorted on purpose
    low, high, coverage = bench.median_interval(values)
    j = int(low)  # values are 1..n, so x_(j) = j
    assert high == n + 1 - j
    assert coverage == pytest.approx(enumerated_coverage(n, j))
    if j > 1:
        assert coverage >= 0.95
    if j + 1 <= (n + 1) // 2:  # a tighter interval would cover less than 95%
        assert enumerated_coverage(n, j + 1) < 0.95


def test_paired_overhead_pairs_runs_of_the_same_repeat(bench):
    core = [{"seconds": s} for s in (10.0, 20.0, 10.0)]
    path = [{"seconds": s} for s in (11.0, 21.0, 12.0)]
    out = bench.paired_overhead(path, core)
    assert out["per_repeat"] == pytest.approx([0.1, 0.05, 0.2])
    assert out["median"] == pytest.approx(0.1)
    # unpaired medians would read 12 / 10 - 1 = +20%: pairing removes the slow repeat's drift
    with pytest.raises(ValueError):
        bench.paired_overhead(path[:2], core)


def test_memory_counts_the_writer_process_but_not_a_broker_child(bench):
    """Resident memory is the worker's and its writer's: a child running another program (the
    Kafka broker's JVM, when the benchmark starts one) is not counted."""
    import multiprocessing
    import subprocess

    other = subprocess.Popen(["sleep", "30"])
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    writer_like = ctx.Process(target=stop.wait)
    writer_like.start()
    try:
        assert not bench._same_program(str(other.pid))
        assert bench._same_program(str(writer_like.pid))
    finally:
        other.kill()
        other.wait()
        stop.set()
        writer_like.join()
    assert not bench._same_program(str(other.pid))  # exited: nothing to count
