"""Freed heap memory goes back to the operating system when the worker calls for it (glibc)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim")


def test_release_free_heap_returns_fragmented_free_memory() -> None:
    # In a fresh interpreter: 200 MB of 64 KB buffers (below glibc's mmap threshold, so on the
    # heap), all freed but the last, which pins the heap's top: free() alone cannot shrink it.
    script = textwrap.dedent(
        """
        from sparsewatch.consumers.memory import release_free_heap

        def rss_mb():
            with open("/proc/self/status") as fh:
                return next(int(l.split()[1]) for l in fh if l.startswith("VmRSS")) / 1024

        blocks = [bytearray(b"x" * 65536) for _ in range(3200)]
        last = blocks[-1]
        del blocks
        before = rss_mb()
        assert release_free_heap()
        print(before, rss_mb())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, after = map(float, out.stdout.split())
    assert before - after > 150, (before, after)


@pytest.mark.parametrize("mapped", [False, True])
def test_map_large_allocations_returns_freed_buffers(mapped: bool) -> None:
    # The writer process's pattern: one large job freed (glibc then raises its mmap threshold to
    # its size), then megabyte buffers below that size (pickled results and checkpoints) with
    # long-lived objects allocated between them. Without the fixed threshold the buffers come from
    # the heap and, once freed, stay resident behind the objects pinning it; with it every buffer
    # is its own mapping, gone when freed.
    script = textwrap.dedent(
        f"""
        from sparsewatch.consumers.memory import map_large_allocations

        def rss_mb():
            with open("/proc/self/status") as fh:
                return next(int(l.split()[1]) for l in fh if l.startswith("VmRSS")) / 1024

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
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    base, after = map(float, out.stdout.split())
    if mapped:
        assert after - base < 10, (base, after)
    else:  # the behaviour the call exists to avoid
        assert after - base > 60, (base, after)
