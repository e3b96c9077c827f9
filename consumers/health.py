"""Liveness and readiness of a process's loops: the workers of ``sparsewatch run`` and the ingest
bridge, served as ``/healthz`` and ``/readyz`` beside ``/metrics`` (:mod:`.metrics`).

Each loop owns a :class:`Heartbeat` and tells it what it does from its own thread: a completed
poll (:meth:`Heartbeat.beat`, once per iteration: a clock read and a few attribute writes, no
lock), a phase it enters (:meth:`Heartbeat.phase`: computing windows, waiting for its writer or
for the database) and a deliberate wait before a retry (:meth:`Heartbeat.waiting`, through
:meth:`Heartbeat.retry_stop` or :class:`HeartbeatStopFlag`). :class:`Health` judges them when a
probe asks:

* **alive** unless a loop failed (its thread ended with an error), or it has made no progress for
  ``health_stall_s``. Progress is a poll (an iteration), entering or leaving a phase, and a wait
  before a retry for as long as the wait lasts: a database or broker outage waited out with
  backoff is alive (a restart would not bring the service back). A loop computing windows
  (``computing``) is alive whatever the time while its consumer's keep-alive helper (the thread
  ``<worker>-keepalive``) runs: a day's window of a busy stream takes as long as it takes, and the
  helper is what keeps the worker in its group meanwhile. A loop blocked in a call that does not
  return is stuck: waiting for its writer's transaction (``writing``: the writer process stopped,
  a lock held by another session) or for a database call of its own (``database``). The start
  (opening and migrating the database, creating the topics, reaching the transaction
  coordinator) is not judged: its steps have timeouts of their own, and a slow start is for an
  orchestrator's startup probe to allow.
* **ready** once every loop has joined its consumer group (its partitions assigned and their
  resume offsets read: a stream's checkpoint is restored when its first message arrives) and
  polls; not while starting, while its consumer has seen every broker down (until one answers
  again; asked at each probe, as the consumer's keep-alive helper sees it too: a loop computing
  or writing for minutes polls only between batches), while it waits to retry, once a stop was
  asked for (SIGTERM), once it ended, nor while not alive.

A worker's writer (process or thread) reports its own waits before retrying a transaction
(a database outage) to its loop's heartbeat as the loop's waits (``retrying: writing results``):
they arrive while the loop waits for the job or polls whether it is done. Every deliberate wait
is also counted (:meth:`Heartbeat.count_waits`: ``sparsewatch_retries_total``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sparsewatch.consumers.retry import ReportedStop, Stop, StopFlag

from sparsewatch.errors import first_line

if TYPE_CHECKING:
    from sparsewatch.consumers.kafka_client import BatchConsumer

# How often a loop that has not joined its group asks the broker whether it subscribes to any
# topic at all (a ^pattern matching none: nothing to join, idle with nothing to read).
_NO_TOPIC_CHECK_S = 10.0


class Heartbeat:
    """What one loop last did, for :class:`Health`. Written by the loop's thread (and its
    keep-alive helper's rebalance callbacks, and a signal handler's :meth:`stop_requested`),
    read by the probes' threads: single attribute writes, so a probe may see a state a
    microsecond older than its time, never a torn value."""

    def __init__(self, name: str, detail: str = "") -> None:
        self.name = name
        self.state = "starting"
        self.detail = detail
        self.at = time.monotonic()  # the last progress (a deliberate wait: when it ends)
        self.not_ready: str | None = "starting"  # why the last poll does not count as consuming
        self.stopping = False
        self.failure: str | None = None
        self.ended = False
        self.thread: str | None = None  # the loop's thread, whose keep-alive helper counts
        # its consumer's readiness, once built (ConsumerReadiness): the probes ask it too
        self.consumer_readiness: ConsumerReadiness | None = None
        self._on_wait: Callable[[], None] | None = None

    def started(self) -> None:
        """The loop runs on the calling thread from now on."""
        self.thread = threading.current_thread().name
        self.not_ready = "joining its consumer group"
        self._set("joining", "")

    def brokers_down(self, now: float) -> str | None:
        """Why the loop's consumer does not count as consuming at ``now`` (monotonic) because
        every broker is down, asked when a probe is: :attr:`not_ready` is its last poll's
        answer, which a loop busy computing or writing keeps for minutes while its consumer's
        keep-alive helper sees every broker go down (``/readyz`` answered 200 meanwhile)."""
        readiness = self.consumer_readiness
        return None if readiness is None else readiness.brokers_down(now)

    def beat(self, not_ready: str | None = None) -> None:
        """The loop polled its consumer (one iteration): progress. ``not_ready``: why it does
        not count as consuming yet (joining its group, the broker unreachable)."""
        self.state = "polling"
        self.detail = ""
        self.not_ready = not_ready
        self.at = time.monotonic()

    @contextmanager
    def phase(self, state: str, detail: str = "") -> Iterator[None]:
        """The loop is in ``state`` (``computing``, ``writing``, ``database``, ...) for the block:
        entering and leaving it are progress; the previous state is back afterwards."""
        previous = self.state, self.detail
        self._set(state, detail)
        try:
            yield
        finally:
            self._set(*previous)

    def count_waits(self, on_wait: Callable[[], None]) -> None:
        """Call ``on_wait`` at every deliberate wait from now on (a retry's metric)."""
        self._on_wait = on_wait

    def waiting(self, detail: str, seconds: float) -> None:
        """The loop (or its writer) waits ``seconds`` on purpose before retrying (an outage):
        progress until the wait ends; not ready."""
        self.state = "retrying"
        self.detail = detail
        self.at = time.monotonic() + seconds
        if self._on_wait is not None:
            self._on_wait()

    def retry_stop(self, stop: Stop, what: str) -> Stop:
        """``stop`` for :func:`~sparsewatch.consumers.retry.with_backoff` retrying ``what``: its
        waits between attempts are this loop's deliberate waits."""
        return ReportedStop(stop, what, self.waiting)

    def stop_requested(self) -> None:
        """A stop was asked for (signal-safe): not ready from now on."""
        self.stopping = True

    def finished(self, error: BaseException | None = None) -> None:
        """The loop returned, or failed with ``error`` (not alive then)."""
        if error is not None:
            self.failure = f"{type(error).__name__}: {first_line(error)}"
        self.ended = True
        self._set("failed" if error is not None else "stopped", self.failure or "")

    def _set(self, state: str, detail: str) -> None:
        self.state = state
        self.detail = detail
        self.at = time.monotonic()


class HeartbeatStopFlag(StopFlag):
    """The ingest bridge's stop request (a :class:`StopFlag`, set by its signal handlers): its
    waits (the transaction coordinator waited for, dead letters retried into the database) are
    the bridge's deliberate waits, and a request makes it stopping."""

    def __init__(self, heartbeat: Heartbeat) -> None:
        super().__init__()
        self._heartbeat = heartbeat

    def request(self, *_: object) -> None:
        super().request()
        self._heartbeat.stop_requested()

    def wait(self, timeout: float) -> bool:
        self._heartbeat.waiting("the broker or the database (see the log)", timeout)
        return super().wait(timeout)


class ConsumerReadiness:
    """Why a loop's consumer does not count as consuming yet, after each poll: not joined to its
    group, or every broker down (reported by the client, until its statistics show one up
    again, within a second: :class:`~sparsewatch.consumers.kafka_client.BatchConsumer`). With
    ``patterns`` (it subscribes to ^patterns), one that subscribes to no topic at all, as no
    pattern matches one yet, has no group to join: it is idle with nothing to read."""

    def __init__(
        self, consumer: BatchConsumer, heartbeat: Heartbeat, patterns: bool = False
    ) -> None:
        """The readiness of ``consumer``, the consumer of the loop of ``heartbeat``, whose
        probes ask it too (:meth:`Heartbeat.brokers_down`)."""
        self._consumer = consumer
        self._patterns = patterns
        self._joined = False  # (once joined, a member rejoins by itself: not asked again)
        self._no_topic_checked_at = float("-inf")
        self._no_topic = False
        heartbeat.consumer_readiness = self

    def why_not(self, now: float) -> str | None:
        """The reason, or None when consuming (``now``: the poll's monotonic time)."""
        # (the id comes with the group's first answer, which a broker can hold for
        # group.initial.rebalance.delay.ms before the assignment: only the first member of an
        # empty group counts as joined that much before its partitions are; a member given none,
        # more members than partitions, is joined with the id, never assigned anything)
        self._joined = self._joined or self._consumer.member_id() is not None
        if not self._joined and not self._subscribes_no_topic(now):
            return "joining its consumer group"
        return self.brokers_down(now)

    def brokers_down(self, now: float) -> str | None:
        """The reason while the client has seen every broker down (and none up again since),
        else None: any thread may ask (one attribute of the consumer read)."""
        down_since = self._consumer.brokers_down_since()
        if down_since is not None:
            return f"the broker is unreachable (every broker down for {now - down_since:.0f} s)"
        return None

    def _subscribes_no_topic(self, now: float) -> bool:
        if self._patterns and now - self._no_topic_checked_at >= _NO_TOPIC_CHECK_S:
            self._no_topic_checked_at = now
            self._no_topic = self._consumer.matches_no_topic()
        return self._no_topic


class Health:
    """The loops of one process (their :class:`Heartbeat`) judged for the probes (see the module
    docstring); ``stall_s``: ``health_stall_s``."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self._beats: list[Heartbeat] = []

    def heartbeat(self, name: str, detail: str = "") -> Heartbeat:
        """A new loop's heartbeat, judged from now on (``detail``: what its start does)."""
        beat = Heartbeat(name, detail)
        self._beats.append(beat)
        return beat

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """Whether every loop is alive, and the probe's body: each loop's state, seconds since
        its last progress, and why it is not alive."""
        now = time.monotonic()
        running = {t.name for t in threading.enumerate()}
        workers = {}
        for beat in self._beats:
            problem = self._not_alive(beat, now, running)
            workers[beat.name] = {**_shown(beat, now), "alive": problem is None, "problem": problem}
        alive = all(w["alive"] for w in workers.values())
        body = {"status": "alive" if alive else "not alive", "health_stall_s": self.stall_s}
        return alive, {**body, "workers": workers}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Whether every loop (at least one) is ready, and the probe's body: each loop's state
        and why it is not ready."""
        now = time.monotonic()
        running = {t.name for t in threading.enumerate()}
        workers = {}
        for beat in self._beats:
            reason = self._not_ready(beat, now, running)
            workers[beat.name] = {**_shown(beat, now), "ready": reason is None, "reason": reason}
        ready = bool(workers) and all(w["ready"] for w in workers.values())
        return ready, {"status": "ready" if ready else "not ready", "workers": workers}

    def _not_alive(self, beat: Heartbeat, now: float, running: set[str]) -> str | None:
        if beat.failure is not None:
            return f"failed: {beat.failure}"
        if beat.ended or beat.state == "starting":
            return None  # (stopped as asked or drained: no failure; a start has its own bounds)
        if beat.state == "computing" and f"{beat.thread}-keepalive" in running:
            return None
        idle = now - beat.at
        if idle > self.stall_s:
            limit = f"health_stall_s {self.stall_s:g}"
            return f"no progress for {idle:.1f} s ({limit}) while {beat.state}"
        return None

    def _not_ready(self, beat: Heartbeat, now: float, running: set[str]) -> str | None:
        if beat.ended:
            return beat.state if beat.failure is None else f"failed: {beat.failure}"
        if beat.stopping:
            return "stopping"
        if beat.state in ("starting", "retrying"):
            return f"{beat.state}: {beat.detail}" if beat.detail else beat.state
        if beat.not_ready is not None:
            return beat.not_ready
        return beat.brokers_down(now) or self._not_alive(beat, now, running)


def _shown(beat: Heartbeat, now: float) -> dict[str, Any]:
    """A loop's state as the probes show it."""
    return {
        "state": beat.state,
        "detail": beat.detail,
        "seconds_since_progress": round(max(now - beat.at, 0.0), 3),
    }
