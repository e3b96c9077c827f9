"""Prometheus metrics of the workers (served by ``sparsewatch run --metrics-port``) and of the
ingest bridge (``sparsewatch ingest --metrics-port``).

documents/s is ``rate(sparsewatch_documents_total[1m])``; the novelty rate is
``rate(sparsewatch_novel_total[5m]) / rate(sparsewatch_documents_total[5m])``. The bridge's
records/s is ``rate(sparsewatch_ingest_records_total[1m])`` (by ``outcome``: forwarded or
dead_lettered), its lag ``sparsewatch_consumer_lag{worker="ingest"}``. An outage of the database
(or, for the bridge, the broker) waited out shows as ``increase(sparsewatch_retries_total[5m]) >
0``.

The counters count what this process committed, each window and late document once. A restart
re-reads its input from the stored resume offsets: the windows closed since a stream's last
checkpoint are recomputed (only after a crash: a clean stop checkpoints them) and counted again in
the documents, novel and windows counters and the latency histogram, and a document read again in
a window closed before the checkpoint is late again but not counted again (except, after a crash,
one stored late since the checkpoint, like the windows). Partitions lost without a checkpoint (a
broker outage longer than the session timeout) and assigned again have their windows since the
checkpoint recomputed in the same process too: those, and the late documents stored since, are not
counted again (:class:`WorkerMetrics` remembers what it counted), so the counters keep matching
the database (the counts doubled after such an outage).

Every family lives in prometheus_client's default registry; each endpoint serves a registry of
its role's families only (:func:`role_registry`), so a worker's ``/metrics`` shows no ingest
histogram and the bridge's no window latency. The same server answers the liveness and readiness
probes ``/healthz`` and ``/readyz`` (:mod:`.health`), to every method (:func:`_probe_answer`);
every other path serves the metrics, as prometheus_client's application does.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from socketserver import TCPServer, ThreadingMixIn
from typing import TYPE_CHECKING, Any, Literal, cast
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

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

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from sparsewatch.consumers.health import Health

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
RETRIES = Counter(
    "sparsewatch_retries",
    "Waits before retrying an operation after a transient failure (the database or the broker "
    "unavailable), by the loop or its writer; the log says what failed and why",
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


_SHARED = (DEAD_LETTERS, LAG, SKIPPED, RETRIES)
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

    def __init__(self) -> None:
        # The last known lag of each partition owned (see set_lag).
        self._lag: dict[tuple[str, int], int] = {}

    def set_lag(self, lag: dict[tuple[str, int], int | None]) -> None:
        """Total lag over the partitions owned (``lag``'s keys). A partition whose lag is
        unknown now (``None``: not fetched from yet, the consumer's keep-alive polling while a
        long window is computed, the broker not answering) counts with its last known lag: the
        gauge read 0 after every batch of a backlog of long windows, when the worker was
        furthest behind, and the bridge's fell by a partition's lag whenever it was unknown."""
        self._lag = {
            tp: n if n is not None else self._lag[tp]
            for tp, n in lag.items()
            if n is not None or tp in self._lag
        }
        LAG.labels(self.worker).set(sum(self._lag.values()))

    def skipped(self, topic: str, partition: int, n: int) -> None:
        """Count input messages the broker no longer held when they were to be read (the
        ``on_reset`` of :class:`~sparsewatch.consumers.kafka_client.BatchConsumer`)."""
        SKIPPED.labels(self.worker).inc(n)

    def retried(self) -> None:
        """Count one wait before a retry (the loop's heartbeat calls it:
        :meth:`~sparsewatch.consumers.health.Heartbeat.count_waits`)."""
        RETRIES.labels(self.worker).inc()


# How many windows, and how many late documents, a worker remembers having counted (the most
# recently counted; see WorkerMetrics). What a recomputation in the same process repeats is what
# the streams of its lost partitions committed since their last checkpoint: at most
# ``windows.checkpoint_every`` windows each (10 by default), among the last a worker committed,
# and the late documents stored since. 32,768 keys take about 7 MB each (measured, with short
# ids), less than one stream's models, and cover some 3,000 streams at 10 windows each; a window
# recomputed after more windows than that were counted is counted again, as all were before.
REMEMBERED_COUNTED = 32_768


class _Counted:
    """A bounded memory of the keys counted, the least recently counted forgotten first."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._keys: OrderedDict[Hashable, None] = OrderedDict()

    def first_time(self, key: Hashable) -> bool:
        """Whether ``key`` was not counted (as far as remembered); it is remembered from now."""
        seen = key in self._keys
        self._keys[key] = None
        self._keys.move_to_end(key)
        if len(self._keys) > self._size:
            self._keys.popitem(last=False)
        return not seen


class WorkerMetrics(_RoleMetrics):
    """The metric children of one worker. Each window and late document is counted once per
    process (see the module docstring): the last :data:`REMEMBERED_COUNTED` windows and late
    documents counted are remembered by their natural key, the one the store writes them under."""

    def __init__(self, worker: str) -> None:
        super().__init__()
        self.worker = worker
        self._windows = _Counted(REMEMBERED_COUNTED)
        self._late = _Counted(REMEMBERED_COUNTED)
        # Every series exists, at 0, from the start: a series born at its first increment hides
        # that increment from increase() and rate(), and "no data" is not "0 documents/s".
        for family in (DOCUMENTS, NOVEL, WINDOWS, LATE, WINDOW_LATENCY, *_SHARED):
            family.labels(worker)

    def observe(self, outputs: Iterable[Any], latencies: Iterable[float], n_dead: int) -> None:
        """Count one committed batch: window outputs, their close-to-commit latencies (one per
        window output, in order), DLQ. A window or late document this worker counted before (its
        partition lost and assigned again: recomputed from the stream's checkpoint) is not
        counted again."""
        outputs = list(outputs)
        windows = [out for out in outputs if out.is_window]
        for out in outputs:
            if out.late:
                # (``out.late`` counts the documents the stream's state stores for the first time
                # since its checkpoint, those this worker counted before its partition was lost
                # among them)
                again = sum(not self._late.first_time(doc) for doc in out.late_ids)
                LATE.labels(self.worker).inc(max(out.late - again, 0))
        for out, latency in zip(windows, latencies, strict=True):
            if out.window is not None and not self._windows.first_time(out.window):
                continue
            DOCUMENTS.labels(self.worker).inc(out.n_documents)
            NOVEL.labels(self.worker).inc(out.novel)
            WINDOWS.labels(self.worker).inc()
            WINDOW_LATENCY.labels(self.worker).observe(latency)
        if n_dead:
            DEAD_LETTERS.labels(self.worker).inc(n_dead)


class IngestMetrics(_RoleMetrics):
    """The metrics of the ingest bridge; its consumer lag and dead letters are the workers'
    gauges and counters with ``worker="ingest"``."""

    worker = "ingest"

    def __init__(self) -> None:
        super().__init__()
        for outcome in ("forwarded", "dead_lettered"):
            INGEST_RECORDS.labels(outcome)
        for result in ("committed", "aborted"):
            INGEST_TRANSACTIONS.labels(result)
        for family in _SHARED:
            family.labels(self.worker)

    def committed(self, forwarded: int, dead_lettered: int, seconds: float) -> None:
        """Count one committed transaction: records forwarded and dead-lettered, its duration."""
        INGEST_RECORDS.labels("forwarded").inc(forwarded)
        INGEST_RECORDS.labels("dead_lettered").inc(dead_lettered)
        DEAD_LETTERS.labels(self.worker).inc(dead_lettered)
        INGEST_TRANSACTIONS.labels("committed").inc()
        INGEST_BATCH_SECONDS.observe(seconds)

    def aborted(self) -> None:
        INGEST_TRANSACTIONS.labels("aborted").inc()


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

    def server_bind(self) -> None:
        """Bind, without HTTPServer's reverse lookup of the address (``socket.getfqdn``: a DNS
        query at every start on ``0.0.0.0``, seconds where no DNS server answers)."""
        TCPServer.server_bind(self)
        host, port = self.socket.getsockname()[:2]
        self.server_name, self.server_port = str(host), int(port)
        self.setup_environ()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection error (the client's doing) at DEBUG, anything else with its traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            log.debug("metrics request from %s failed: %s", client_address[0], exc)
        else:
            log.exception("metrics request from %s failed", client_address[0])


class _MetricsServer6(_MetricsServer):
    """:class:`_MetricsServer` on an IPv6 address."""

    address_family = socket.AF_INET6


# errno of a bind that the address fails (not this machine's; IPv6 where the system has none)
# (EINVAL: an IPv6 link-local address without its scope, fe80::1 for fe80::1%eth0; a taken or
# privileged port is EADDRINUSE or EACCES)
_ADDRESS_ERRORS = frozenset({errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EINVAL})
_PROBES = {"/healthz": "liveness", "/readyz": "readiness"}
# the methods a probe answers: an HTTP check's (HAProxy's ``option httpchk`` sends OPTIONS)
_PROBE_METHODS = ("GET", "HEAD", "OPTIONS")


def _with_probes(metrics: WSGIApplication, health: Health) -> WSGIApplication:
    """``metrics``, but for ``/healthz`` and ``/readyz``: ``health``'s liveness and readiness
    (:func:`_probe_answer`), whatever the method."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        probe = _PROBES.get(environ.get("PATH_INFO", ""))
        if probe is None:
            return metrics(environ, start_response)
        return _probe_answer(getattr(health, probe), environ["REQUEST_METHOD"], start_response)

    return app


def _probe_answer(
    judge: Callable[[], tuple[bool, dict[str, Any]]], method: str, start_response: StartResponse
) -> list[bytes]:
    """A probe's answer: 200 or 503 as ``judge`` says, with its JSON body, to GET and OPTIONS,
    and to HEAD without the body; 405 to any other method. A probe path never answers 2xx
    unless the probe passes: only GET was routed here, and prometheus_client answered OPTIONS
    with 200 (HAProxy's ``option httpchk`` sends OPTIONS unless told otherwise: a worker that
    could not reach its broker looked ready to it) and HEAD with 405 (a check by HEAD failed a
    healthy worker)."""
    allow = ("Allow", ", ".join(_PROBE_METHODS))
    if method not in _PROBE_METHODS:
        start_response("405 Method Not Allowed", [allow, ("Content-Length", "0")])
        return []
    ok, body = judge()
    payload = json.dumps(body).encode()
    status = "200 OK" if ok else "503 Service Unavailable"
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(payload))),
        ("Cache-Control", "no-store"),
        allow,
    ]
    start_response(status, headers)
    return [] if method == "HEAD" else [payload]


def _shown_address(address: str, port: int) -> str:
    """``address:port`` (``[address]:port`` for an IPv6 address, given with or without its
    brackets)."""
    bare = address.removeprefix("[").removesuffix("]")
    return f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"


def _bind(address: str, port: int, port_setting: str, address_setting: str) -> _MetricsServer:
    """A server bound to ``address`` (an IPv4 or IPv6 address, or a host name: its first
    address) and ``port``; a one-line SparsewatchError naming the setting at fault: the address's
    when it does not resolve or is not this machine's, else the port's (taken, privileged)."""
    where = _shown_address(address, port)
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(
            address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:  # (an over-long label fails IDNA encoding)
        raise SparsewatchError(
            f"cannot serve metrics on {where} ({address_setting}): cannot resolve {address!r} "
            f"({getattr(exc, 'strerror', None) or exc})"
        ) from None
    server_class = _MetricsServer6 if family == socket.AF_INET6 else _MetricsServer
    try:  # (an IPv4 address's (host, port), an IPv6 one's (host, port, flowinfo, scope id))
        return server_class(
            cast("tuple[str, int] | tuple[str, int, int, int]", sockaddr), _QuietHandler
        )
    except OSError as exc:
        setting = address_setting if exc.errno in _ADDRESS_ERRORS else port_setting
        raise SparsewatchError(
            f"cannot serve metrics on {where} ({setting}): {exc.strerror or exc}"
        ) from None


def serve_metrics(
    port: int,
    setting: str,
    role: Literal["workers", "ingest"],
    address: str = "127.0.0.1",
    address_setting: str = "metrics_address",
    health: Health | None = None,
) -> Callable[[], None]:
    """Expose ``role``'s /metrics (:func:`role_registry`) and, with ``health``, the probes
    ``/healthz`` and ``/readyz`` on ``address``:``port`` (0 = do not serve) until the returned
    function is called; an address that does not resolve or is not this machine's is a one-line
    SparsewatchError naming ``address_setting``, a port that cannot be bound (taken, or
    privileged) one naming ``setting``, where the port was given."""
    if not port:
        return lambda: None
    app = make_wsgi_app(role_registry(role))
    server = _bind(address, port, setting, address_setting)
    server.set_app(app if health is None else _with_probes(app, health))
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()

    return stop
