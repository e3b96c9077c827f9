"""``sparsewatch run`` told to stop, as an operator's supervisor tells it: the stop is said in the
log, and a second signal ends a stop that waits for the database. Real broker, real SQLite and
PostgreSQL."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.replay.producer import replay_documents
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store

from tests.support.cli import clean_environ

pytestmark = [pytest.mark.kafka]


def _feed(bootstrap: str, prefix: str) -> None:
    """A few hours of a generated stream on ``prefix``'s input topic."""
    ensure_topics(bootstrap, {f"{prefix}.docs": 4})
    docs = generate_stream(600, kind="tweet", seed=3)
    assert replay_documents(docs, bootstrap, f"{prefix}.docs").produced == len(docs)


def _start(
    bootstrap: str, prefix: str, database_url: str, log: Path, *args: str
) -> subprocess.Popen[bytes]:
    """``sparsewatch run ARGS`` on ``prefix``'s topics (1-hour windows), its stderr (the log)
    appended to ``log``."""
    env = clean_environ(
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        SPARSEWATCH_KAFKA_TOPIC_PREFIX=prefix,
        SPARSEWATCH_KAFKA_GROUP_ID=prefix,
        SPARSEWATCH_DATABASE_URL=database_url,
        SPARSEWATCH_DATA_DIR=str(log.parent),
        SPARSEWATCH_WINDOWS_SIZE="1h",
    )
    with log.open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "sparsewatch", "run", *args], env=env, stderr=err
        )


def _wait_for(condition, what: str, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_is_said_in_the_log(
    kafka_bootstrap: str, tmp_path: Path, topic_name: str, signal_name: str
) -> None:
    """Nothing was logged when a stop signal came: a worker finishing a long window looked as if
    it ignored SIGTERM or Ctrl-C. Now one line says so, and the stop is still clean (status 0)."""
    log = tmp_path / "run.log"
    url = f"sqlite:///{tmp_path / 'sw.db'}"
    _feed(kafka_bootstrap, topic_name)
    proc = _start(kafka_bootstrap, topic_name, url, log, "all")
    try:
        _wait_for(lambda: log.read_text().count(" assigned [") >= 2, "both workers' partitions")
        proc.send_signal(getattr(signal, signal_name))
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        proc.kill()
    said = [line for line in log.read_text().splitlines() if f'"{signal_name}: ' in line]
    assert len(said) == 1, log.read_text()[-3000:]
    assert "the workers stop after their batch in hand (a second signal: at once)" in said[0]


def _blocked_on_a_lock(admin: sa.Engine, database: str) -> bool:
    with admin.connect() as conn:
        return bool(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = :d "
                    "AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO windows%'"
                ),
                {"d": database},
            ).scalar()
        )


def test_a_second_signal_ends_a_stop_held_by_a_database_lock(
    kafka_bootstrap: str, postgres_database: tuple[str, str], tmp_path: Path, topic_name: str
) -> None:
    """A window's transaction queued behind another session's lock (an operator's open
    transaction, a VACUUM FULL, an index built without CONCURRENTLY) held a stopping worker for
    as long as the lock, and SIGTERM or Ctrl-C again did nothing: only SIGKILL ended it. Now a
    second signal ends the process at once, by that signal; nothing of the transaction is
    committed, and the next start resumes."""
    url, admin_url = postgres_database
    database = sa.engine.make_url(url).database
    Store.open(url).dispose()
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    owner = sa.create_engine(url)
    locker = owner.connect()
    log = tmp_path / "run.log"
    proc = None
    try:
        locker.exec_driver_sql("LOCK TABLE windows IN ACCESS EXCLUSIVE MODE")
        _feed(kafka_bootstrap, topic_name)
        proc = _start(kafka_bootstrap, topic_name, url, log, "detector")
        _wait_for(lambda: _blocked_on_a_lock(admin, database), "a window's transaction to wait")
        proc.send_signal(signal.SIGTERM)
        time.sleep(3)
        assert proc.poll() is None  # the stop waits for the transaction, which waits for the lock
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == -signal.SIGTERM, log.read_text()[-3000:]
    finally:
        if proc is not None:
            proc.kill()
        locker.rollback()
        locker.close()
    said = log.read_text()
    assert "SIGTERM while stopping: exiting now, without the batches in hand" in said
    _wait_for(lambda: not _blocked_on_a_lock(admin, database), "the lock's waiter to end", 30)
    admin.dispose()
    with owner.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM windows").scalar() == 0
    owner.dispose()
    again = _start(kafka_bootstrap, topic_name, url, log, "detector", "--until-idle", "3")
    assert again.wait(timeout=180) == 0, log.read_text()[-3000:]
    with Store.open(url) as store:
        assert store.partition_offsets(f"{topic_name}.detector", f"{topic_name}.docs")
        assert store.documents(limit=None)
