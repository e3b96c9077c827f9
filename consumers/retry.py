"""Retries with exponential backoff for brief outages of the database or the broker.

Only operations that are safe to repeat are retried: a whole SQL transaction (all or nothing, with
idempotent writes) and reads. A failure that outlasts ``max_wait_s`` is raised, the worker stops,
and its next start resumes from the last committed transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

import sqlalchemy.exc

from sparsewatch.errors import first_line

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT_DB_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)


class Stop(Protocol):
    """A stop request: :class:`threading.Event` or :class:`StopFlag`."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float) -> bool: ...


class StopFlag:
    """A stop request raised by a signal handler in the thread that waits: a plain attribute,
    polled every 0.1 s (an Event's lock, taken by the handler while the interrupted wait holds
    it, could deadlock)."""

    def __init__(self) -> None:
        self.requested = False

    def request(self, *_: object) -> None:
        """Signal-handler signature: ``signal.signal(signum, flag.request)``."""
        self.requested = True

    def is_set(self) -> bool:
        return self.requested

    def wait(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not self.requested and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))
        return self.requested


class ReportedStop:
    """``stop`` whose waits are reported first: ``report(what, seconds)`` before each (a wait
    of :func:`with_backoff` is one retry of ``what``): to a loop's heartbeat, or from a writer
    process to its loop."""

    def __init__(self, stop: Stop, what: str, report: Callable[[str, float], None]) -> None:
        self._stop = stop
        self._what = what
        self._report = report

    def is_set(self) -> bool:
        return self._stop.is_set()

    def wait(self, timeout: float) -> bool:
        self._report(self._what, timeout)
        return self._stop.wait(timeout)


class RetryAbandonedError(RuntimeError):
    """A stop was requested while an operation waited to be retried: nothing of it happened."""


def with_backoff(
    action: Callable[[], T],
    what: str,
    transient: tuple[type[BaseException], ...] = TRANSIENT_DB_ERRORS,
    max_wait_s: float = 120.0,
    first_delay_s: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
    stop: Stop | None = None,
) -> T:
    """Run ``action``; on a ``transient`` error wait 0.2 s, 0.4 s, ... (at most 10 s), retry,
    until the waits or the time since the first attempt reach ``max_wait_s`` (the attempts' own
    time counts: SQLite waits 30 s on a locked database before it fails, and counting the waits
    alone made a 120 s limit last some 11 minutes).

    With ``stop``, the waits end as soon as a stop is requested and the operation is abandoned
    (:class:`RetryAbandonedError`): a worker told to shut down during an outage exits at once
    instead of retrying for ``max_wait_s`` past its grace period; its next start resumes."""
    delay, waited, failures = first_delay_s, 0.0, 0
    started = time.monotonic()
    while True:
        try:
            result = action()
        except transient as exc:
            if waited >= max_wait_s or time.monotonic() - started >= max_wait_s:
                raise
            failures += 1
            if stop is None or not stop.is_set():
                log.warning(
                    "%s failed (%s: %s); retrying in %.1fs",
                    what,
                    type(exc).__name__,
                    first_line(exc)[:200],
                    delay,
                )
                if stop is None:
                    sleep(delay)
                else:
                    stop.wait(delay)
            if stop is not None and stop.is_set():
                reason = f"{type(exc).__name__}: {first_line(exc)[:200]}"
                raise RetryAbandonedError(f"{what} abandoned on shutdown ({reason})") from exc
            waited += delay
            delay = min(delay * 2, 10.0)
        else:
            if failures:
                log.info("%s succeeded after %d failed attempts", what, failures)
            return result
