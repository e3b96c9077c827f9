"""Retries with exponential backoff for brief outages of the database or the broker.

Only operations that are safe to repeat are retried: a whole SQL transaction (all or nothing, with
idempotent writes) and reads. A failure that outlasts ``max_wait_s`` is raised, the worker stops,
and its next start resumes from the last committed transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy.exc

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT_DB_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)


def with_backoff(
    action: Callable[[], T],
    what: str,
    transient: tuple[type[BaseException], ...] = TRANSIENT_DB_ERRORS,
    max_wait_s: float = 120.0,
    first_delay_s: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``action``; on a ``transient`` error wait 0.2 s, 0.4 s, ... (at most 10 s), retry."""
    delay, waited = first_delay_s, 0.0
    while True:
        try:
            return action()
        except transient as exc:
            if waited >= max_wait_s:
                raise
            log.warning("%s failed (%s); retrying in %.1fs", what, type(exc).__name__, delay)
            sleep(delay)
            waited += delay
            delay = min(delay * 2, 10.0)
