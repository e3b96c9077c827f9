"""The documents of an announced emerging topic: stored with it (schema revision 0002), listed by
``sparsewatch documents --topic ID``, and an existing database upgraded without losing rows."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sparsewatch.storage import migrate
from sparsewatch.storage.store import Store

from sparsewatch.cli import main
from tests.support.cli import run_cli

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def _doc(n: int, dominant: int | None, emerging: int | None) -> dict:
    return {
        "stream": "news",
        "doc_id": f"doc-{n}",
        "event_time": T0 + timedelta(minutes=n),
        "window_seq": 7,
        "novelty_score": 0.5,
        "dominant_topic": dominant,
        "emerging_topic": emerging,
        "text": f"story {n}",
    }


def test_documents_of_a_topic_are_listed_by_the_cli(database_url, monkeypatch, capsys) -> None:
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            topics = [(3, None), (3, 12), (4, 12), (12, None), (5, 13)]
            tx.insert_documents([_doc(n, d, e) for n, (d, e) in enumerate(topics)])
        stored = {r["doc_id"]: r["emerging_topic"] for r in store.documents(limit=None)}
        assert stored == {"doc-0": None, "doc-1": 12, "doc-2": 12, "doc-3": None, "doc-4": 13}
    argv = ["sparsewatch", "documents", "--topic", "12", "--format", "json"]
    monkeypatch.setattr(sys, "argv", [*argv, "--database-url", database_url])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0
    rows = json.loads(capsys.readouterr().out)
    # the emerging topic's documents, and a document whose MOR-NMF topic has that id
    assert [(r["doc_id"], r["dominant_topic"], r["emerging_topic"]) for r in rows] == [
        ("doc-1", 3, 12),
        ("doc-2", 4, 12),
        ("doc-3", 12, None),
    ]


def test_a_database_at_revision_0001_is_upgraded_with_its_documents(database_url) -> None:
    engine = sa.create_engine(database_url)
    try:
        migrate.upgrade(engine, "0001")
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO documents (stream, doc_id, window_seq, dominant_topic, text) "
                    "VALUES ('news', 'old', 3, 2, 'an old story')"
                )
            )
        assert migrate.current_revision(engine) == "0001"
    finally:
        engine.dispose()
    with Store.open(database_url) as store:  # opening migrates to the newest revision
        assert store.revision() == migrate.head_revision()
        [row] = store.documents(limit=None)
    assert (row["doc_id"], row["window_seq"], row["dominant_topic"]) == ("old", 3, 2)
    assert row["text"] == "an old story" and row["emerging_topic"] is None


@pytest.mark.parametrize("given", ["topic-12", " Topic-12 "])
def test_a_topic_is_also_taken_as_its_alert_names_it(
    database_url, monkeypatch, capsys, given: str
) -> None:
    """``--topic topic-12``, the subject of the emerging_topic alert copied, was refused as no
    integer; it is topic 12. ``topic-x`` is refused naming what was given."""
    with Store.open(database_url) as store, store.transaction() as tx:
        tx.insert_documents([_doc(0, 3, 12), _doc(1, 4, None)])
    args = ("documents", "--format", "json", "--database-url", database_url)
    code, out, err = run_cli(monkeypatch, capsys, *args, "--topic", given)
    assert code == 0 and [r["doc_id"] for r in json.loads(out)] == ["doc-0"], err
    code, out, err = run_cli(monkeypatch, capsys, *args, "--topic", "topic-x")
    assert code == 2 and "'topic-x' is not a topic number (ID or topic-ID)" in err
