"""Wiring: build the workers from the configuration and run them (``sparsewatch run``)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from confluent_kafka import KafkaException

from sparsewatch.config import Config
from sparsewatch.consumers.health import Health, Heartbeat
from sparsewatch.consumers.kafka_admin import topic_retention_ms
from sparsewatch.consumers.metrics import serve_metrics
from sparsewatch.consumers.processor import Processor
from sparsewatch.consumers.retry import RetryAbandonedError
from sparsewatch.consumers.worker import WorkerLoop
from sparsewatch.consumers.writer import WriterError
from sparsewatch.errors import SparsewatchError, first_line
from sparsewatch.kafka_options import broker_topics
from sparsewatch.runtime import worker_process
from sparsewatch.storage.engine import is_in_memory_sqlite, mask_url
from sparsewatch.storage.store import Store

log = logging.getLogger(__name__)

# A database or broker that stayed unavailable longer than the retries (consumers/retry.py),
# or a refusal that says what to change (a topic too small for dead letters): the environment's,
# logged in one line.
_OPERATIONAL_ERRORS = (
    SparsewatchError,
    WriterError,
    RetryAbandonedError,
    sa.exc.OperationalError,
    sa.exc.InterfaceError,
    KafkaException,
)


def checkpoint_age_limit_s(retention_ms: float, size_ms: float, lateness_ms: float) -> float:
    """How old (wall clock) a stream's checkpoint may grow while it has windows since, so that
    what a worker restarted after a crash re-reads from Kafka fits in half the topic's retention,
    the other half left for the outage itself.

    The re-read runs from the stream's replay anchor: the first message after its checkpoint, or
    the first one its open window held then, up to a window span (``size + lateness``) older.
    The age is checked when the stream's windows close, so a checkpoint is written up to a window
    (``size``) after its age passed the limit. On a live stream, whose event time is the topic's
    time, the re-read therefore spans at most limit + size + span = half the retention. A replay
    of a past corpus re-reads recent messages however long its event-time span, so it is not
    checkpointed any more often."""
    return max(retention_ms / 2 - 2 * size_ms - lateness_ms, 0.0) / 1000


def fit_checkpoints_to_retention(loop: WorkerLoop, config: Config) -> None:
    """Bound the age of ``loop``'s checkpoints by :func:`checkpoint_age_limit_s` of its input
    topic's ``retention.ms`` (said at start when it can come before ``windows.checkpoint_every``
    windows), and warn when a window spans longer than the retention: messages deleted before
    they are re-read are skipped (reported then) and no model learns from them again, so the
    restored model differs from the one that crashed."""
    from sparsewatch.consumers.detector_worker import window_spec

    spec = window_spec(config)
    if spec.size_ms is None:  # count windows: no span in time
        return
    retention_ms = topic_retention_ms(loop.bootstrap, loop.input_topic)
    if retention_ms is None or retention_ms < 0:  # unknown, or kept for ever
        return
    limit_s = checkpoint_age_limit_s(retention_ms, spec.size_ms, spec.allowed_lateness_ms)
    loop.max_checkpoint_age_s = limit_s
    if limit_s * 1000 < loop.checkpoint_every * spec.size_ms:
        log.info(
            "%s checkpoints a live stream at least every %.3g h, before its %d windows "
            "(windows.checkpoint_every) when they span longer: topic %s keeps messages for "
            "%.3g h (retention.ms), and a restart after a crash re-reads the stream from its "
            "last checkpoint, which must fit in half of that",
            loop.processor.name,
            limit_s / 3600,
            loop.checkpoint_every,
            loop.input_topic,
            retention_ms / 3_600_000,
        )
    span_ms = spec.size_ms + spec.allowed_lateness_ms
    if retention_ms < span_ms:
        log.warning(
            "topic %s keeps messages for %.3g h (retention.ms) but a window spans %.3g h "
            "(windows.size + windows.allowed_lateness): a worker restarted after a crash re-reads "
            "its open windows from Kafka, and messages deleted by then are lost; raise the "
            "topic's retention.ms above the window plus the longest outage",
            loop.input_topic,
            retention_ms / 3_600_000,
            span_ms / 3_600_000,
        )


def build_worker(
    role: str,
    config: Config,
    store: Store,
    consumer_overrides: dict[str, Any] | None = None,
    health: Heartbeat | None = None,
) -> WorkerLoop:
    """The detector or anomaly worker loop for ``config`` (``consumer_overrides``: librdkafka
    settings for its consumer; ``health``: the heartbeat it reports its progress to)."""
    k = config.kafka
    processor, input_topic, output_topic = _processor(role, config)
    loop = WorkerLoop(
        processor,
        store,
        k.connection(),
        f"{k.group_id}.{role}",
        input_topic,
        output_topic,
        k.topic("dlq"),
        partitions=k.partitions,
        checkpoint_every=config.windows.checkpoint_every,
        # Wake at least four times per idle timeout, so a quiet stream's window closes on time.
        poll_timeout_s=min(0.5, config.windows.idle_timeout_s / 4),
        writer=config.writer,
        heap_free_limit_mb=config.heap_free_limit_mb,
        max_idle_states=config.max_idle_streams,
        consumer_overrides=consumer_overrides,
        health=health,
        alerts_topic=k.topic("alerts") if k.publish_alerts else None,
    )
    fit_checkpoints_to_retention(loop, config)  # (the topic exists now)
    return loop


def _processor(role: str, config: Config) -> tuple[Processor, str, str | None]:
    """The processor of worker ``role`` with its input and output topics (the anomaly worker
    has no output topic)."""
    k = config.kafka
    if role == "detector":
        from sparsewatch.consumers.detector_worker import DetectorProcessor

        return DetectorProcessor(config), k.topic("docs"), k.topic("scores")
    if role == "anomaly":
        from sparsewatch.consumers.anomaly_worker import AnomalyProcessor

        return AnomalyProcessor(config), k.topic("scores"), None
    raise ValueError(f"unknown worker role {role!r}")


class _StopSignals:
    """SIGTERM and SIGINT as the workers see them: while they are being built (opening the
    database, creating the topics: nothing is read yet) a signal interrupts the start as Ctrl-C
    does, by :class:`KeyboardInterrupt`; once :meth:`started`, it stops every worker after its
    current batch (said in the log). With ``force_on_repeat``, a second signal ends the process
    at once, by that signal, as a crash would: nothing of the batches in hand is committed and the
    next start resumes from the last commit. A stop may otherwise wait without bound: for a
    transaction queued behind another session's lock on PostgreSQL, for a day's window."""

    def __init__(self, force_on_repeat: bool = False) -> None:
        self._workers: list[WorkerLoop] = []
        self._started = False
        self._force_on_repeat = force_on_repeat
        self._stopping = False

    @property
    def stopping(self) -> bool:
        """Whether a signal has stopped the workers."""
        return self._stopping

    def started(self, workers: list[WorkerLoop]) -> None:
        """From now on a signal stops ``workers``."""
        self._workers = list(workers)
        self._started = True

    def __call__(self, signum: int, _frame: object) -> None:
        if not self._started:
            raise KeyboardInterrupt
        name = signal.Signals(signum).name
        if self._stopping and self._force_on_repeat:
            log.warning(
                "%s while stopping: exiting now, without the batches in hand (nothing of them is "
                "committed: the next start resumes from the last commit)",
                name,
            )
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        if not self._stopping:
            again = " (a second signal: at once)" if self._force_on_repeat else ""
            log.info("%s: the workers stop after their batch in hand%s", name, again)
        self._stopping = True
        for w in self._workers:
            w.stop()


@contextmanager
def _stop_signals(force_on_repeat: bool = False) -> Iterator[_StopSignals]:
    """Handle SIGTERM and SIGINT by a :class:`_StopSignals` in the block (in the main thread
    only: elsewhere no handler can be set), the previous handlers back afterwards (Ctrl-C was
    swallowed for the rest of the process: the demo's plot and broker shutdown, a test
    session)."""
    stops = _StopSignals(force_on_repeat)
    if threading.current_thread() is not threading.main_thread():
        yield stops
        return
    previous = {sig: signal.signal(sig, stops) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stops
    finally:
        for sig, handler in previous.items():  # None: not set from Python, the default then
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def run_loops(
    workers: list[WorkerLoop],
    until_idle_s: list[float | None],
    install_signals: bool = True,
    blas_threads: int = 1,
    gc_threshold: int = 10_000,
) -> bool:
    """Run ``workers`` each in its own thread until stopped (or idle); re-raise the first error
    (a stop that abandoned an operation waiting for the database or the broker is none: logged).
    Returns whether SIGTERM/SIGINT stopped them.

    SIGTERM/SIGINT stop every worker after its current batch (unless ``install_signals`` is
    false: the caller handles them); results of a batch are committed whole or not at all, so an
    interrupted window is simply re-read on the next start. When one worker fails, the others
    are stopped too. The previous signal handlers are back once the workers have returned. BLAS
    runs ``blas_threads`` threads and the garbage collector's young generation is collected every
    ``gc_threshold`` allocations, with what exists now frozen
    (:func:`sparsewatch.runtime.worker_process`).
    """
    if not install_signals:
        _run_threads(workers, until_idle_s, blas_threads, gc_threshold)
        return False
    with _stop_signals() as stops:
        stops.started(workers)
        _run_threads(workers, until_idle_s, blas_threads, gc_threshold)
    return stops.stopping


def _abandoned_on_stop(exc: BaseException) -> str | None:
    """What a worker told to stop abandoned, when ``exc`` says it abandoned an operation waiting
    to be retried (the database or the broker down: :class:`RetryAbandonedError`, raised in its
    own thread or, wrapped in a :class:`WriterError`, by its writer); else ``None``.

    Such a stop is the one asked for (SIGTERM, Ctrl-C, or another worker of the process that
    failed), not a failure: ``sparsewatch run`` reported it as "worker failed" and exited 1, so
    that systemd or Kubernetes recorded a normal stop during a database outage as a crash. A
    process writer's error reaches the worker as its ``Type: message`` line only (the exception
    stays in the child), hence the prefix."""
    if isinstance(exc, WriterError):
        if isinstance(exc.__cause__, RetryAbandonedError):  # a thread writer's
            return str(exc.__cause__)
        prefix = f"{RetryAbandonedError.__name__}: "
        text = str(exc)
        return text.removeprefix(prefix) if text.startswith(prefix) else None
    return str(exc) if isinstance(exc, RetryAbandonedError) else None


def _run_threads(
    workers: list[WorkerLoop],
    until_idle_s: list[float | None],
    blas_threads: int,
    gc_threshold: int,
) -> None:
    """The body of :func:`run_loops`, with its signal handlers in place."""
    errors: list[BaseException] = []
    stopped = [threading.Event() for _ in workers]

    def upstream_of(worker: WorkerLoop) -> Callable[[], bool] | None:
        """Whether a worker of this process that writes ``worker``'s input topic still runs
        (the detector, for the anomaly worker of ``sparsewatch run all``): until it has stopped,
        ``worker`` is not idle, however long its input stays empty."""
        events = [
            event
            for other, event in zip(workers, stopped, strict=True)
            if other is not worker and other.destination.output_topic == worker.input_topic
        ]
        return (lambda: not all(e.is_set() for e in events)) if events else None

    def target(worker: WorkerLoop, idle: float | None, done: threading.Event) -> None:
        try:
            worker.run(until_idle_s=idle, upstream_running=upstream_of(worker))
        except BaseException as exc:
            if worker.health.stopping and (abandoned := _abandoned_on_stop(exc)) is not None:
                log.warning(
                    "%s worker stopped during an outage: %s; nothing of it is committed, and "
                    "the next start does it again",
                    worker.processor.name,
                    abandoned,
                )
                return
            errors.append(exc)
            if isinstance(exc, _OPERATIONAL_ERRORS):  # the environment's, not a bug: one line
                name = worker.processor.name
                log.error("%s worker failed: %s: %s", name, type(exc).__name__, first_line(exc))
            else:
                log.exception("%s worker failed", worker.processor.name)
            for w in workers:
                w.stop()
        finally:
            done.set()

    threads = [
        threading.Thread(target=target, args=(w, idle, done), name=w.processor.name)
        for w, idle, done in zip(workers, until_idle_s, stopped, strict=True)
    ]
    with worker_process(blas_threads, gc_threshold):
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    if errors:
        raise errors[0]


def open_results_store(config: Config) -> Store:
    """The configured results database for writing, its schema created or migrated; what cannot
    be opened, and an in-memory SQLite database (gone with its connection), is a
    SparsewatchError."""
    url = config.resolved_database_url
    if is_in_memory_sqlite(url):
        raise SparsewatchError(
            f"database_url {url!r} is an in-memory SQLite database, which lives and dies with "
            "one connection: the workers and the ingest bridge need a file (sqlite:///path.db) or "
            "PostgreSQL"
        )
    try:
        return Store.open(url)
    except (sa.exc.SQLAlchemyError, OSError, ValueError) as exc:
        raise SparsewatchError(f"cannot open database {mask_url(url)}: {first_line(exc)}") from None


_CONNECT_TIMEOUT_S = 30.0
"""How long ``run`` waits for the broker to answer at start (as long as creating the topics)."""


def _start_workers(
    config: Config, roles: list[str], stops: _StopSignals, health: Health
) -> tuple[Store, list[WorkerLoop]]:
    """The results store and the workers of ``roles`` (each reporting to a heartbeat of
    ``health``), handed to ``stops`` once all are built; an interruption before that
    (KeyboardInterrupt) leaves nothing open."""
    beats = {role: health.heartbeat(role, "opening the database and the topics") for role in roles}
    store = open_results_store(config)
    try:
        if missing := store.missing_write_privilege():
            url = mask_url(config.resolved_database_url)
            raise SparsewatchError(f"cannot write results to {url}: {missing}")
        # one line, within the topics' creation timeout, for a broker that refuses the client
        # (a wrong password: creating the topics only said "Broker transport failure")
        broker_topics(config.kafka.connection(), _CONNECT_TIMEOUT_S)
        try:
            workers = [build_worker(role, config, store, health=beats[role]) for role in roles]
        except KafkaException as exc:  # creating the topics is the first contact with the broker
            bootstrap = config.kafka.bootstrap_servers
            raise SparsewatchError(f"cannot reach Kafka at {bootstrap}: {exc}") from None
        stops.started(workers)
    except BaseException:
        store.dispose()
        raise
    return store, workers


def run_workers(
    config: Config,
    roles: list[str],
    until_idle_s: float | None = None,
    early_signals: Sequence[int] = (),
) -> None:
    """Run the workers of ``roles`` against the configured broker and database; the anomaly worker
    only when ``anomaly.enabled`` (asked for alone when disabled: a SparsewatchError).

    SIGTERM/SIGINT stop the workers after their current batch and return normally, also when they
    arrive while the workers are still being built (before anything is read): the start is then
    abandoned; and during a database or broker outage, the transaction or read being retried
    then abandoned (nothing of it committed: the next start does it again). They were Python's
    defaults until the workers ran: a SIGTERM in the first seconds killed the process (exit
    status 143) and a Ctrl-C printed "aborted" (130).

    ``early_signals``: the signals received before this call, which nothing obeyed yet (the
    CLI's, from its first instruction: :class:`sparsewatch.cli.EarlySignals`); a live list, read
    again once these handlers are in place. With one, nothing is started (or what was, the
    metrics endpoint, is closed again) and the call returns normally, as for a signal while the
    workers are built."""
    if early_signals:
        name = signal.Signals(early_signals[0]).name
        log.info("%s before the start: no worker ran", name)
        return
    if not config.anomaly.enabled:
        roles = [r for r in roles if r != "anomaly"]
        if not roles:
            raise SparsewatchError(
                "the anomaly worker is disabled in the configuration "
                "(anomaly.enabled = false, SPARSEWATCH_ANOMALY_ENABLED)"
            )
    health = Health(config.health_stall_s)
    # (from the start: the probes answer while the workers open the database and the topics)
    stop_metrics = serve_metrics(
        config.metrics_port,
        "metrics_port, SPARSEWATCH_METRICS_PORT, --metrics-port",
        "workers",
        config.metrics_address,
        "metrics_address, SPARSEWATCH_METRICS_ADDRESS, --metrics-address",
        health,
    )
    try:
        with _stop_signals(force_on_repeat=True) as stops:
            try:
                if early_signals:  # one came while the endpoint opened, before these handlers
                    raise KeyboardInterrupt
                store, workers = _start_workers(config, roles, stops, health)
            except KeyboardInterrupt:
                log.info("stopped while starting: no worker ran")
                return
            try:
                run_loops(
                    workers,
                    [until_idle_s] * len(roles),
                    install_signals=False,
                    blas_threads=config.blas_threads,
                    gc_threshold=config.gc_threshold,
                )
            finally:
                store.dispose()
    finally:
        stop_metrics()
