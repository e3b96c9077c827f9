"""A SQLite database whose document text, alert summary and dead-letter reason are one given text:
what the query commands print under stdout encodings that lack some of its characters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sparsewatch.storage.store import Store

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def database_holding(path: Path, text: str, alert_kind: str = "anomaly") -> str:
    """The URL of a new SQLite database at ``path``: window 0 of stream ``s`` with document
    ``d`` of ``text``, an alert of ``alert_kind`` on it summarised ``text``, and a dead letter of
    reason ``text``."""
    url = f"sqlite:///{path}"
    doc = {"stream": "s", "doc_id": "d", "event_time": T0, "window_seq": 0, "text": text,
           "novelty_score": 0.5}  # fmt: skip
    alert = {"kind": alert_kind, "stream": "s", "subject_id": "d", "score": 0.5,
             "window_seq": 0, "event_time": T0, "summary": text}  # fmt: skip
    dead = {"topic": "t", "partition": 0, "offset": 0, "reason": text, "payload": b"x"}
    with Store.open(url) as store, store.transaction() as tx:
        tx.upsert_window("s", 0, T0, T0 + timedelta(hours=1), 1, None, {}, "idle")
        tx.insert_documents([doc])
        tx.insert_alerts([alert])
        tx.insert_dead_letters([dead])
    return url
