"""Process-wide settings: a worker process's BLAS threads and garbage collector, and SIGTERM
handled as Ctrl-C by the commands that clean up after an interruption (demo, replay).

Both are set around the whole run of the workers (``sparsewatch run``, :func:`run_loops`) and
restored afterwards, and the throughput benchmarks apply the same settings to the per-window core
they compare against, so the comparison is of the transport alone.

* BLAS: a window's matrices are small; on a few cores extra BLAS threads cost more CPU than they
  save (``benchmarks/pipeline.md``).
* Garbage collector: a window allocates hundreds of thousands of short-lived containers (token
  lists, sparse-matrix bookkeeping, result rows), almost all freed by reference counting. At
  Python's default threshold (a young collection every 700 net allocations) the cyclic collector
  ran about 700 times per 24,000 documents and took 0.17 s of a 13 s core, 0.43 s in the worker
  (whose process holds more objects: Kafka clients, the SQL engine, messages in flight); older
  generations are walked each time anything survives long enough. With these settings: 0.02 s
  and 0.11 s. The workers therefore freeze
  what exists once they are built (:func:`gc.freeze`: imported modules, the engine, ... are never
  walked again) and collect the young generation every ``gc_threshold`` allocations instead
  (measured in ``benchmarks/pipeline.md``). Cyclic garbage is still collected, only later.
"""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from threadpoolctl import threadpool_limits


@contextmanager
def worker_process(blas_threads: int = 1, gc_threshold: int = 10_000) -> Iterator[None]:
    """Run the enclosed block with ``blas_threads`` BLAS threads (0: the library's default) and
    the collector's young-generation threshold at ``gc_threshold`` (0: Python's own) with the
    objects existing now frozen; both restored on exit."""
    thresholds = gc.get_threshold()
    if gc_threshold > 0:
        gc.collect()
        gc.freeze()
        gc.set_threshold(gc_threshold, *thresholds[1:])
    try:
        with threadpool_limits(limits=blas_threads or None, user_api="blas"):
            yield
    finally:
        if gc_threshold > 0:
            gc.set_threshold(*thresholds)
            gc.unfreeze()


def _interrupt(*_: object) -> NoReturn:
    """A signal handler that interrupts the main thread as Ctrl-C does."""
    raise KeyboardInterrupt


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the block, as Ctrl-C does, so that cleanup runs: by
    default it ended the process at once (the demo left its broker running; the replay flushed
    nothing and printed no summary or resume point). While the workers run, both signals stop
    them after their batch instead (:func:`~sparsewatch.runner.run_loops`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
