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
