"""A second Ctrl-C while ``sparsewatch alerts --follow`` is stopping a look held up by a PostgreSQL
lock: the first one interrupts the look, and psycopg cancels its query in the server; the second
one landed wherever that had got to, and a KeyboardInterrupt there printed SQLAlchemy's
"Exception terminating connection" with two tracebacks, or left the connection half-discarded
("error: ProgrammingError: can't change 'autocommit' now", status 1). Now it ends the process at
once, with one line and status 0; and a signal once the tail has stopped is ignored (Python's
default then killed the exiting process: status -2). Real PostgreSQL, real processes."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sparsewatch.storage.store import Store

from sparsewatch.commands_query import STOPPED_AGAIN

pytestmark = [pytest.mark.postgres]

T0 = datetime(2024, 3, 1, tzinfo=UTC)

# The CLI, with a second SIGINT to itself at the moment named by argv[1], once a first one has
# asked the tail to stop (its look then interrupted): a function that the stop of a look calls
# runs after the signal is sent, its handler running at its first instruction. The file of
# argv[2] records that it was sent.
_SECOND_SIGINT_AT = """
import os, signal, sys
point, fired = sys.argv.pop(1), sys.argv.pop(1)
if point == "psycopg-cancel":  # psycopg cancelling the query in the server
    import psycopg
    owner, name = psycopg.Connection, "_try_cancel"
else:  # "pool-discard": SQLAlchemy closing the connection it has invalidated
    import sqlalchemy.engine.default
    owner, name = sqlalchemy.engine.default.DefaultDialect, "do_close"
original = getattr(owner, name)

def second_sigint_first(*args, **kwargs):
    handler = signal.getsignal(signal.SIGINT)
    stopping = getattr(getattr(handler, "__self__", None), "requested", False)
    if stopping and not os.path.exists(fired):
        open(fired, "w").close()
        os.kill(os.getpid(), signal.SIGINT)
    return original(*args, **kwargs)

setattr(owner, name, second_sigint_first)
from sparsewatch.cli import main
main()
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SPARSEWATCH_DEBUG"}


def _lock_waiters(conn: sa.Connection, database: str) -> int:
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = :db AND wait_event_type = 'Lock'"
    )
    return conn.execute(query, {"db": database}).scalar_one()


@contextmanager
def _following_behind_a_lock(
    url: str, admin_url: str, prefix: list[str]
) -> Iterator[subprocess.Popen[bytes]]:
    """``PREFIX alerts --follow`` on ``url``'s one alert, its next look waiting behind an ACCESS
    EXCLUSIVE lock held for the block."""
    with Store.open(url) as store, store.transaction() as tx:
        tx.insert_alerts([{"kind": "anomaly", "stream": "s", "subject_id": "d", "score": 1.0,
                           "window_seq": 0, "event_time": T0, "summary": "x"}])  # fmt: skip
    database = sa.engine.make_url(url).database
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    locker = sa.create_engine(url)
    follow = ["alerts", "--follow", "--interval", "0.2", "--format", "json", "--database-url", url]
    proc = subprocess.Popen(
        [*prefix, *follow], bufsize=0, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and b'"subject_id": "d"' in proc.stdout.readline()  # it is following
        with locker.connect() as lock, admin.connect() as watch:
            lock.execute(sa.text("LOCK TABLE alerts IN ACCESS EXCLUSIVE MODE"))
            deadline = time.monotonic() + 10
            while _lock_waiters(watch, database) == 0:  # its next look is blocked
                assert time.monotonic() < deadline, "the follower's look never waited"
                time.sleep(0.02)
            yield proc
            lock.rollback()
    finally:
        proc.kill()
        proc.wait()
        locker.dispose()
        admin.dispose()


@pytest.mark.parametrize("point", ["psycopg-cancel", "pool-discard"])
def test_a_second_sigint_while_a_look_is_stopped_ends_it_in_one_line(
    postgres_database: tuple[str, str], tmp_path: Path, point: str
) -> None:
    """Ctrl-C while the look waits behind the lock, a second one as psycopg cancels its query or
    as SQLAlchemy discards its connection: status 0, one line, no traceback."""
    url, admin_url = postgres_database
    fired = tmp_path / "fired"
    cli = [sys.executable, "-c", _SECOND_SIGINT_AT, point, str(fired)]
    with _following_behind_a_lock(url, admin_url, cli) as proc:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)  # the lock is still held
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
    assert fired.exists(), "the second SIGINT was not sent where it was meant to be"
    assert "Traceback" not in err, err
    assert (code, err) == (0, f"{STOPPED_AGAIN}\n")


@pytest.mark.parametrize("gap_s", [0.0, 0.1, 0.2, 0.4])
def test_two_sigints_in_quick_succession_end_the_tail_with_status_0(
    postgres_database: tuple[str, str], gap_s: float
) -> None:
    """Two Ctrl-C ``gap_s`` apart while a look waits behind the lock, landing during the
    interruption or after the tail has stopped, as they come: status 0, nothing on stderr but
    :data:`STOPPED_AGAIN` at most."""
    url, admin_url = postgres_database
    with _following_behind_a_lock(url, admin_url, [sys.executable, "-m", "sparsewatch"]) as proc:
        proc.send_signal(signal.SIGINT)
        time.sleep(gap_s)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
    assert code == 0, err
    assert err in ("", f"{STOPPED_AGAIN}\n"), err
