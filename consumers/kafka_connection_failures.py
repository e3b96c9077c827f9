"""Broker connection failures logged once rather than at every reconnection attempt
(:class:`ConnectionFailures`): the ``logger`` of the consumers and producers that
:mod:`sparsewatch.consumers.kafka_client` makes, which a consumer's error callback also passes its
connection errors through."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

from confluent_kafka import KafkaError

from sparsewatch.logs import RDKAFKA_LOGGER

REPEATED_FAILURE_S = 60.0
"""A connection failure already logged is logged again, with the number of its repeats, once this
long has passed since it was (see :class:`ConnectionFailures`)."""

_THREAD_PREFIX = re.compile(r"^\[thrd:[^\]]*\]: ")
# how long the connection spent in its last state, and the failures librdkafka itself left unsaid
_FAILURE_SUFFIX = re.compile(
    r" \(after -?\d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)$"
)


def failure_key(text: str) -> str:
    """What failed, in a connection failure's text from librdkafka (a log line or an error):
    without the thread, nor the time spent in the connection's last state, which change at every
    attempt. ``"[thrd:h:9092/1]: h:9092/1: Connect to ipv4#10.0.0.1:9092 failed: Connection
    refused (after 0ms in state CONNECT)"`` gives ``"h:9092/1: Connect to ipv4#10.0.0.1:9092
    failed: Connection refused"``."""
    return _FAILURE_SUFFIX.sub("", _THREAD_PREFIX.sub("", text))


class ConnectionFailures:
    """One Kafka client's broker connection failures, logged once rather than at every attempt.

    While the broker is down librdkafka reports the same failure at each reconnection attempt
    (several a second: see :data:`~sparsewatch.consumers.kafka_client.RECONNECT_BACKOFF_MS`), as
    a log line and, to a consumer's error callback, as an error. A failure (:func:`failure_key`)
    is logged the first time; its repeats are counted, and logged with their number at the first
    repeat ``repeat_after_s`` or more after it was last logged; so a failure that goes on is said
    again every ``repeat_after_s``, and one that stops is not. A different failure is logged at
    once, and so is every other line.

    Given as a client's ``logger`` it receives librdkafka's own lines (``log``): its ``FAIL``
    lines, below CRITICAL, are the connection failures.
    :meth:`~sparsewatch.consumers.kafka_client.BatchConsumer._on_error` passes its connection
    errors through the same instance (:meth:`occurred`), so that the error reporting a failure
    already logged as a line is not logged twice.
    """

    def __init__(
        self, logger: logging.Logger = RDKAFKA_LOGGER, repeat_after_s: float = REPEATED_FAILURE_S
    ) -> None:
        self._logger = logger
        self._repeat_after_s = repeat_after_s
        self._lock = threading.Lock()  # (callbacks may run on the keep-alive helper's thread)
        self._said: dict[str, tuple[float, int]] = {}  # when last logged, repeats since then
        self._unsaid = 0  # repeats not logged since forget()

    def log(self, level: int, msg: str, *args: Any) -> None:
        """A librdkafka line: ``log(level, "%s [%s] %s", facility, client, text)``."""
        if len(args) == 3 and args[0] == "FAIL" and level < logging.CRITICAL:
            suffix = self.occurred(failure_key(str(args[2])))
            if suffix is None:
                return
            msg, args = msg + "%s", (*args, suffix)
        self._logger.log(level, msg, *args)

    def occurred(self, key: str) -> str | None:
        """Record an occurrence of failure ``key``: ``None`` when it is not to be logged now,
        else what to add to its text (its repeats not logged since it was last logged, if any)."""
        now = time.monotonic()
        with self._lock:
            said = self._said.get(key)
            if said is not None and now - said[0] < self._repeat_after_s:
                self._said[key] = (said[0], said[1] + 1)
                self._unsaid += 1
                return None
            if said is None:  # (forgotten: those logged long ago and not repeated since)
                stale = now - self._repeat_after_s
                self._said = {k: v for k, v in self._said.items() if v[0] > stale or v[1]}
            self._said[key] = (now, 0)
        repeats = 0 if said is None else said[1]
        return f" (and {repeats} more time(s) since it was last logged)" if repeats else ""

    def forget(self) -> int:
        """The client reaches its brokers again: the next failure is logged at once, as a new
        one. Returns how many repeats were not logged since the last call."""
        with self._lock:
            unsaid, self._unsaid = self._unsaid, 0
            self._said.clear()
        return unsaid


class FailedConnections:
    """An ``error_cb`` keeping the distinct broker connection failures librdkafka reported (a
    host that does not resolve, a refused connection: :func:`failure_key`), in the order they
    first came: why a client with librdkafka's logging off (a one-shot probe's) reached no broker,
    where its request failed with "Broker transport failure" alone (``run`` said only that after
    its 30 s wait for an unresolvable host)."""

    _CODES = frozenset({KafkaError._RESOLVE, KafkaError._TRANSPORT})
    _SHOWN = 3  # failures said in full; a host of many addresses fails once per address

    def __init__(self) -> None:
        self._keys: dict[str, None] = {}  # (an ordered set)

    def __call__(self, err: KafkaError) -> None:
        if err.code() in self._CODES:
            self._keys.setdefault(failure_key(err.str()), None)

    def why(self) -> str | None:
        """The failures reported, in one line (``None``: none was)."""
        keys = list(self._keys)
        if not keys:
            return None
        more = len(keys) - self._SHOWN
        return "; ".join(keys[: self._SHOWN]) + (f"; and {more} more" if more > 0 else "")
