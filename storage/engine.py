"""Engines for SQLite (the default, a file in WAL mode) and PostgreSQL (psycopg 3).

SQLite: the parent folder is created; every connection runs in WAL mode with foreign keys on,
``synchronous=FULL`` (a committed window survives a power cut, so the Kafka offsets committed after
it never get ahead of the database) and a 30 s busy timeout (the URL's ``timeout`` parameter, in
seconds, when given). pysqlite's own transaction handling is
switched off and transactions are begun explicitly: ``BEGIN IMMEDIATE`` for writers (connections
with the ``sw_write`` execution option), so two writers queue on the lock instead of deadlocking on
a read-to-write upgrade; plain ``BEGIN`` for readers, which WAL never blocks.

Switching a new (rollback-journal) file to WAL needs its exclusive lock, and SQLite answers
"database is locked" at once, without waiting out the busy timeout, when another connection holds
the write lock meanwhile (several processes opening one new database): the switch is retried until
the busy timeout has passed.

An in-memory SQLite database lives in one connection: its engine holds exactly one
(:class:`OneAtATimePool`), shared by every thread (a worker's loop and its writer thread) and used
by one checkout at a time, so a read never sees or interleaves with another thread's open write
transaction (SQLAlchemy's default gave each thread a connection of its own, hence an empty
database of its own). File and PostgreSQL engines keep their usual pools, without the lock.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

from sparsewatch.errors import SparsewatchError

BUSY_TIMEOUT_S = 30.0
WRITE_OPTION = "sw_write"
_WAL_RETRY_S = 0.01
# PostgreSQL URLs without a driver, as libpq writes them (SQLAlchemy knows no "postgres" dialect)
_LIBPQ_SCHEMES = ("postgresql", "postgres")
# The query parameters of a SQLite URL that SQLAlchemy's pysqlite dialect hands the driver
# (sqlite3.connect's arguments; see its create_connect_args), but isolation_level: sparsewatch
# begins its transactions itself (refused, :func:`_refuse_misread_sqlite_url`). timeout is the
# busy timeout, in seconds (sparsewatch's default: BUSY_TIMEOUT_S).
_DRIVER_PARAMETERS = frozenset(
    {"uri", "timeout", "detect_types", "check_same_thread", "cached_statements"}
)
# SQLite's own URI parameters (https://www.sqlite.org/uri.html), read from a file: URI only when
# the driver opens it with uri=true; SQLAlchemy passes them on in the URI then.
_URI_PARAMETERS = frozenset({"vfs", "mode", "cache", "psow", "nolock", "immutable", "modeof"})


class OneAtATimePool(StaticPool):
    """One connection for every thread, checked out by one at a time: a checkout waits until the
    connection is returned (its transaction committed or rolled back). A thread checking out a
    second connection while it holds one is refused (SQLite cannot open a second transaction on
    the connection; waiting for itself would hang)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turn = threading.Lock()
        self._holder: int | None = None

    def _do_get(self) -> ConnectionPoolEntry:
        if self._holder == threading.get_ident():
            raise sa.exc.InvalidRequestError(
                "this thread already uses the in-memory SQLite database's only connection"
            )
        self._turn.acquire()
        self._holder = threading.get_ident()
        try:
            return super()._do_get()
        except BaseException:
            self._release()
            raise

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        self._release()

    def _release(self) -> None:
        self._holder = None
        self._turn.release()


def _enable_wal(cursor: sqlite3.Cursor, busy_timeout: float) -> None:
    """``PRAGMA journal_mode=WAL``, retried while the database is locked, for at most the busy
    timeout (SQLite's busy handler does not cover the read-to-exclusive upgrade of the switch)."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(_WAL_RETRY_S)


def _unicode_lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _sqlite_events(engine: sa.Engine, busy_timeout: float) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        # SQLite's own lower() folds only ASCII letters: the queries' case-insensitive filters
        # then missed "Zürich" for "ZÜRICH" (storage.text_match.fold_case: the same folding on
        # both databases)
        dbapi_connection.create_function("lower", 1, _unicode_lower, deterministic=True)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={round(busy_timeout * 1000)}")
        try:
            _enable_wal(cursor, busy_timeout)
        except sqlite3.OperationalError as exc:
            if "readonly" not in str(exc):
                raise
            # A WAL database in a folder this user may not write: SQLite said only "attempt to
            # write a readonly database", also to a query that writes nothing.
            raise sqlite3.OperationalError(
                f"{exc}: {engine.url.database} is in WAL mode, whose -wal and -shm files SQLite "
                "creates beside it even to read it: its folder and files must be writable"
            ) from exc
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _postgres_events(engine: sa.Engine) -> None:
    @event.listens_for(engine, "handle_error")
    def _lost_session(context: sa.engine.ExceptionContext) -> BaseException | None:
        """A lost session as an ``OperationalError``: most are already (the server shut down,
        the connection broken), but the server's end of a session idle in a transaction
        (``idle_in_transaction_session_timeout``, set by ``StoreTx.check_owners``) is SQLSTATE
        25P03, an ``InternalError``, which the retries took for a defect and stopped on."""
        error = context.sqlalchemy_exception
        if not context.is_disconnect or not isinstance(error, sa.exc.DBAPIError):
            return None
        if isinstance(error, sa.exc.OperationalError) or error.orig is None:
            return None
        return sa.exc.OperationalError(
            error.statement, error.params, error.orig, connection_invalidated=True
        )


def parse_url(url: str | sa.engine.URL) -> sa.engine.URL:
    """``url`` parsed, with a password that holds an unencoded ``@`` kept whole: the host follows
    the last ``@``, as in :func:`urllib.parse.urlsplit` (SQLAlchemy alone made ``u:se@cret@db``
    password ``se`` of host ``cret@db``, which showed half the password in error messages).
    A URL that does not parse is a :class:`SparsewatchError` that does not repeat it (it may
    hold a password that cannot be masked), not SQLAlchemy's ``ArgumentError`` or ``ValueError``
    (a port that is not a number)."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SparsewatchError(f"invalid database URL: {reason}") from None
    if parsed.password is not None and parsed.host and "@" in parsed.host:
        rest, host = parsed.host.rsplit("@", 1)
        parsed = parsed.set(password=f"{parsed.password}@{rest}", host=host)
    return parsed


def create_engine(url: str) -> sa.Engine:
    """An engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``, also written
    ``postgresql://...`` or ``postgres://...`` as libpq takes them); a SQLite path may start with
    ``~`` (the user's home); another database or driver is a :class:`SparsewatchError` (not a
    missing module's traceback)."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = sqlite_file(parsed)  # refuses a query SQLite would not read as written
        if path is not None:
            # SQLite opens the path as written: "~" is expanded for it too, not only for mkdir
            path.parent.mkdir(parents=True, exist_ok=True)
            parsed = parsed.set(database=str(path))
        memory = is_in_memory_sqlite(parsed)  # one connection for every thread, in turns
        busy_timeout = _busy_timeout(parsed)
        connect_args: dict[str, Any] = {"timeout": busy_timeout}
        if memory:
            connect_args["check_same_thread"] = False
        engine = sa.create_engine(
            parsed, connect_args=connect_args, poolclass=OneAtATimePool if memory else None
        )
        _sqlite_events(engine, busy_timeout)
        return engine
    if parsed.drivername in _LIBPQ_SCHEMES:  # libpq's spellings: the driver sparsewatch ships
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername != "postgresql+psycopg":
        raise SparsewatchError(
            f"unsupported database {mask_url(url)}: sparsewatch stores results in SQLite "
            "(sqlite:///path.db) or PostgreSQL (postgresql+psycopg://user:password@host/db)"
        )
    connect_args = {} if "connect_timeout" in parsed.query else {"connect_timeout": 10}
    try:
        engine = sa.create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "psycopg":
            raise
        raise SparsewatchError(
            "PostgreSQL needs the psycopg driver, an extra of sparsewatch: "
            "pip install 'sparsewatch[postgres]'"
        ) from None
    _postgres_events(engine)
    return engine


def _refuse_misread_sqlite_url(parsed: sa.engine.URL) -> None:
    """A :class:`SparsewatchError` for a SQLite URL whose query would not be read as written.

    pysqlite takes a few parameters of its own (:data:`_DRIVER_PARAMETERS`); SQLite's URI
    parameters (:data:`_URI_PARAMETERS`) reach SQLite only with ``uri=true`` and a ``file:``
    database. Anything else SQLAlchemy drops with no more than a warning on stderr:
    ``sqlite:////x.db?mode=ro`` opened the file read-write, and ``sparsewatch db prune`` deleted
    from it. So a SQLite URI parameter without ``uri=true``, a name neither reads (a misspelt
    ``mdoe=ro`` was as silently ignored with ``uri=true``), a parameter given twice (it became a
    tuple's text in the URI) and a ``file:`` database without ``uri=true`` (a file named
    ``file:x.db`` in the working folder) are refused. So is ``uri=true`` with a plain path:
    SQLAlchemy hands SQLite ``/x.db?mode=ro`` as the name, which SQLite reads as a URI only after
    ``file:``, so it created a file literally named ``x.db?mode=ro`` (empty, and the worker's
    results went there). ``isolation_level`` is refused too: sparsewatch begins its transactions
    itself (``BEGIN IMMEDIATE`` for writers), so the driver's setting was overridden without a
    word; and a ``timeout`` that is not a number of seconds >= 0 (:func:`_busy_timeout`)."""
    shown = mask_url(parsed.render_as_string(hide_password=False))
    query = parsed.query
    repeated = sorted(name for name, value in query.items() if isinstance(value, tuple))
    if repeated:
        raise SparsewatchError(f"{shown}: the query parameter {repeated[0]!r} is given twice")
    if "isolation_level" in query:
        raise SparsewatchError(
            f"{shown}: isolation_level is not taken: sparsewatch begins its own transactions "
            "(BEGIN IMMEDIATE to write, BEGIN to read; SQLite's are serializable)"
        )
    _busy_timeout(parsed, shown)
    uri = _uri_flag(query.get("uri"), shown)
    unknown = sorted(set(query) - _DRIVER_PARAMETERS - _URI_PARAMETERS)
    if unknown:
        raise SparsewatchError(
            f"{shown}: unknown SQLite query parameter {', '.join(map(repr, unknown))} (it would "
            f"be ignored): SQLite's driver takes {', '.join(sorted(_DRIVER_PARAMETERS))}, and a "
            f"file: URI with uri=true also {', '.join(sorted(_URI_PARAMETERS))}"
        )
    database = parsed.database or ""
    uri_only = [name for name in query if name in _URI_PARAMETERS]
    if not uri and uri_only:
        path = Path(database).expanduser().absolute() if database not in ("", ":memory:") else None
        example = "&".join([f"{name}={query[name]}" for name in uri_only] + ["uri=true"])
        what = "is a SQLite URI parameter" if len(uri_only) == 1 else "are SQLite URI parameters"
        raise SparsewatchError(
            f"{shown}: {', '.join(uri_only)} {what}, read only from a file: URI with uri=true "
            "(without it SQLite never sees them: mode=ro left the database writable); write "
            f"sqlite:///file:{path or 'PATH'}?{example}"
        )
    if not uri and database.startswith("file:"):
        raise SparsewatchError(
            f"{shown}: a file: URI database needs uri=true (without it, SQLite opens a file "
            f"literally named {database!r}), e.g. sqlite:///{database}?uri=true"
        )
    if uri and not database.startswith("file:"):
        raise SparsewatchError(
            f"{shown}: with uri=true the database must be a file: URI, "
            "e.g. sqlite:///file:/path/x.db?mode=ro&uri=true"
        )


def _busy_timeout(parsed: sa.engine.URL, shown: str | None = None) -> float:
    """The busy timeout of a SQLite URL, in seconds: its ``timeout`` parameter (the driver's
    name for it), else :data:`BUSY_TIMEOUT_S`. A :class:`SparsewatchError` for one that is not a
    finite number >= 0 (sparsewatch's 30 s overrode the URL's before, without a word)."""
    value = parsed.query.get("timeout")
    if value is None:
        return BUSY_TIMEOUT_S
    try:
        seconds = float(str(value))
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds < math.inf:
        where = shown or mask_url(parsed.render_as_string(hide_password=False))
        raise SparsewatchError(f"{where}: timeout={value} is not a number of seconds >= 0")
    return seconds


def _uri_flag(value: str | tuple[str, ...] | None, shown: str) -> bool:
    """The ``uri`` parameter as pysqlite reads it (SQLAlchemy's ``asbool``: ``yes`` and ``on``
    are true too, which the check of ``true`` and ``1`` alone let past); another value is a
    :class:`SparsewatchError` (SQLAlchemy's ``ValueError``, "String is not true/false")."""
    if value is None:
        return False
    try:
        return bool(sa.util.asbool(value))
    except ValueError:
        raise SparsewatchError(f"{shown}: uri={value} is neither true nor false") from None


def sqlite_file(url: str | sa.engine.URL) -> Path | None:
    """The file of a SQLite ``url``, ``~`` expanded; ``None`` for in-memory and ``file:`` URI
    databases and for other backends."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        _refuse_misread_sqlite_url(parsed)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    return None if database.startswith("file:") else Path(database).expanduser()


def sqlite_uri_file(url: str | sa.engine.URL) -> Path | None:
    """The file of a SQLite ``file:`` URI database (``sqlite:///file:/path/x.db?uri=true``);
    ``None`` for any other URL and for ``mode=memory``. The path is read as SQLite reads it:
    percent-escapes decoded (``a%20b.db`` is ``a b.db``), ``~`` not expanded (it was here, and
    undecoded, so the check that a query creates nothing looked at another file than SQLite
    opened: an existing database was reported missing, and a missing one created)."""
    parsed = parse_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or not database.startswith("file:"):
        return None
    if parsed.query.get("mode") == "memory":
        return None
    rest = database.removeprefix("file:")
    if rest.startswith("//"):  # file://localhost/path or file:///path
        rest = "/" + rest[2:].partition("/")[2]
    return Path(urllib.parse.unquote(rest)) if rest else None


def sqlite_url(path: str | Path) -> str:
    """The URL of the SQLite file at ``path``, quoted: a ``?``, ``#`` or ``%`` in a folder name
    is part of the path (written into ``sqlite:///...`` as it is, ``?x=1`` became the URL's
    query and the database landed in another folder)."""
    return sa.engine.URL.create("sqlite", database=str(path)).render_as_string(hide_password=False)


def is_in_memory_sqlite(url: str | sa.engine.URL) -> bool:
    """Whether ``url`` is an in-memory SQLite database (one connection's, invisible to others),
    also written as a URI: ``file::memory:?uri=true`` or ``file:name?mode=memory&uri=true``."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        return False
    database = parsed.database or ""
    if database in ("", ":memory:"):
        return True
    return database.startswith("file:") and (
        database.startswith("file::memory:") or parsed.query.get("mode") == "memory"
    )


def write_connection(engine: sa.Engine) -> sa.Connection:
    """A connection whose transactions take the write lock at BEGIN (SQLite; a no-op elsewhere)."""
    return engine.connect().execution_options(**{WRITE_OPTION: True})


def mask_url(url: str) -> str:
    """``url`` with its password hidden, for messages: the user's, and query parameters such
    as libpq's ``password`` and ``sslpassword`` (they were printed)."""
    try:
        parsed = parse_url(url)
    except SparsewatchError:
        return "<invalid database URL>"
    secret = {k: "***" for k in parsed.query if "password" in k.lower()}
    shown = parsed.update_query_dict(secret).render_as_string(hide_password=True)
    return shown.replace("%2A%2A%2A", "***")  # (the query's quoting of the mask)
