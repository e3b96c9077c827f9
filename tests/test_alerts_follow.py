"""``sparsewatch alerts --follow``: every matching alert printed once, as it is committed, on
SQLite and PostgreSQL, including an alert whose transaction commits after a later one's."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sparsewatch.storage.alert_follower import AlertFollower
from sparsewatch.storage.schema import alerts
from sparsewatch.storage.store import Store

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def _alert(n: int, kind: str = "novel_document", stream: str = "news", score: float = 0.9):
    return {
        "kind": kind,
        "stream": stream,
        "subject_id": f"doc-{n}",
        "score": score,
        "window_seq": n,
        "event_time": T0 + timedelta(minutes=n),
        "summary": f"story {n}",
    }


def _insert(store: Store, *rows: dict) -> None:
    with store.transaction() as tx:
        tx.insert_alerts(list(rows))


def _subjects(rows: list[dict]) -> list[str]:
    return [r["subject_id"] for r in rows]


def test_the_follower_returns_each_new_matching_alert_once(database_url: str) -> None:
    with Store.open(database_url) as store:
        for n in range(3):
            _insert(store, _alert(n))
        follower = AlertFollower(kinds=["novel_document"], streams=["news"], min_score=0.5)
        with store.reading() as conn:
            assert _subjects(follower.start(conn, 2)) == ["doc-1", "doc-2"]  # oldest first
            assert follower.poll(conn) == []
        _insert(store, _alert(3), _alert(4, kind="anomaly"), _alert(5, stream="tweets"))
        _insert(store, _alert(6, score=0.1), _alert(7))
        with store.reading() as conn:
            assert _subjects(follower.poll(conn)) == ["doc-3", "doc-7"]
            assert follower.poll(conn) == []
        _insert(store, _alert(3))  # the same alert again: the store keeps the first
        with store.reading() as conn:
            assert follower.poll(conn) == []


def test_a_backlog_of_zero_prints_only_what_comes_after(database_url: str) -> None:
    with Store.open(database_url) as store:
        _insert(store, _alert(0))
        follower = AlertFollower()
        with store.reading() as conn:
            assert follower.start(conn, 0) == []
        _insert(store, _alert(1))
        with store.reading() as conn:
            assert _subjects(follower.poll(conn)) == ["doc-1"]


def test_a_look_whose_transaction_fails_after_the_rows_counts_for_nothing(
    postgres_database,
) -> None:
    """The server ends the follower's connection after a poll's rows came back, before its
    COMMIT (a restart, a failover): the retry found the alert already marked returned, and
    ``alerts --follow`` never printed it."""
    url, admin_url = postgres_database
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with Store.open(url) as store:
            _insert(store, _alert(0))
            follower = AlertFollower()
            with follower.attempt(), store.reading() as conn:
                assert _subjects(follower.start(conn, 5)) == ["doc-0"]
            _insert(store, _alert(1))
            with (
                pytest.raises(sa.exc.OperationalError),
                follower.attempt(),
                store.reading() as conn,
            ):
                assert _subjects(follower.poll(conn)) == ["doc-1"]
                pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
                with admin.connect() as other:
                    other.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            with follower.attempt(), store.reading() as conn:
                assert _subjects(follower.poll(conn)) == ["doc-1"]  # read again, returned once
                assert follower.poll(conn) == []
    finally:
        admin.dispose()


def test_an_alert_committed_after_a_later_one_is_not_missed(postgres_database) -> None:
    """Two writers: the first takes the smaller id and commits last. A reader that only asked
    for ids above the largest it had seen skipped it for good."""
    url, _ = postgres_database
    with Store.open(url) as store:
        _insert(store, _alert(0))
        follower = AlertFollower()
        with store.reading() as conn:
            follower.start(conn, 10)
        slow = store.engine.connect()
        slow_tx = slow.begin()
        slow.execute(
            sa.insert(alerts),
            [{**_alert(1), "created_at": datetime.now(UTC)}],
        )
        _insert(store, _alert(2))  # a larger id, committed first
        with store.reading() as conn:
            assert _subjects(follower.poll(conn)) == ["doc-2"]
        slow_tx.commit()
        slow.close()
        with store.reading() as conn:
            assert _subjects(follower.poll(conn)) == ["doc-1"]
            assert follower.poll(conn) == []
            ids = dict(conn.execute(sa.select(alerts.c.subject_id, alerts.c.id)).all())
        assert ids["doc-1"] < ids["doc-2"]


def _read_lines(lines: queue.Queue, n: int, timeout: float = 60.0) -> list[str]:
    """The next ``n`` lines the reader thread of :func:`_follow` queued."""
    deadline = time.monotonic() + timeout
    got = []
    for _ in range(n):
        left = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(left, 0.0))
        except queue.Empty:
            raise AssertionError(f"only {got} after {timeout} s") from None
        assert line is not None, f"output ended after {got}"
        got.append(line)
    return got


def _follow(url: str, *args: str) -> tuple[subprocess.Popen, queue.Queue]:
    """``alerts --follow`` in a process, and a queue of its output lines (``None`` at the end)."""
    env = {k: v for k, v in os.environ.items() if k != "SPARSEWATCH_DEBUG"}
    command = [sys.executable, "-m", "sparsewatch", "alerts", "--follow", "--interval", "0.2"]
    proc = subprocess.Popen(
        [*command, "--database-url", url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def _stop(proc: subprocess.Popen, sig: signal.Signals) -> tuple[int, str]:
    proc.send_signal(sig)
    code = proc.wait(timeout=60)
    return code, proc.stderr.read()


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_follow_prints_the_backlog_then_each_alert_as_it_is_committed(
    database_url: str, fmt: str
) -> None:
    with Store.open(database_url) as store:
        _insert(store, _alert(0), _alert(1, kind="anomaly", score=3.5))
        proc, lines = _follow(database_url, "--limit", "1", "--format", fmt)
        try:
            header = [] if fmt == "json" else _read_lines(lines, 1)
            backlog = _read_lines(lines, 1)
            _insert(store, _alert(2, kind="emerging_topic"))
            _insert(store, _alert(3))
            later = _read_lines(lines, 2)
        finally:
            code, err = _stop(proc, signal.SIGTERM if fmt == "table" else signal.SIGINT)
    assert code == 0 and err == ""
    rows = [*backlog, *later]
    if fmt == "json":
        parsed = [json.loads(line) for line in rows]
        assert [r["subject_id"] for r in parsed] == ["doc-1", "doc-2", "doc-3"]
        assert [r["kind"] for r in parsed] == ["anomaly", "emerging_topic", "novel_document"]
    else:
        assert header[0].startswith("id,kind" if fmt == "csv" else "created")
        assert [line.split(",")[3] if fmt == "csv" else line.split()[4] for line in rows] == [
            "doc-1",
            "doc-2",
            "doc-3",
        ]


def test_follow_refuses_until_and_interval_needs_follow(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    env = {k: v for k, v in os.environ.items() if k != "SPARSEWATCH_DEBUG"}
    for extra, message in (
        (["--follow", "--until", "1h"], "--follow takes no --until"),
        (["--interval", "1"], "--interval needs --follow"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "sparsewatch", "alerts", "--database-url", url, *extra],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert proc.returncode == 2
        assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr


def test_follow_waits_out_a_database_outage(postgres_database, postgres_outage) -> None:
    """A tail outlives a brief outage of the database (it stopped at the first failed look) and
    prints what was committed meanwhile, once."""
    url, _ = postgres_database
    with Store.open(url) as store:
        _insert(store, _alert(0))
    proc, lines = _follow(url, "--format", "json")
    try:
        assert [json.loads(x)["subject_id"] for x in _read_lines(lines, 1)] == ["doc-0"]
        postgres_outage.begin()
        time.sleep(2.0)  # several looks fail meanwhile
        assert proc.poll() is None
        postgres_outage.end()
        with Store.open(url) as store:
            _insert(store, _alert(1))
        assert [json.loads(x)["subject_id"] for x in _read_lines(lines, 1)] == ["doc-1"]
    finally:
        postgres_outage.end()
        code, err = _stop(proc, signal.SIGINT)
    assert code == 0
    assert "reading the alerts failed (OperationalError: " in err  # with the error's first line
    assert "); retrying in " in err
    assert "Traceback" not in err
    assert lines.get(timeout=5) is None  # nothing else was printed


def test_follow_columns_stay_aligned_with_wide_characters() -> None:
    """Columns were padded by characters, so a CJK stream id (two terminal cells a character)
    pushed every later column of its line to the right."""
    from rich.cells import cell_len

    from sparsewatch.commands_query import _columns

    widths = [8, 6, 0]
    lines = [_columns(cells, widths) for cells in (["新闻流", "ab", "x"], ["news", "ab", "x"])]
    assert [cell_len(line[: line.index("x")]) for line in lines] == [18, 18]
    assert _columns(["a\x1b[2J", "b", "c"], widths).startswith("a\ufffd[2J")  # still escaped
