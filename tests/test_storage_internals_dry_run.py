"""``db prune --dry-run`` and ``db forget-group --dry-run`` change nothing, the schema included:
on a database an older sparsewatch set up they migrated it to the newest revision (opening the
store upgrades it) before counting. A dry run of such a database is now a one-line error that
asks for ``sparsewatch db upgrade`` and leaves the database at its revision."""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa
from sparsewatch.storage import migrate
from sparsewatch.storage.engine import create_engine
from sparsewatch.storage.store import Store

from tests.support.cli import run_cli

OLD = "0001"


def _old_database(url: str) -> None:
    """A database at revision 0001 holding a consumer group's state."""
    engine = create_engine(url)
    try:
        migrate.upgrade(engine, OLD)
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO partition_offsets (group_id, topic, partition, next_offset) "
                    "VALUES ('g', 't', 0, 5)"
                )
            )
    finally:
        engine.dispose()


def _state(url: str) -> tuple[str | None, list[str], list[tuple]]:
    engine = create_engine(url)
    try:
        columns = [c["name"] for c in sa.inspect(engine).get_columns("documents")]
        with engine.connect() as conn:
            offsets = [tuple(r) for r in conn.execute(sa.text("SELECT * FROM partition_offsets"))]
        return migrate.current_revision(engine), columns, offsets
    finally:
        engine.dispose()


DRY_RUNS = {
    "prune": ("db", "prune", "--before", "1d", "--dry-run"),
    "prune-json": ("db", "prune", "--dead-letters-before", "1d", "--dry-run", "--json"),
    "forget-group": ("db", "forget-group", "g", "--no-kafka", "--dry-run"),
}


@pytest.mark.parametrize("args", DRY_RUNS.values(), ids=DRY_RUNS.keys())
def test_a_dry_run_does_not_migrate_an_older_schema(database_url, monkeypatch, capsys, args):
    _old_database(database_url)
    before = _state(database_url)
    assert before[0] == OLD and "emerging_topic" not in before[1]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--database-url", database_url)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert f"schema revision '{OLD}'" in err and "sparsewatch db upgrade" in err
    assert _state(database_url) == before


def test_dry_runs_of_a_current_database_and_the_real_runs_still_work(
    database_url, monkeypatch, capsys
):
    _old_database(database_url)
    url = ("--database-url", database_url)
    code, out, err = run_cli(monkeypatch, capsys, "db", "prune", "--before", "1d", *url)
    assert (code, err) == (0, "") and out.startswith("deleted 0 windows")
    assert _state(database_url)[0] == migrate.head_revision()  # a real run migrates
    code, out, err = run_cli(monkeypatch, capsys, *DRY_RUNS["forget-group"], *url)
    assert (code, err) == (0, "") and out.startswith("would forget g: 0 checkpoints, 1 resume")
    with Store.open(database_url) as store:
        assert store.partition_offsets("g", "t") == {0: 5}
        with store.transaction() as tx:
            tx.put_checkpoint("g", "s", {"x": np.arange(2.0)}, {})
    code, out, err = run_cli(monkeypatch, capsys, "db", "forget-group", "g", "--no-kafka", *url)
    assert (code, err) == (0, "") and out.startswith("forgot g: 1 checkpoints, 1 resume")


def test_a_dry_run_of_a_missing_database_creates_nothing(tmp_path, monkeypatch, capsys):
    path = tmp_path / "none" / "x.db"
    code, out, err = run_cli(
        monkeypatch, capsys, *DRY_RUNS["prune"], "--database-url", f"sqlite:///{path}"
    )
    assert (code, out) == (2, "") and "no database at" in err
    assert not path.parent.exists()
