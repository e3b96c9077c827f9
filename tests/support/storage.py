"""A database filled as the detector worker fills it, window by window (its documents, in rows or
in columns, and their novel-document alerts), and a fingerprint of every row of it."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import sqlalchemy as sa
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.schema import metadata
from sparsewatch.storage.store import Store

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def dump(
    store: Store,
    leave_out_columns: AbstractSet[str] = frozenset(),
    leave_out_tables: AbstractSet[str] = frozenset(),
) -> dict[str, list[tuple]]:
    """Every row of every table, sorted (a whole-database fingerprint); without the tables
    ``leave_out_tables`` and the columns ``leave_out_columns`` (what differs between two runs).
    ``partition_owners`` is always left out: its tokens are random, one per claim."""
    out = {}
    with store.reading() as conn:
        for table in metadata.sorted_tables:
            if table.name in leave_out_tables or table.name == "partition_owners":
                continue
            columns = [c for c in table.columns if c.name not in leave_out_columns]
            rows = conn.execute(sa.select(*columns)).all()
            out[table.name] = sorted((tuple(r) for r in rows), key=repr)
    return out


def novel_document_alerts(
    docs: list[dict[str, Any]], summary_chars: int | None = None
) -> list[dict]:
    """The ``novel_document`` alert of each novel document of ``docs``, its summary the text (its
    first ``summary_chars`` characters)."""
    return [
        {
            "kind": "novel_document",
            "stream": d["stream"],
            "subject_id": d["doc_id"],
            "score": d["novelty_score"],
            "window_seq": d["window_seq"],
            "event_time": d["event_time"],
            "summary": d["text"][:summary_chars],
        }
        for d in docs
        if d["novel"]
    ]


def document_columns(
    stream: str, seq: int, event_times: list[datetime], rng: np.random.Generator
) -> DocumentColumns:
    """Documents of window ``seq`` of ``stream`` in columns, one an event time: random scores
    (about one in twenty novel) and dominant topics, no atoms, labels or emerging topic."""
    n = len(event_times)
    return DocumentColumns(
        stream=[stream] * n,
        doc_id=[f"{stream}-{seq}-{i}" for i in range(n)],
        event_time=event_times,
        window_seq=np.full(n, seq, dtype=np.int64),
        novelty_score=rng.random(n),
        reconstruction_error=rng.random(n),
        novel=rng.random(n) < 0.05,
        late=np.zeros(n, dtype=bool),
        dominant_topic=rng.integers(0, 10, n),
        emerging_topic=np.full(n, -1),
        top_atoms_indptr=np.zeros(n + 1, dtype=np.int64),
        top_atoms=np.zeros(0, dtype=np.int64),
        labels=[()] * n,
        text=[f"story {i}" for i in range(n)],
    )


def write_window(store: Store, seq: int, n: int = 50, stream: str = "news") -> list[dict]:
    """What the detector worker writes for one window, in one transaction; its documents."""
    rng = np.random.default_rng(seq)
    start = T0 + timedelta(hours=seq)
    docs = [
        {
            "stream": stream,
            "doc_id": f"{stream}-{seq}-{i}",
            "event_time": start + timedelta(seconds=i),
            "window_seq": seq,
            "novelty_score": np.float32(rng.random()),
            "reconstruction_error": float(rng.random()),
            "novel": bool(i % 7 == 0),
            "late": i == 3,
            "dominant_topic": int(i % 4) if i % 5 else None,
            "top_atoms": rng.integers(0, 100, size=3),
            "labels": ["earn"] if i % 2 else [],
            "text": f"document {i} of window {seq} — ünïcode",
        }
        for i in range(n)
    ]
    with store.transaction() as tx:
        tx.upsert_window(
            stream, seq, start, start + timedelta(hours=1), n, 0.8, {"score": 0.01}, "watermark"
        )
        tx.insert_documents(docs)
        tx.insert_alerts(novel_document_alerts(docs, summary_chars=40))
        tx.upsert_topics(
            [
                {
                    "stream": stream,
                    "window_seq": seq,
                    "topic_id": k,
                    "terms": [[f"term{k}{j}", np.float32(1.0 / (j + 1))] for j in range(5)],
                    "strength": 0.1 * k,
                    "emerging": k == 2,
                }
                for k in range(4)
            ]
        )
        tx.put_snapshot(stream, seq, "dictionary", {"A": rng.random((20, 4))}, {"k": 4}, seq)
        tx.put_checkpoint(
            "detector", stream, {"A": np.arange(6.0), "seq": np.array(seq)}, {"window": seq}
        )
        tx.set_partition_offsets("detector", "docs", {0: 100 * (seq + 1), 1: 7})
        tx.insert_dead_letters(
            [
                {
                    "topic": "docs",
                    "partition": 0,
                    "offset": seq,
                    "reason": "bad JSON",
                    "payload": b"\xff{",
                }
            ]
        )
    return docs
