"""Fresh databases, SQLite and PostgreSQL (``sw_review_*``, dropped afterwards), and small windows
with late documents written into them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from sparsewatch.storage.store import Store

from tests.support.storage import novel_document_alerts

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def _urls() -> list[str]:
    """PostgreSQL when a server is configured, and always under CI (failing without one)."""
    with_postgres = os.environ.get("SPARSEWATCH_TEST_DATABASE_URL") or os.environ.get("CI")
    return ["sqlite", "postgresql"] if with_postgres else ["sqlite"]


@pytest.fixture(params=_urls())
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh SQLite file, or a PostgreSQL database ``sw_review_*`` dropped at the end."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'review.db'}"
        return
    admin_url = os.environ.get("SPARSEWATCH_TEST_DATABASE_URL")
    if not admin_url:
        pytest.fail("SPARSEWATCH_TEST_DATABASE_URL is not set: CI must test PostgreSQL")
    name = f"sw_review_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.engine.make_url(admin_url).set(database=name).render_as_string(False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def window(
    store: Store,
    stream: str,
    seq: int,
    start: datetime,
    size: timedelta,
    n: int = 3,
    late: list[tuple[str, int, datetime]] | None = None,
) -> None:
    """One window as the detector writes it (documents, a novel alert, a topic, a snapshot), and
    ``late`` documents (id, own window, event time) with a novel alert each."""
    docs = [
        {
            "stream": stream,
            "doc_id": f"{stream}-{seq}-{i}",
            "event_time": start + timedelta(seconds=i),
            "window_seq": seq,
            "novelty_score": 0.5,
            "novel": i == 0,
            "late": False,
            "text": f"doc {i}",
        }
        for i in range(n)
    ]
    docs += [
        {
            "stream": stream,
            "doc_id": doc_id,
            "event_time": at,
            "window_seq": own,
            "novelty_score": 0.9,
            "novel": True,
            "late": True,
            "text": "late",
        }
        for doc_id, own, at in late or []
    ]
    with store.transaction() as tx:
        tx.upsert_window(stream, seq, start, start + size, n, 0.8, {}, "watermark")
        tx.insert_documents(docs)
        tx.insert_alerts(novel_document_alerts(docs))
        tx.upsert_topics(
            [
                {
                    "stream": stream,
                    "window_seq": seq,
                    "topic_id": 0,
                    "terms": [["a", 1.0]],
                    "strength": 1.0,
                    "emerging": False,
                }
            ]
        )
        tx.put_snapshot(stream, seq, "dictionary", {"A": np.ones((2, 2))}, {}, 1)
