"""Revision 0004: NaN scores an older version stored on PostgreSQL become NULL on upgrade."""

from __future__ import annotations

import math

import sqlalchemy as sa
from sparsewatch.storage import migrate
from sparsewatch.storage.store import Store


def _old_rows(conn: sa.Connection, nan: str) -> None:
    conn.execute(
        sa.text(
            "INSERT INTO documents (stream, doc_id, window_seq, text, novelty_score, "
            f"reconstruction_error, anomaly_score) VALUES "
            f"('news', 'late', 3, 'read before the warm-up ended', {nan}, {nan}, {nan}), "
            "('news', 'scored', 3, 'a scored story', 0.25, 0.5, 1.5)"
        )
    )
    conn.execute(
        sa.text(
            "INSERT INTO windows (stream, window_seq, start_time, end_time, n_documents, "
            f"threshold, timings, closed_by) VALUES ('news', 3, '2026-01-01 00:00:00', "
            f"'2026-01-02 00:00:00', 2, {nan}, '{{}}', 'watermark')"
        )
    )


def _assert_upgraded(database_url: str) -> None:
    with Store.open(database_url) as store:  # opening migrates to the newest revision
        assert store.revision() == migrate.head_revision()
        late, scored = sorted(
            store.documents(streams=["news"], limit=None), key=lambda r: r["doc_id"]
        )
        [window] = store.windows(streams=["news"])
        above = store.documents(min_score=0.1, limit=None)
    assert late["doc_id"] == "late"
    for column in ("novelty_score", "reconstruction_error", "anomaly_score"):
        assert late[column] is None, column
    assert (scored["novelty_score"], scored["reconstruction_error"]) == (0.25, 0.5)
    assert scored["anomaly_score"] == 1.5
    assert window["threshold"] is None
    # NaN sorts above every number on PostgreSQL: the NaN row was listed as scoring above 0.1
    assert [r["doc_id"] for r in above] == ["scored"]


def test_nan_scores_stored_by_an_older_version_are_null_after_the_upgrade(
    postgres_database: tuple[str, str],
) -> None:
    database_url, _ = postgres_database
    engine = sa.create_engine(database_url)
    try:
        migrate.upgrade(engine, "0003")
        with engine.begin() as conn:
            _old_rows(conn, "'NaN'::float8")
            nan_before = conn.execute(
                sa.text("SELECT novelty_score FROM documents WHERE doc_id = 'late'")
            ).scalar_one()
        assert math.isnan(nan_before)  # what the older version left there
    finally:
        engine.dispose()
    _assert_upgraded(database_url)


def test_the_nan_revision_changes_nothing_else(database_url: str) -> None:
    """SQLite never held NaN (it stores NULL): the revision leaves both databases' other rows
    as they were."""
    engine = sa.create_engine(database_url)
    try:
        migrate.upgrade(engine, "0003")
        with engine.begin() as conn:
            _old_rows(conn, "NULL")
    finally:
        engine.dispose()
    _assert_upgraded(database_url)
