"""A SQLite URL's query is read as written or refused: SQLAlchemy's pysqlite driver passes SQLite's
URI parameters (``mode``, ``cache``, ...) on only with ``uri=true`` and drops them otherwise with
no more than a warning on stderr, so ``sqlite:////x.db?mode=ro`` opened the database read-write
and ``sparsewatch db prune`` deleted from it. The parameters the driver takes itself keep
working."""

from __future__ import annotations

import sqlite3
import time
import warnings
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sparsewatch.storage.engine import create_engine, sqlite_file
from sparsewatch.storage.store import Store

from sparsewatch.errors import SparsewatchError
from tests.support.cli import run_cli
from tests.support.store_windows import T0, window

URI_PARAMETERS = {
    "mode": "ro",
    "cache": "shared",
    "immutable": "1",
    "nolock": "1",
    "vfs": "unix-dotfile",
    "psow": "0",
    "modeof": "/tmp/x.db",
}


@pytest.fixture
def five_windows(tmp_path: Path) -> Path:
    """A SQLite database holding five windows of stream "s"."""
    path = tmp_path / "results.db"
    with Store.open(f"sqlite:///{path}") as store:
        for seq in range(5):
            window(store, "s", seq, T0 + seq * timedelta(hours=1), timedelta(hours=1))
    return path


def _windows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM windows").fetchone()[0])


def _prune(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str):
    monkeypatch.setenv("SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY", "1")
    return run_cli(
        monkeypatch, capsys, "db", "prune", "--database-url", url, "--before", "now",
        "--keep-windows", "1",
    )  # fmt: skip


def test_prune_refuses_mode_ro_without_uri_and_deletes_nothing(
    five_windows: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reviewer's case: it printed "deleted 4 windows, ..." and exited 0."""
    code, out, err = _prune(monkeypatch, capsys, f"sqlite:///{five_windows}?mode=ro")
    assert (code, out) == (2, "")
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "mode is a SQLite URI parameter" in err
    assert f"sqlite:///file:{five_windows}?mode=ro&uri=true" in err
    assert "SAWarning" not in err
    assert _windows(five_windows) == 5


def test_the_suggested_url_opens_the_database_read_only(
    five_windows: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The form the error names is read-only indeed: prune fails and deletes nothing."""
    code, _, err = _prune(monkeypatch, capsys, f"sqlite:///file:{five_windows}?mode=ro&uri=true")
    assert code != 0 and "readonly database" in err and err.count("\n") == 1, err
    assert _windows(five_windows) == 5


def test_status_refuses_a_uri_parameter_without_uri_in_one_line(
    five_windows: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{five_windows}?immutable=1"
    code, out, err = run_cli(monkeypatch, capsys, "status", "--database-url", url)
    assert (code, out) == (2, "")
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert f"sqlite:///file:{five_windows}?immutable=1&uri=true" in err


@pytest.mark.parametrize("uri", ["", "&uri=false", "&uri=0"], ids=["no uri", "uri=false", "uri=0"])
@pytest.mark.parametrize("name", sorted(URI_PARAMETERS))
def test_a_uri_parameter_without_uri_true_is_refused(tmp_path: Path, name: str, uri: str) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}?{name}={URI_PARAMETERS[name]}{uri}"
    with pytest.raises(SparsewatchError, match=f"{name} is a SQLite URI parameter.*uri=true"):
        create_engine(url)
    with pytest.raises(SparsewatchError, match="SQLite URI parameter"):
        sqlite_file(url)  # (Store.open's first step: it refuses before anything is created)
    assert not (tmp_path / "x.db").exists()


def test_several_uri_parameters_are_all_named(tmp_path: Path) -> None:
    with pytest.raises(SparsewatchError) as exc:
        create_engine(f"sqlite:///{tmp_path / 'x.db'}?mode=ro&cache=shared")
    assert "mode, cache are SQLite URI parameters" in str(exc.value)
    assert f"sqlite:///file:{tmp_path / 'x.db'}?mode=ro&cache=shared&uri=true" in str(exc.value)


def test_an_in_memory_database_with_a_uri_parameter_is_refused() -> None:
    with pytest.raises(SparsewatchError, match=r"mode is a SQLite URI parameter.*file:PATH"):
        create_engine("sqlite://?mode=memory")


@pytest.mark.parametrize("uri", ["", "&uri=true"], ids=["no uri", "uri=true"])
def test_an_unknown_parameter_is_refused(tmp_path: Path, uri: str) -> None:
    """Neither the driver nor SQLite reads it: a misspelt ``mdoe=ro`` left the file writable."""
    database = f"file:{tmp_path / 'x.db'}" if uri else str(tmp_path / "x.db")
    with pytest.raises(SparsewatchError, match="unknown SQLite query parameter 'mdoe'"):
        create_engine(f"sqlite:///{database}?mdoe=ro{uri}")


def test_a_repeated_parameter_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SparsewatchError, match="'mode' is given twice"):
        create_engine(f"sqlite:///file:{tmp_path / 'x.db'}?mode=ro&mode=rw&uri=true")


def test_a_file_uri_without_uri_true_is_refused(tmp_path: Path, monkeypatch) -> None:
    """Without ``uri=true`` SQLite opened (or created) a file named ``file:...`` in the working
    folder, not the file the URI names."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SparsewatchError, match="a file: URI database needs uri=true"):
        create_engine(f"sqlite:///file:{tmp_path / 'x.db'}")
    with pytest.raises(SparsewatchError, match="a file: URI database needs uri=true"):
        create_engine("sqlite:///file:x.db")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["yes", "on", "TRUE"])
def test_uri_true_spelt_otherwise_still_needs_a_file_uri(tmp_path: Path, flag: str) -> None:
    """pysqlite reads ``yes`` and ``on`` as true too: the check of ``true`` and ``1`` alone let
    ``x.db?mode=ro&uri=yes`` create a file literally named ``x.db?mode=ro``."""
    with pytest.raises(SparsewatchError, match="with uri=true the database must be a file: URI"):
        create_engine(f"sqlite:///{tmp_path / 'x.db'}?mode=ro&uri={flag}")
    assert list(tmp_path.iterdir()) == []


def test_a_uri_flag_that_is_neither_true_nor_false_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SparsewatchError, match="uri=maybe is neither true nor false"):
        create_engine(f"sqlite:///{tmp_path / 'x.db'}?uri=maybe")


def _select_one(engine: sa.Engine) -> int:
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT 1")).scalar_one())
    finally:
        engine.dispose()


def test_the_driver_parameters_keep_working_without_a_warning(tmp_path: Path) -> None:
    driver = "timeout=5&check_same_thread=false&detect_types=0&cached_statements=16"
    urls = [
        f"sqlite:///{tmp_path / 'a.db'}?{driver}",
        f"sqlite:///{tmp_path / 'b.db'}?uri=false",
        f"sqlite:///file:{tmp_path / 'c.db'}?{driver}&uri=true",
        f"sqlite:///file:{tmp_path / 'd.db'}?mode=rwc&cache=private&psow=1&uri=true",
        "sqlite:///file:memdb1?mode=memory&cache=shared&uri=true",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (SQLAlchemy's SAWarning for a dropped parameter)
        for url in urls:
            assert _select_one(create_engine(url)) == 1, url


def _busy_timeout_ms(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one())
    finally:
        engine.dispose()


def test_the_urls_timeout_is_the_busy_timeout(tmp_path: Path) -> None:
    """The driver's ``timeout`` parameter sets the busy timeout (sparsewatch's 30 s overrode it
    without a word); without it, 30 s."""
    assert _busy_timeout_ms(f"sqlite:///{tmp_path / 'a.db'}?timeout=2.5") == 2500
    assert _busy_timeout_ms(f"sqlite:///file:{tmp_path / 'b.db'}?timeout=0&uri=true") == 0
    assert _busy_timeout_ms(f"sqlite:///{tmp_path / 'c.db'}") == 30_000


def test_a_writer_waits_out_the_urls_timeout_only(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with Store.open(f"sqlite:///{path}"):
        pass
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        engine = create_engine(f"sqlite:///{path}?timeout=0.2")
        started = time.monotonic()
        writer = engine.connect().execution_options(sw_write=True)
        with pytest.raises(sa.exc.OperationalError, match="locked"), writer, writer.begin():
            pass
        assert time.monotonic() - started < 5  # not 30 s
        engine.dispose()
    finally:
        holder.rollback()
        holder.close()


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_timeout_that_is_not_seconds_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(SparsewatchError, match=f"timeout={value} is not a number of seconds"):
        create_engine(f"sqlite:///{tmp_path / 'a.db'}?timeout={value}")


def test_isolation_level_is_refused_not_overridden(tmp_path: Path) -> None:
    with pytest.raises(SparsewatchError, match="isolation_level is not taken"):
        create_engine(f"sqlite:///{tmp_path / 'a.db'}?isolation_level=DEFERRED")
    assert not (tmp_path / "a.db").exists()


def test_mode_ro_with_uri_true_is_read_only(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with Store.open(f"sqlite:///{path}"):
        pass
    engine = create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    try:
        with pytest.raises(sa.exc.OperationalError, match="readonly"), engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
    finally:
        engine.dispose()


def test_postgresql_query_parameters_are_not_sqlites_to_check() -> None:
    """(libpq's parameters are its own: the check is SQLite's only; nothing connects here.)"""
    engine = create_engine("postgresql+psycopg://u@localhost/db?sslmode=require&mode=ro")
    engine.dispose()


def test_a_file_uri_path_is_read_percent_decoded_as_sqlite_reads_it(
    five_windows: Path, monkeypatch, capsys
) -> None:
    # "a b.db" written as a%20b.db in the URI (a%2520b.db in the URL): the check that a query
    # creates nothing looked for the undecoded name and reported the database missing
    spaced = five_windows.with_name("a b.db")
    five_windows.rename(spaced)
    url = f"sqlite:///file:{spaced.parent}/a%2520b.db?mode=ro&uri=true"
    code, out, err = run_cli(monkeypatch, capsys, "status", "--no-kafka", "--database-url", url)
    assert code == 0 and "windows: 5," in out, err
    # and a name whose undecoded form exists but decoded does not: refused, nothing created
    spaced.rename(spaced.with_name("q%41.db"))
    url = f"sqlite:///file:{spaced.parent}/q%2541.db?uri=true"
    code, out, err = run_cli(monkeypatch, capsys, "status", "--no-kafka", "--database-url", url)
    assert code == 2 and f"no database at {spaced.parent}/qA.db" in err
    assert not (spaced.parent / "qA.db").exists()
