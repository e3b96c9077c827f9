"""Freed heap memory goes back to the operating system when the worker calls for it (glibc)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim")

RSS_MB = """
def rss_mb():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith("VmRSS")) / 1024
"""


def run_fresh(script: str) -> list[str]:
    """Run ``script`` (with ``rss_mb()`` defined) in a fresh interpreter; its printed words."""
    code = RSS_MB + textwrap.dedent(script)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_release_free_heap_returns_fragmented_free_memory() -> None:
    # In a fresh interpreter: 200 MB of 64 KB buffers (below glibc's mmap threshold, so on the
    # heap), all freed but the last, which pins the heap's top: free() alone cannot shrink it.
    words = run_fresh(
        """
        from sparsewatch.consumers.memory import release_free_heap

        blocks = [bytearray(b"x" * 65536) for _ in range(3200)]
        last = blocks[-1]
        del blocks
        before = rss_mb()
        assert release_free_heap()
        print(before, rss_mb())
        """
    )
    before, after = map(float, words)
    assert before - after > 150, (before, after)


@pytest.mark.parametrize("mapped", [False, True])
def test_map_large_allocations_returns_freed_buffers(mapped: bool) -> None:
    # The writer process's pattern: one large job freed (glibc then raises its mmap threshold to
    # its size), then megabyte buffers below that size (pickled results and checkpoints) with
    # long-lived objects allocated between them. Without the fixed threshold the buffers come from
    # the heap and, once freed, stay resident behind the objects pinning it; with it every buffer
    # is its own mapping, gone when freed.
    words = run_fresh(
        f"""
        from sparsewatch.consumers.memory import map_large_allocations

        if {mapped}:
            assert map_large_allocations()
        big = bytearray(16 << 20)
        del big
        base = rss_mb()
        bufs, keep = [], []
        for i in range(40):
            bufs.append(bytearray(2 << 20))
            bufs[-1][::4096] = b"x" * len(bufs[-1][::4096])  # touch every page
            keep.append(bytearray(2048))  # a long-lived object after each buffer
        del bufs
        print(base, rss_mb())
        """
    )
    base, after = map(float, words)
    if mapped:
        assert after - base < 10, (base, after)
    else:  # the behaviour the call exists to avoid
        assert after - base > 60, (base, after)


@pytest.mark.parametrize("limit_mb", [32, 4096])
def test_free_heap_bound_trims_only_above_its_limit(limit_mb: int) -> None:
    # The worker's check between windows: free heap pinned behind a live block is released when
    # it exceeds the bound (once: the next check finds nothing more), and kept when it does not.
    words = run_fresh(
        f"""
        from sparsewatch.consumers.memory import FreeHeapBound

        bound = FreeHeapBound({limit_mb} << 20)
        first = bound.check()  # sets the baseline
        blocks = [bytearray(b"x" * 65536) for _ in range(3200)]
        last = blocks[-1]
        del blocks
        before = rss_mb()
        trimmed = bound.check()
        again = bound.check()
        print(first, trimmed, again, before, rss_mb(), bound.trims, bound.checks)
        """
    )
    first, trimmed, again, before, after, trims, checks = words
    assert first == "False" and again == "False" and checks == "3"
    if limit_mb == 32:
        assert trimmed == "True" and trims == "1"
        assert float(before) - float(after) > 150, (before, after)
    else:
        assert trimmed == "False" and trims == "0"
        assert abs(float(before) - float(after)) < 10, (before, after)


def test_free_heap_bound_negative_limit_never_trims() -> None:
    from sparsewatch.consumers.memory import FreeHeapBound

    bound = FreeHeapBound(-1)
    assert not bound.check() and bound.trims == 0
