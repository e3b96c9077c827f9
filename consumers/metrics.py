"""Prometheus metrics of the workers (served by ``sparsewatch run --metrics-port``).

documents/s is ``rate(sparsewatch_documents_total[1m])``; the novelty rate is
``rate(sparsewatch_novel_total[5m]) / rate(sparsewatch_documents_total[5m])``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

DOCUMENTS = Counter("sparsewatch_documents", "Documents processed in closed windows", ["worker"])
NOVEL = Counter("sparsewatch_novel", "Documents flagged novel or anomalous", ["worker"])
WINDOWS = Counter("sparsewatch_windows", "Windows closed and committed", ["worker"])
DEAD_LETTERS = Counter(
    "sparsewatch_dead_letters", "Messages sent to the dead-letter topic", ["worker"]
)
WINDOW_LATENCY = Histogram(
    "sparsewatch_window_latency_seconds",
    "From window close to committed results",
    ["worker"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LAG = Gauge("sparsewatch_consumer_lag", "Messages behind the end of the input topic", ["worker"])


class WorkerMetrics:
    """The metric children of one worker."""

    def __init__(self, worker: str) -> None:
        self.worker = worker

    def observe(self, outputs: Iterable[Any], latencies: Iterable[float], n_dead: int) -> None:
        """Count one committed batch: window outputs, their close-to-commit latencies, DLQ."""
        for out in outputs:
            if not out.is_window:
                continue
            DOCUMENTS.labels(self.worker).inc(out.n_documents)
            NOVEL.labels(self.worker).inc(out.novel)
            WINDOWS.labels(self.worker).inc()
        for latency in latencies:
            WINDOW_LATENCY.labels(self.worker).observe(latency)
        if n_dead:
            DEAD_LETTERS.labels(self.worker).inc(n_dead)

    def set_lag(self, lag: dict[tuple[str, int], int]) -> None:
        """Total lag over the partitions this worker owns."""
        LAG.labels(self.worker).set(sum(lag.values()))


def serve(port: int) -> Callable[[], None]:
    """Expose /metrics on 127.0.0.1:``port`` (0 = do not serve); OSError when the port cannot be
    bound. Returns the function that stops the server and frees its port."""
    if not port:
        return lambda: None
    server, thread = start_http_server(port, addr="127.0.0.1")

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()

    return stop
