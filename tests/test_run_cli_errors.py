"""``sparsewatch run`` against an unusable database or broker: one line on stderr, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import run_process


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    settings = {"SPARSEWATCH_DATA_DIR": str(tmp_path), **env}
    return run_process("run", "detector", timeout=180, **settings)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


def test_an_in_memory_sqlite_database_is_refused(tmp_path: Path) -> None:
    """Each thread got its own empty database: the workers retried 'no such table' for two
    minutes, then failed."""
    proc = _run(tmp_path, SPARSEWATCH_DATABASE_URL="sqlite://")
    assert proc.returncode == 2
    assert "in-memory SQLite database" in _one_line(proc)


def test_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    url = "postgresql+psycopg://u:secret@127.0.0.1:1/x"
    proc = _run(tmp_path, SPARSEWATCH_DATABASE_URL=url)
    assert proc.returncode == 2
    line = _one_line(proc)
    assert line.startswith("error: cannot open database postgresql+psycopg://u:***@127.0.0.1:1/x")
    assert "secret" not in proc.stderr


def test_an_unreachable_broker_is_one_line(tmp_path: Path) -> None:
    """librdkafka logged one line per connection attempt (hundreds) before a bare error."""
    proc = _run(tmp_path, SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1")
    assert proc.returncode == 2
    assert _one_line(proc).startswith("error: cannot reach Kafka at 127.0.0.1:1: ")


def test_a_missing_worker_argument_is_one_line(tmp_path: Path) -> None:
    """click listed the choices one per line (four lines on stderr)."""
    full = {**os.environ, "SPARSEWATCH_DATA_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "sparsewatch", "run"], env=full, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert _one_line(proc) == (
        "error: Missing argument '{detector|anomaly|all}'. Choose from: detector, anomaly, all "
        "(see 'python -m sparsewatch run --help')"
    )


def test_global_options_after_the_command_say_where_they_go(tmp_path: Path) -> None:
    """``sparsewatch run all --config f.toml`` said only "No such option '--config'"."""
    full = {**os.environ, "SPARSEWATCH_DATA_DIR": str(tmp_path)}
    full.pop("SPARSEWATCH_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "sparsewatch", "run", "all", "--config", "f.toml"],
        env=full,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert _one_line(proc) == (
        "error: No such option '--config'. (--config goes before the command: "
        "sparsewatch --config ...)"
    )


def test_a_role_without_temporary_tables_is_told_at_start(tmp_path: Path, postgres_database):
    """On PostgreSQL the documents are written through a temporary staging table: a role denied
    TEMPORARY got its error at the first window, not at start."""
    import sqlalchemy as sa

    url, admin_url = postgres_database
    database = sa.engine.make_url(url).database
    role = f"sw_notemp_{database[-8:]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    owner = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
        with owner.connect() as conn:  # the schema exists; the role may use it, not stage in it
            conn.exec_driver_sql(f'REVOKE TEMPORARY ON DATABASE "{database}" FROM PUBLIC')
            conn.exec_driver_sql(f'GRANT ALL ON SCHEMA public TO "{role}"')
        role_url = sa.engine.make_url(url).set(username=role, password=None)
        proc = _run(
            tmp_path,
            SPARSEWATCH_DATABASE_URL=role_url.render_as_string(hide_password=False),
            SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1",  # never reached
        )
        assert proc.returncode == 2
        line = _one_line(proc)
        assert line.startswith("error: cannot write results to postgresql+psycopg://")
        assert f"the role '{role}' may not create temporary tables" in line
        assert f'GRANT TEMPORARY ON DATABASE "{database}" TO "{role}"' in line
    finally:
        owner.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
        admin.dispose()
