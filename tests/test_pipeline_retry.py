"""Backoff on transient database errors: retried until success, raised when it lasts too long."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sparsewatch.consumers.retry import with_backoff


def test_transaction_retried_after_database_outage(tmp_path):
    """A locked SQLite database (another writer) is a real transient OperationalError."""
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

    assert with_backoff(write, "test", sleep=release_after_two) == 1
    assert len(attempts) == 3 and sleeps == [0.2, 0.4]
    blocker.close()
    engine.dispose()


def test_persistent_failure_is_raised():
    def fail() -> None:
        raise sa.exc.OperationalError("stmt", {}, Exception("down"))

    with pytest.raises(sa.exc.OperationalError):
        with_backoff(fail, "test", max_wait_s=1.0, sleep=lambda _: None)
