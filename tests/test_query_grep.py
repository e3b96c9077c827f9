"""``alerts --grep`` / ``documents --grep`` on real SQLite and PostgreSQL: a piece of text in any
case, non-ASCII letters included, with ``%`` and ``_`` as plain characters."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sparsewatch.storage.alert_follower import AlertFollower
from sparsewatch.storage.store import Store

from tests.support.cli import run_cli
from tests.support.storage import novel_document_alerts

T0 = datetime(2024, 3, 1, tzinfo=UTC)
TEXTS = [
    "Earthquake hits ZÜRICH at dawn",
    "earthquake aftershocks near zürich",
    "Markets: 100% of_shares traded",
    "quiet day in Basel",
]


@pytest.fixture
def populated(database_url: str) -> str:
    docs = [
        {
            "stream": "news",
            "doc_id": f"d{i}",
            "event_time": T0 + timedelta(minutes=i),
            "window_seq": 0,
            "novelty_score": 0.5,
            "novel": True,
            "late": False,
            "text": text,
        }
        for i, text in enumerate(TEXTS)
    ]
    with Store.open(database_url) as store, store.transaction() as tx:
        tx.upsert_window("news", 0, T0, T0 + timedelta(hours=1), len(docs), None, {}, "idle")
        tx.insert_documents(docs)
        tx.insert_alerts(novel_document_alerts(docs))
    return database_url


def ids(monkeypatch, capsys, url: str, command: str, text: str) -> set[str]:
    code, out, err = run_cli(monkeypatch, capsys, command, "--grep", text, "--format", "json",
                             "--database-url", url)  # fmt: skip
    assert code == 0 and err == "", err
    key = "subject_id" if command == "alerts" else "doc_id"
    return {row[key] for row in json.loads(out)}


@pytest.mark.parametrize("command", ["alerts", "documents"])
def test_grep_matches_a_piece_of_text_in_any_case(populated, command, monkeypatch, capsys):
    def found(text: str) -> set[str]:
        return ids(monkeypatch, capsys, populated, command, text)

    assert found("EARTHQUAKE") == {"d0", "d1"}
    assert found("zürich") == found("ZÜRICH") == {"d0", "d1"}  # not only ASCII letters
    assert found("100% of_") == {"d2"}
    assert found("1_0") == set() and found("%of") == set()  # no LIKE wildcards
    assert found("basel") == {"d3"}
    assert found("tokyo") == set()


def test_the_alert_tail_filters_by_text(populated):
    with Store.open(populated) as store, store.reading() as conn:
        follower = AlertFollower(text="Zürich")
        assert {r["subject_id"] for r in follower.start(conn, backlog=10)} == {"d0", "d1"}
        assert follower.poll(conn) == []
