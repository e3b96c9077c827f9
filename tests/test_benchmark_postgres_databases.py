"""The benchmarks' throw-away PostgreSQL databases (``benchmarks/postgres_databases.py``): a
benchmark run leaves none behind on the server, also when it fails or is interrupted, and the
database a user names (``--database-url``) is used as it is."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa

from tests.support.postgres_databases import require_postgres_server

pytestmark = pytest.mark.postgres

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str) -> ModuleType:
    """``benchmarks/<name>.py``, imported as ``python benchmarks/<name>.py`` runs it (with
    ``benchmarks/`` on ``sys.path`` for its imports of the other benchmark modules)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"{name}_for_test", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture
def admin_url(postgres_admin_url: str | None) -> str:
    """The admin URL of a real PostgreSQL server (fails under CI without one, else skips)."""
    return require_postgres_server(postgres_admin_url)


def _databases(admin_url: str) -> set[str]:
    """The names of the databases on the server."""
    engine = sa.create_engine(admin_url)
    try:
        with engine.connect() as conn:
            return set(conn.execute(sa.text("SELECT datname FROM pg_database")).scalars())
    finally:
        engine.dispose()


def _exists(admin_url: str, url: str) -> bool:
    return sa.make_url(url).database in _databases(admin_url)


def test_the_database_is_dropped_after_the_block_with_a_connection_still_open(admin_url):
    helpers = _load("postgres_databases")
    with helpers.postgres_database(admin_url) as url:
        assert sa.make_url(url).host == sa.make_url(admin_url).host
        assert _exists(admin_url, url)
        engine = sa.create_engine(url)
        conn = engine.connect()  # left open, as an interrupted run's writer leaves its own
        conn.execute(sa.text("CREATE TABLE t (x integer)"))
        conn.commit()
    assert not _exists(admin_url, url)
    engine.dispose()


def test_the_database_is_dropped_when_the_run_is_interrupted(admin_url):
    helpers = _load("postgres_databases")
    with pytest.raises(KeyboardInterrupt), helpers.postgres_database(admin_url) as url:
        assert _exists(admin_url, url)
        raise KeyboardInterrupt  # Ctrl-C
    assert not _exists(admin_url, url)


def test_storage_write_leaves_no_database_behind(admin_url, tmp_path, monkeypatch):
    storage_write = _load("storage_write")
    monkeypatch.setattr(storage_write, "RESULTS", tmp_path / "storage_write.json")
    tiny = ["--docs", "20", "--windows", "1", "--terms", "50", "--atoms", "5"]
    monkeypatch.setattr(sys, "argv", ["storage_write.py", *tiny, "--postgres-url", admin_url])
    before = _databases(admin_url)
    storage_write.main()
    results = json.loads((tmp_path / "storage_write.json").read_text())
    assert results["backends"]["postgresql"]["docs_per_s"] > 0  # measured on the server
    assert {n for n in _databases(admin_url) - before if n.startswith("sw_bench_")} == set()


def test_pipeline_throughput_drops_a_run_s_database_when_the_run_ends(admin_url, tmp_path):
    pipeline_throughput = _load("pipeline_throughput")
    databases = pipeline_throughput.run_databases(tmp_path, admin_url)
    with databases["postgresql"](0) as url:
        assert _exists(admin_url, url)
    assert not _exists(admin_url, url)
    with databases["sqlite"](3) as url:  # a file in the run's folder, as before
        assert url == f"sqlite:///{tmp_path / 'bench3.db'}"
    assert set(pipeline_throughput.run_databases(tmp_path, "")) == {"sqlite"}


def test_ingest_throughput_results_database(admin_url, tmp_path):
    """``--postgres-url``: a fresh database on that server, dropped at the end (not the server's
    admin database, which ``--database-url $SPARSEWATCH_TEST_DATABASE_URL`` wrote the tables
    into); ``--database-url``: that database, as it is; neither: a SQLite file, removed."""
    ingest_throughput = _load("ingest_throughput")
    with ingest_throughput.results_database(None, admin_url) as url:
        assert sa.make_url(url).database != sa.make_url(admin_url).database
        assert _exists(admin_url, url)
    assert not _exists(admin_url, url)
    named = f"sqlite:///{tmp_path / 'named.db'}"
    with ingest_throughput.results_database(named, None) as url:
        assert url == named
    with ingest_throughput.results_database(None, None) as url:
        folder = Path(sa.make_url(url).database).parent
        assert url.startswith("sqlite:///") and folder.is_dir()
    assert not folder.exists()
