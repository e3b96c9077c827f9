"""Backoff on transient database errors: retried until success, raised when it lasts too long."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import sqlalchemy as sa
from sparsewatch.consumers.retry import RetryAbandonedError, StopFlag, with_backoff


def test_transaction_retried_after_database_outage(tmp_path, caplog):
    """A locked SQLite database (another writer) is a real transient OperationalError. The log
    says why each attempt failed (it named only the exception's class) and when it recovered
    (nothing did)."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = sa.create_engine(url, connect_args={"timeout": 0.05})
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE results (x INTEGER)")
    blocker = sa.create_engine(url, connect_args={"timeout": 0.05}).connect()
    blocker.exec_driver_sql("BEGIN EXCLUSIVE")
    attempts, sleeps = [], []

    def write() -> int:
        attempts.append(1)
        with engine.begin() as conn:
            return conn.exec_driver_sql("INSERT INTO results VALUES (1)").rowcount

    def release_after_two(delay: float) -> None:
        sleeps.append(delay)
        if len(sleeps) == 2:
            blocker.rollback()

    with caplog.at_level("INFO", logger="sparsewatch.consumers.retry"):
        assert with_backoff(write, "writing results", sleep=release_after_two) == 1
    assert len(attempts) == 3 and sleeps == [0.2, 0.4]
    assert [r.getMessage() for r in caplog.records] == [
        f"writing results failed (OperationalError: database is locked); retrying in {delay}s"
        for delay in (0.2, 0.4)
    ] + ["writing results succeeded after 2 failed attempts"]
    blocker.close()
    engine.dispose()


def test_persistent_failure_is_raised():
    def fail() -> None:
        raise sa.exc.OperationalError("stmt", {}, Exception("down"))

    with pytest.raises(sa.exc.OperationalError):
        with_backoff(fail, "test", max_wait_s=1.0, sleep=lambda _: None)


def test_the_attempts_own_time_counts_towards_the_limit():
    """Only the waits were counted: attempts of 0.2 s each (SQLite waits 30 s on a lock before
    it fails) with waits from 1 ms went on for ten attempts, 2 s, under a 0.5 s limit."""
    attempts = []

    def slow_failure() -> None:
        attempts.append(time.monotonic())
        time.sleep(0.2)
        raise sa.exc.OperationalError("stmt", {}, Exception("database is locked"))

    with pytest.raises(sa.exc.OperationalError):
        with_backoff(slow_failure, "test", max_wait_s=0.5, first_delay_s=0.001)
    assert len(attempts) <= 4  # 3: at 0, 0.2 and 0.4 s, the third failing past 0.5 s


def _down() -> None:
    raise sa.exc.OperationalError("stmt", {}, Exception("connection refused\nDETAIL: more"))


def test_a_stop_abandons_the_retries_at_once():
    """A worker told to stop during an outage used to retry for max_wait_s (two minutes) first."""
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(RetryAbandonedError, match=r"^writing abandoned on shutdown \(Operat"):
        with_backoff(_down, "writing", max_wait_s=120.0, stop=stop)
    assert time.monotonic() - t0 < 3.0
    with pytest.raises(RetryAbandonedError):  # already stopped: one attempt, no wait
        with_backoff(_down, "writing", stop=stop)
    assert with_backoff(lambda: 7, "reading", stop=stop) == 7  # a stop does not refuse work


def test_a_stop_flag_raised_by_a_signal_ends_the_wait():
    flag = StopFlag()
    previous = signal.signal(signal.SIGUSR1, flag.request)
    try:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        t0 = time.monotonic()
        assert flag.wait(30.0) is True
        assert time.monotonic() - t0 < 2.0
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert StopFlag().wait(0.05) is False
