"""Giving freed heap memory back to the operating system: when a worker goes idle, and when its
heap holds too much of it between windows.

A window's numerical work allocates and frees hundreds of megabytes of temporaries. glibc keeps
freed heap memory for reuse (its mmap threshold adapts upwards after large frees, so later large
arrays come from the heap too), so a worker's resident memory stays at its high-water mark after
the work is done: measured on the default detector, about 520 MB resident between windows against
72 MB of live arrays. ``malloc_trim(0)`` returns the free pages (about 240 MB resident in the same
run). It costs milliseconds, and what it returns is page-faulted back in by the next window, so
between windows of a backlog the worker trims only when the heap holds more than a bound of free
memory (:class:`FreeHeapBound`, glibc ``mallinfo2``): over a long replay the free memory held
behind live objects otherwise grows (48 MB in the first fifth of the sustained replay, 142 MB in
the last, while the live heap stayed 96-147 MB), and with it the resident size.

The writer process (:func:`sparsewatch.consumers.writer.serve`) instead has its large allocations
(a job's pickled checkpoints: megabytes, a few per job) served by their own mappings
(:func:`map_large_allocations`), which go back to the system when freed: its resident memory stays
flat without trimming. Not for the numerical loop: there every window's hundreds of megabytes of
temporaries would be page-faulted afresh (measured on the sustained replay: flat RSS, but 19% more
CPU and 17% fewer documents/s).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from functools import cache


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc >= 2.33)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "malloc_trim"):  # glibc only (not musl)
        return None
    if hasattr(libc, "mallinfo2"):  # glibc >= 2.33
        libc.mallinfo2.restype = _MallInfo2
    return libc


def release_free_heap() -> bool:
    """Return free heap pages to the operating system (glibc ``malloc_trim``); ``False`` where
    the C library has no such call."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def _resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class FreeHeapBound:
    """Trim the heap (:func:`release_free_heap`) when the free heap memory it keeps resident has
    grown more than ``limit_bytes`` since the last trim (a negative limit never trims).

    glibc counts free chunks whether or not their pages are resident (``mallinfo2().fordblks``
    stays the same across a trim), so the resident part is measured instead: resident size minus
    the heap in use (``uordblks + hblkhd``) is the rest of the process (interpreter, Python's own
    arenas, libraries) plus the resident free heap; its value right after a trim (or its lowest
    since) is the baseline, and growth above it is free heap the process holds for nothing.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._baseline: int | None = None
        self.checks = 0  # measurements taken
        self.trims = 0

    @staticmethod
    def supported() -> bool:
        """Whether the C library can tell the heap in use (glibc >= 2.33); else never trims."""
        libc = _libc()
        return libc is not None and hasattr(libc, "mallinfo2")

    def _outside_heap_in_use(self) -> int | None:
        libc = _libc()
        if libc is None or not hasattr(libc, "mallinfo2"):
            return None
        info = libc.mallinfo2()
        return _resident_bytes() - int(info.uordblks) - int(info.hblkhd)

    def check(self) -> bool:
        """Measure, and trim when over the bound; ``True`` when it trimmed."""
        if self.limit_bytes < 0:
            return False
        outside = self._outside_heap_in_use()
        if outside is None:
            return False
        self.checks += 1
        if self._baseline is None or outside < self._baseline:
            self._baseline = outside
        if outside - self._baseline <= self.limit_bytes:
            return False
        release_free_heap()
        self._baseline = self._outside_heap_in_use()
        self.trims += 1
        return True


# glibc's mallopt parameter number for the mmap threshold (malloc.h).
_M_MMAP_THRESHOLD = -3


def map_large_allocations(threshold_bytes: int = 1 << 20) -> bool:
    """Serve every allocation of at least ``threshold_bytes`` by its own mapping, returned to the
    system when freed (glibc ``mallopt(M_MMAP_THRESHOLD)``, which also stops the threshold from
    adapting upwards); ``False`` where the C library has no such call."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold_bytes)))
