"""The query commands' fixes after review: ``alerts --follow`` stops at once on Ctrl-C or SIGTERM
even while a look waits behind a PostgreSQL lock; tables print under a stdout encoding that lacks
some characters; ``--database-url ""`` is refused. (The final sigma of ``--grep`` is in
``test_query_grep_folding.py``.)"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import click
import pytest
import sqlalchemy as sa
from sparsewatch.storage.store import Store

from sparsewatch.cli import cli
from tests.support.cli import run_cli
from tests.support.text_database import database_holding

T0 = datetime(2024, 3, 1, tzinfo=UTC)
# Latin-1 has "ü" and "é", not "İ", Greek or CJK
TEXT = "İstanbul ΟΔΟΣ, Zürich café 東京"
SHOWN = "?stanbul ????, Zürich café ??"


def _env(**settings: str) -> dict[str, str]:
    """This process's environment without ``SPARSEWATCH_DEBUG`` (no traceback), and
    ``settings``."""
    return {k: v for k, v in os.environ.items() if k != "SPARSEWATCH_DEBUG"} | settings


def _follow(url: str, *args: str, **settings: str) -> subprocess.Popen[bytes]:
    """``sparsewatch alerts --follow`` in a child process, its stdout unbuffered here: a line
    :func:`_line` reads must not pull the next one into a buffer that ``select`` does not see."""
    command = [sys.executable, "-m", "sparsewatch", "alerts", "--follow", "--interval", "0.2"]
    return subprocess.Popen(
        [*command, "--database-url", url, *args],
        bufsize=0,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(**settings),
    )


def _line(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bytes:
    """The next line of ``proc``'s stdout, failing after ``timeout`` s rather than hanging."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no output line within {timeout} s"
    return proc.stdout.readline()


def _lock_waiters(conn: sa.Connection, database: str) -> int:
    """The sessions of ``database`` waiting for a lock."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = :db AND wait_event_type = 'Lock'"
    )
    return conn.execute(query, {"db": database}).scalar_one()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_follow_stops_at_once_while_a_look_waits_behind_a_lock(postgres_database, sig) -> None:
    """A look behind an ACCESS EXCLUSIVE lock (a migration, a VACUUM FULL) waits as long as the
    lock is held: the signal only asked for a stop after the look, so the tail went on, even
    after three Ctrl-C, until the lock was released. Its query is cancelled in the server, not
    left queued behind the lock."""
    url, admin_url = postgres_database
    database = sa.engine.make_url(url).database
    with Store.open(url) as store, store.transaction() as tx:
        tx.insert_alerts([{"kind": "anomaly", "stream": "s", "subject_id": "d", "score": 1.0,
                           "window_seq": 0, "event_time": T0, "summary": "x"}])  # fmt: skip
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    locker = sa.create_engine(url)
    proc = _follow(url, "--format", "json")
    try:
        assert b'"subject_id": "d"' in _line(proc)  # the backlog: it is following
        with locker.connect() as lock, admin.connect() as watch:
            lock.execute(sa.text("LOCK TABLE alerts IN ACCESS EXCLUSIVE MODE"))
            deadline = time.monotonic() + 10
            while _lock_waiters(watch, database) == 0:  # its next look is blocked
                assert time.monotonic() < deadline, "the follower's look never waited"
                time.sleep(0.05)
            proc.send_signal(sig)
            code = proc.wait(timeout=5)  # the lock is still held
            assert _lock_waiters(watch, database) == 0  # cancelled, not left in the queue
            lock.rollback()
        assert proc.stderr is not None
        assert (code, proc.stderr.read()) == (0, b"")
    finally:
        proc.kill()
        proc.wait()
        locker.dispose()
        admin.dispose()


@pytest.fixture
def latin1_url(tmp_path) -> str:
    """A database whose document, alert and dead letter hold :data:`TEXT`."""
    return database_holding(tmp_path / "a.db", TEXT)


@pytest.mark.parametrize("command", ["alerts", "documents", "dead-letters"])
def test_a_table_shows_what_a_latin1_stdout_lacks_as_question_marks(latin1_url, command) -> None:
    """The table failed whole ("error: UnicodeEncodeError", status 1, nothing printed) at the
    first character the stdout's encoding lacked; now that character is "?" and the others,
    "ü" included, are printed in that encoding."""
    done = subprocess.run(
        [sys.executable, "-m", "sparsewatch", command, "--database-url", latin1_url],
        capture_output=True,
        env=_env(PYTHONIOENCODING="latin-1"),
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, b"")
    assert SHOWN in " ".join(done.stdout.decode("latin-1").split())  # the cell may wrap


def test_follow_table_lines_under_a_latin1_stdout(latin1_url) -> None:
    """``--follow`` stopped at the first such alert with ``error: UnicodeEncodeError``."""
    proc = _follow(latin1_url, PYTHONIOENCODING="latin-1")
    try:
        assert _line(proc).startswith(b"created")
        alert = _line(proc).decode("latin-1")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.stderr is not None
    assert (code, proc.stderr.read()) == (0, b"")
    assert alert.rstrip("\n").endswith(SHOWN)


def _with_database_url(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[list[str]]:
    """The command lines of every command (nested groups included) with ``--database-url``."""
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _with_database_url(command, (*path, name))
        elif any("--database-url" in p.opts for p in command.params):
            yield [*path, name]


def test_a_blank_database_url_is_refused_by_every_command(tmp_path, monkeypatch, capsys) -> None:
    """``--database-url ""`` (a script's unset variable) read the default database instead,
    DATA_DIR/sparsewatch.db here, as if it had not been given."""
    Store.open(f"sqlite:///{tmp_path / 'sparsewatch.db'}").dispose()
    monkeypatch.setenv("SPARSEWATCH_DATA_DIR", str(tmp_path))
    commands = list(_with_database_url(cli))
    expected = {"alerts", "documents", "topics", "dead-letters", "status", "snapshots list",
                "snapshots export", "db upgrade"}  # fmt: skip
    assert expected <= {" ".join(c) for c in commands}
    for command in commands:
        # before any other argument: click checks the options in the order given
        code, out, err = run_cli(monkeypatch, capsys, *command, "--database-url", "")
        assert code == 2 and out == "", command
        assert len(err.splitlines()) == 1 and "'--database-url': cannot be blank" in err, err


def test_status_shows_what_a_latin1_stdout_lacks_as_question_marks(tmp_path) -> None:
    """``status`` printed its streams with click.echo and its offsets with rich: a stream named
    in Turkish failed it whole with UnicodeEncodeError under a Latin-1 stdout."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store, store.transaction() as tx:
        tx.upsert_window(TEXT, 0, T0, T0 + timedelta(hours=1), 1, None, {}, "idle")
        tx.set_partition_offsets("g.detector", TEXT, {0: 5})
    done = subprocess.run(
        [sys.executable, "-m", "sparsewatch", "status", "--no-kafka", "--database-url", url],
        capture_output=True,
        env=_env(PYTHONIOENCODING="latin-1"),
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, b"")
    shown = done.stdout.decode("latin-1")
    assert SHOWN in shown.splitlines()  # the stream's line
    assert shown.count("?stanbul") >= 2  # and its topic in the offsets' table


def _empty_sqlite(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    Store.open(url).dispose()
    return url


@pytest.mark.parametrize(
    "args",
    [
        ("topics",),
        ("alerts",),
        ("snapshots", "list"),
        ("status", "--no-kafka"),
        ("status", "--no-kafka", "--format", "json"),
    ],
    ids=lambda a: " ".join(a),
)
def test_a_reader_gone_before_any_output_ends_any_listing_quietly(tmp_path, args) -> None:
    """``sparsewatch topics | true``: Rich's closed-pipe exit (tables) and click's (``status
    --format json``) were status 1; JSON and CSV listings, which end it themselves, 0."""
    child = subprocess.Popen(
        [sys.executable, "-m", "sparsewatch", *args, "--database-url", _empty_sqlite(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    err = child.stderr.read()
    assert child.wait(timeout=60) == 0, err
    assert err == b""


@pytest.mark.parametrize(
    "args",
    [
        ("alerts", "--stream", ""),
        ("documents", "--stream", "  "),
        ("dead-letters", "--topic", ""),
        ("snapshots", "list", "--model-kind", ""),
    ],
    ids=lambda a: " ".join(a),
)
def test_a_blank_name_filter_is_a_usage_error(monkeypatch, capsys, tmp_path, args) -> None:
    """No stream, topic or model kind is blank: such a filter (an empty ``$STREAM``) matched
    nothing, status 0."""
    code, out, err = run_cli(monkeypatch, capsys, *args, "--database-url", _empty_sqlite(tmp_path))
    assert code == 2 and out == ""
    assert "cannot be blank" in err and len(err.splitlines()) == 1


def test_an_integer_too_large_for_a_float_option_names_the_option(
    monkeypatch, capsys, tmp_path
) -> None:
    """``novel_top_q = 1000...0`` (400 digits) ended in ``error: OverflowError: int too large
    to convert to float``, status 1, naming neither the key nor the file."""
    config = tmp_path / "big.toml"
    config.write_text("[detector]\nnovel_top_q = 1" + "0" * 400 + "\n")
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "--config",
        str(config),
        "alerts",
        "--database-url",
        _empty_sqlite(tmp_path),
    )
    assert code == 2
    assert "'detector.novel_top_q' (SPARSEWATCH_DETECTOR_NOVEL_TOP_Q)" in err
    assert str(config) in err and len(err.splitlines()) == 1


def test_a_client_property_the_library_refuses_is_one_line(monkeypatch, capsys, tmp_path) -> None:
    """The Kafka client library's message ends in a newline: the error was followed by an
    empty line."""
    monkeypatch.setenv("SPARSEWATCH_KAFKA_CLIENT_LINGER_MS", "99999999999999")
    code, _, err = run_cli(monkeypatch, capsys, "alerts", "--database-url", _empty_sqlite(tmp_path))
    assert code == 2
    assert err.startswith("error: environment variable SPARSEWATCH_KAFKA_CLIENT_LINGER_MS")
    assert err.count("\n") == 1 and err.endswith("outside allowed range 0..900000\n")
