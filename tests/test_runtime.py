"""A worker process's runtime settings (``sparsewatch/runtime.py``): set inside, restored after."""

from __future__ import annotations

import gc
import weakref

import numpy as np  # loads the BLAS library the workers use, so that there is one to limit
from threadpoolctl import threadpool_info, threadpool_limits

from sparsewatch.runtime import worker_process


def _blas_threads() -> set[int]:
    threads = {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}
    assert threads, f"no BLAS library loaded (numpy {np.__version__}): nothing was checked"
    return threads


def test_collector_tuned_and_startup_objects_frozen_then_restored() -> None:
    before = gc.get_threshold()
    survivor = [object()]  # exists before: frozen inside, collectable again after
    with threadpool_limits(limits=2, user_api="blas"):  # a known setting to come back to
        blas_before = _blas_threads()
        with worker_process(blas_threads=1, gc_threshold=12_345):
            assert gc.get_threshold() == (12_345, *before[1:])
            assert gc.get_freeze_count() > 0
            assert not any(obj is survivor for obj in gc.get_objects())  # never walked again
            assert _blas_threads() == {1}
        assert _blas_threads() == blas_before
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
    assert any(obj is survivor for obj in gc.get_objects())


def test_zero_leaves_the_collector_alone() -> None:
    before = gc.get_threshold()
    blas_before = _blas_threads()
    with worker_process(blas_threads=0, gc_threshold=0):
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() == 0
        assert _blas_threads() == blas_before  # 0: the library's own setting
    assert gc.get_threshold() == before


def test_cyclic_garbage_is_still_collected_inside() -> None:
    class Node:
        other: Node

    refs = []
    with worker_process(gc_threshold=500):
        for _ in range(5_000):  # pairs in reference cycles, dropped at once: only gc frees them
            a, b = Node(), Node()
            a.other, b.other = b, a
            refs.append(weakref.ref(a))
        del a, b
        alive = sum(r() is not None for r in refs)
    assert alive < 1_000  # collected along the way, without an explicit gc.collect()
