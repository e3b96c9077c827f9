"""Shared fixtures: real data, a real Kafka broker, real SQLite and PostgreSQL databases.

Kafka, in this order: ``KAFKA_BOOTSTRAP_SERVERS`` if set; else a testcontainers Kafka when a Docker
daemon answers; else the project's own local KRaft broker (``sparsewatch kafka``), started for the
session. Databases: SQLite always; PostgreSQL as well: the server of
``SPARSEWATCH_TEST_DATABASE_URL`` if set, else a testcontainers PostgreSQL when a Docker daemon
answers. There is no mock broker and no mock database.
"""

from __future__ import annotations

import csv
import functools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

# The helpers the test modules share (tests/support/) keep pytest's assertion messages, as in the
# test modules they came from (pytest rewrites the asserts of test modules only).
pytest.register_assert_rewrite("tests.support")

from sparsewatch.replay import readers  # noqa: E402

from tests.support.postgres_databases import (  # noqa: E402
    postgres_database,
    require_postgres_server,
)

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as a terminal gives it: tests send SIGINT to check that a replay or a worker stops
    cleanly, and a test run started in the background of a non-interactive shell inherits an
    ignored SIGINT (Python then installs no KeyboardInterrupt handler), which made those
    interrupts do nothing."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (Reuters-21578, ODDS); the test skips with a reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent (only CI and developers have it)")
    return SHARED_DATA


@functools.cache
def _docker_answers() -> bool:
    """Whether a Docker daemon answers (asked once a session)."""
    import shutil
    import subprocess

    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _database_urls() -> list[str]:
    """SQLite, and PostgreSQL when a server is configured or Docker answers; under CI always
    PostgreSQL too (its cases then fail without a server instead of not being collected)."""
    urls = ["sqlite"]
    if os.environ.get("SPARSEWATCH_TEST_DATABASE_URL") or os.environ.get("CI") or _docker_answers():
        urls.append("postgresql")
    return urls


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str | None]:
    """Admin URL of a real PostgreSQL server, or None when there is none: the server of
    ``SPARSEWATCH_TEST_DATABASE_URL`` if set, else a testcontainers PostgreSQL for the session
    when a Docker daemon answers."""
    env = os.environ.get("SPARSEWATCH_TEST_DATABASE_URL")
    if env:
        yield env
        return
    if _docker_answers():
        from testcontainers.community.postgres import PostgresContainer

        with PostgresContainer("postgres:16", driver="psycopg") as container:
            yield container.get_connection_url()
        return
    yield None


@pytest.fixture(params=_database_urls())
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, or a new schema-less PostgreSQL database (dropped
    when the test ends)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sparsewatch.db'}"
        return
    admin_url = request.getfixturevalue("postgres_admin_url")
    if admin_url is None:
        pytest.fail("SPARSEWATCH_TEST_DATABASE_URL is not set: CI must test PostgreSQL")
    with postgres_database(admin_url) as url:
        yield url


@pytest.fixture(name="postgres_database")
def postgres_database_fixture(postgres_admin_url: str | None) -> Iterator[tuple[str, str]]:
    """A fresh PostgreSQL database (dropped when the test ends) and the server's admin URL, for
    tests that need PostgreSQL itself (an outage made with ALTER DATABASE). Without a server the
    test fails under CI and is skipped, with the reason, elsewhere."""
    admin_url = require_postgres_server(postgres_admin_url)
    with postgres_database(admin_url) as url:
        yield url, admin_url


class PostgresOutage:
    """Make the database of a :func:`postgres_database` unavailable: no new connections, the open
    ones ended (:meth:`begin`), until :meth:`end` (also called when the test ends)."""

    def __init__(self, url: str, admin_url: str) -> None:
        import sqlalchemy as sa

        self.name = sa.engine.make_url(url).database
        self.admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")

    def _execute(self, sql: str, **params: str) -> None:
        import sqlalchemy as sa

        with self.admin.connect() as conn:
            conn.execute(sa.text(sql), params)

    def begin(self) -> None:
        self._execute(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false')
        self._execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = :name AND pid <> pg_backend_pid()",
            name=self.name,
        )

    def end(self) -> None:
        self._execute(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true')


@pytest.fixture
def postgres_outage(postgres_database: tuple[str, str]) -> Iterator[PostgresOutage]:
    """A :class:`PostgresOutage` of the ``postgres_database`` fixture's database."""
    outage = PostgresOutage(*postgres_database)
    try:
        yield outage
    finally:
        outage.end()
        outage.admin.dispose()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory):
    """Bootstrap address of a real broker; never skipped: no broker is an error."""
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if env:
        from sparsewatch.kafka_local import wait_for_broker

        wait_for_broker(env, timeout=60)
        yield env
        return
    if _docker_answers():
        from testcontainers.community.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    from sparsewatch.kafka_local import LocalKafka

    broker = LocalKafka(tmp_path_factory.mktemp("kafka"), port=0)
    bootstrap = broker.up()
    try:
        yield bootstrap
    finally:
        broker.down()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test."""
    import re
    import uuid

    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:60]
    return f"t-{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def small_field_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The CSV reader's field limit lowered to 1,000 characters (the process-wide one
    restored)."""
    before = csv.field_size_limit()
    monkeypatch.setattr(readers, "_CSV_FIELD_CHARS", 1000)
    csv.field_size_limit(1000)
    yield 1000
    csv.field_size_limit(before)
