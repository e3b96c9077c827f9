"""Prometheus metrics of the workers (served by ``sparsewatch run --metrics-port``) and of the
ingest bridge (``sparsewatch ingest --metrics-port``).

documents/s is ``rate(sparsewatch_documents_total[1m])``; the novelty rate is
``rate(sparsewatch_novel_total[5m]) / rate(sparsewatch_documents_total[5m])``. The bridge's
records/s is ``rate(sparsewatch_ingest_records_total[1m])`` (by ``outcome``: forwarded or
dead_lettered), its lag ``sparsewatch_consumer_lag{worker="ingest"}``.

The counters count what this process committed. A restart re-reads its input from the stored
resume offsets: the windows closed since a stream's last checkpoint are recomputed (only after a
crash: a clean stop checkpoints them) and counted again in the documents, novel and windows
counters, and a document read again in a window closed before the checkpoint is late again but not
counted again (except, after a crash, one stored late since the checkpoint, like the windows).

Every family lives in prometheus_client's default registry; each endpoint serves a registry of
its role's families only (:func:`role_registry`), so a worker's ``/metrics`` shows no ingest
histogram and the bridge's no window latency.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any, Literal
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)

from sparsewatch.errors import SparsewatchError

log = logging.getLogger(__name__)

DOCUMENTS = Counter("sparsewatch_documents", "Documents processed in closed windows", ["worker"])
NOVEL = Counter("sparsewatch_novel", "Documents flagged novel or anomalous", ["worker"])
WINDOWS = Counter("sparsewatch_windows", "Windows closed and committed", ["worker"])
LATE = Counter(
    "sparsewatch_late_documents",
    "Late documents (their window had closed): scored and stored, not learnt from; one read "
    "again after a restart or rebalance is not counted again, except after a crash one stored "
    "since its stream's last checkpoint (as the windows a crash recomputes count again)",
    ["worker"],
)
DEAD_LETTERS = Counter(
    "sparsewatch_dead_letters", "Messages sent to the dead-letter topic", ["worker"]
)
SKIPPED = Counter(
    "sparsewatch_skipped_messages",
    "Input messages the broker deleted (the topic's retention) before they were read",
    ["worker"],
)
WINDOW_LATENCY = Histogram(
    "sparsewatch_window_latency_seconds",
    "From window close to committed results",
    ["worker"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LAG = Gauge("sparsewatch_consumer_lag", "Messages behind the end of the input topic", ["worker"])
INGEST_RECORDS = Counter(
    "sparsewatch_ingest_records",
    "Source records in committed ingest transactions, by outcome (forwarded, dead_lettered)",
    ["outcome"],
)
INGEST_TRANSACTIONS = Counter(
    "sparsewatch_ingest_transactions",
    "Ingest transactions, by result (committed, aborted: their batch is read again)",
    ["result"],
)
INGEST_BATCH_SECONDS = Histogram(
    "sparsewatch_ingest_batch_seconds",
    "From an ingest batch in hand to its transaction committed",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


_SHARED = (DEAD_LETTERS, LAG, SKIPPED)
_FAMILIES = {
    "workers": (DOCUMENTS, NOVEL, WINDOWS, LATE, WINDOW_LATENCY, *_SHARED),
    "ingest": (INGEST_RECORDS, INGEST_TRANSACTIONS, INGEST_BATCH_SECONDS, *_SHARED),
}


def role_registry(role: Literal["workers", "ingest"]) -> CollectorRegistry:
    """What the workers' (or the ingest bridge's) endpoint serves: that role's families and the
    process, platform and garbage-collector metrics of the default registry."""
    registry = CollectorRegistry()
    for family in _FAMILIES[role]:
        registry.register(family)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class _RoleMetrics:
    """What the workers' and the ingest bridge's metrics share."""

    worker: str

    def skipped(self, topic: str, partition: int, n: int) -> None:
        """Count input messages the broker no longer held when they were to be read (the
        ``on_reset`` of :class:`~sparsewatch.consumers.kafka_client.BatchConsumer`)."""
        SKIPPED.labels(self.worker).inc(n)


class WorkerMetrics(_RoleMetrics):
    """The metric children of one worker."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        # The last known lag of each partition owned (see set_lag).
        self._lag: dict[tuple[str, int], int] = {}
        # Every series exists, at 0, from the start: a series born at its first increment hides
        # that increment from increase() and rate(), and "no data" is not "0 documents/s".
        for family in (DOCUMENTS, NOVEL, WINDOWS, LATE, DEAD_LETTERS, WINDOW_LATENCY, LAG, SKIPPED):
            family.labels(worker)

    def observe(self, outputs: Iterable[Any], latencies: Iterable[float], n_dead: int) -> None:
        """Count one committed batch: window outputs, their close-to-commit latencies, DLQ."""
        for out in outputs:
            if out.late:
                LATE.labels(self.worker).inc(out.late)
            if not out.is_window:
                continue
            DOCUMENTS.labels(self.worker).inc(out.n_documents)
            NOVEL.labels(self.worker).inc(out.novel)
            WINDOWS.labels(self.worker).inc()
        for latency in latencies:
            WINDOW_LATENCY.labels(self.worker).observe(latency)
        if n_dead:
            DEAD_LETTERS.labels(self.worker).inc(n_dead)

    def set_lag(self, lag: dict[tuple[str, int], int | None]) -> None:
        """Total lag over the partitions this worker owns (``lag``'s keys). A partition whose lag
        is unknown now (``None``: not fetched from yet, or the consumer's keep-alive polling
        while a long window is computed) counts with its last known lag: the gauge read 0
        after every batch of a backlog of long windows, when the worker was furthest behind."""
        self._lag = {
            tp: n if n is not None else self._lag[tp]
            for tp, n in lag.items()
            if n is not None or tp in self._lag
        }
        LAG.labels(self.worker).set(sum(self._lag.values()))


class IngestMetrics(_RoleMetrics):
    """The metrics of the ingest bridge; its consumer lag and dead letters are the workers'
    gauges and counters with ``worker="ingest"``."""

    worker = "ingest"

    def __init__(self) -> None:
        for outcome in ("forwarded", "dead_lettered"):
            INGEST_RECORDS.labels(outcome)
        for result in ("committed", "aborted"):
            INGEST_TRANSACTIONS.labels(result)
        DEAD_LETTERS.labels(self.worker)
        LAG.labels(self.worker)
        SKIPPED.labels(self.worker)

    def committed(self, forwarded: int, dead_lettered: int, seconds: float) -> None:
        """Count one committed transaction: records forwarded and dead-lettered, its duration."""
        INGEST_RECORDS.labels("forwarded").inc(forwarded)
        INGEST_RECORDS.labels("dead_lettered").inc(dead_lettered)
        DEAD_LETTERS.labels(self.worker).inc(dead_lettered)
        INGEST_TRANSACTIONS.labels("committed").inc()
        INGEST_BATCH_SECONDS.observe(seconds)

    def aborted(self) -> None:
        INGEST_TRANSACTIONS.labels("aborted").inc()

    def set_lag(self, lag: dict[tuple[str, int], int | None]) -> None:
        """Total lag over the source partitions the bridge owns (unknown ones left out)."""
        LAG.labels(self.worker).set(sum(n for n in lag.values() if n is not None))


class _QuietHandler(WSGIRequestHandler):
    """A request handler without an access log (a scrape every few seconds is no news)."""

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


class _MetricsServer(ThreadingMixIn, WSGIServer):
    """prometheus_client's server (a daemon thread per request), whose failed requests are log
    lines: socketserver printed a 15-line traceback on stderr, among the JSON log lines, for
    each client that reset its connection before its request was read (a port check, a
    scraper giving up)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection error (the client's doing) at DEBUG, anything else with its traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            log.debug("metrics request from %s failed: %s", client_address[0], exc)
        else:
            log.exception("metrics request from %s failed", client_address[0])


def serve_metrics(
    port: int, setting: str, role: Literal["workers", "ingest"]
) -> Callable[[], None]:
    """Expose ``role``'s /metrics (:func:`role_registry`) on 127.0.0.1:``port`` (0 = do not
    serve) until the returned function is called; a port that cannot be bound (taken, or
    privileged) is a one-line SparsewatchError naming ``setting``, where the port was given."""
    if not port:
        return lambda: None
    try:
        app = make_wsgi_app(role_registry(role))
        server = make_server("127.0.0.1", port, app, _MetricsServer, _QuietHandler)
    except OSError as exc:
        raise SparsewatchError(
            f"cannot serve metrics on 127.0.0.1:{port} ({setting}): {exc.strerror or exc}"
        ) from None
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()

    return stop
