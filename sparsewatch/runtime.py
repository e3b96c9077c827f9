"""Process-wide settings of a worker process: BLAS threads and the garbage collector.

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
from collections.abc import Iterator
from contextlib import contextmanager

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
