"""A window's results as columns (DocumentColumns, ScoreMessages): the same rows and messages as a
dict and a JSON message per document, stored alike on real SQLite and PostgreSQL, and smaller."""

from __future__ import annotations

import json
import tracemalloc
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.consumers.detector_core import build_models, process_window, score_late
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.score_messages import ScoreMessages, parse_scored, representation
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.consumers.windowing import Buffered, ClosedWindow
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.store import Store

from sparsewatch.config import DetectorConfig

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def _rows(n: int, stream: str = "s") -> list[dict]:
    rng = np.random.default_rng(n)
    return [
        {
            "stream": stream,
            "doc_id": f"d{i}",
            "event_time": T0 + timedelta(seconds=i, microseconds=7),
            "window_seq": 3,
            "novelty_score": None if i % 5 == 0 else float(rng.random()),
            "reconstruction_error": float("nan") if i % 6 == 0 else np.float32(rng.random()),
            "novel": i % 4 == 0,
            "late": i == 2,
            "dominant_topic": None if i % 3 == 0 else i % 7,
            "emerging_topic": 0 if i == 1 else None,
            "top_atoms": list(range(i % 4)),
            "labels": ["earn", "acq"][: i % 3],
            "text": f"document {i} — ünïcode",
        }
        for i in range(n)
    ]


def _normalised(rows: list[dict]) -> list[dict]:
    """What the store makes of dict rows: NaN as NULL, numbers as Python numbers."""
    out = []
    for r in rows:
        row = dict(r)
        for key in ("novelty_score", "reconstruction_error"):
            v = row[key]
            row[key] = None if v is None or np.isnan(v) else float(v)
        out.append(row)
    return out


def test_rows_round_trip_through_columns():
    rows = _rows(40)
    assert DocumentColumns.from_rows(rows).rows() == _normalised(rows)


def test_bind_keeps_the_first_row_of_a_key_in_key_order():
    rows = _rows(12)
    dup = {**rows[4], "novelty_score": 0.123}  # the later copy of d4: dropped
    cols = DocumentColumns.from_rows([rows[9], *rows, dup])
    bound = cols.bind()
    assert bound["doc_id"] == sorted(r["doc_id"] for r in rows)
    by_id = dict(zip(bound["doc_id"], bound["novelty_score"], strict=True))
    assert by_id["d4"] == _normalised([rows[4]])[0]["novelty_score"]
    assert by_id["d0"] is None  # NaN / None is NULL
    assert [len(v) for v in bound.values()] == [12] * 13  # the documents table's 13 columns


def test_columns_of_different_lengths_are_refused():
    cols = DocumentColumns.from_rows(_rows(5))
    with pytest.raises(ValueError, match="document columns of 5 documents"):
        DocumentColumns(**{**cols.__dict__, "text": cols.text[:4]})
    with pytest.raises(KeyError, match="lacks novelty_score"):
        DocumentColumns.from_rows([{k: v for k, v in _rows(1)[0].items() if k != "novelty_score"}])
    with pytest.raises(ValueError, match="has no event_time"):
        DocumentColumns.from_rows([{**_rows(1)[0], "event_time": None}])


def test_columns_and_dict_rows_store_the_same_documents(database_url):
    rows = _rows(60)
    store = Store.open(database_url)
    try:
        with store.transaction() as tx:
            tx.insert_documents(rows)
            tx.insert_documents(DocumentColumns.from_rows(_rows(60, stream="t")))
        stored = {s: store.documents(streams=[s], limit=None) for s in ("s", "t")}
    finally:
        store.dispose()
    assert len(stored["s"]) == 60
    strip = [{k: v for k, v in r.items() if k != "stream"} for r in stored["s"]]
    assert strip == [{k: v for k, v in r.items() if k != "stream"} for r in stored["t"]]


def _windows(n_docs: int, size: int) -> list[ClosedWindow]:
    docs = generate_stream(n_docs, kind="tweet", seed=5)
    out = []
    for k in range(n_docs // size):
        items = [
            Buffered(
                Document(d["id"], d["text"], parse_timestamp_ms(d["timestamp"]), labels=("x",)),
                0,
                i,
            )
            for i, d in enumerate(docs[k * size : (k + 1) * size])
        ]
        times = [b.doc.timestamp_ms for b in items]
        out.append(ClosedWindow("s", k, min(times), max(times) + 1, items, "count"))
    return out


def test_a_window_gives_one_row_and_one_message_per_document_with_its_results():
    config = DetectorConfig(warmup_documents=200, initial_atoms=20)
    models = build_models(config)
    warm, w = _windows(600, 300)
    process_window(models, warm, config)
    comp = process_window(models, w, config)
    rows = comp.documents.rows()
    assert [r["doc_id"] for r in rows] == [b.doc.id for b in w.items]
    assert [r["event_time"] for r in rows] == [b.doc.event_time for b in w.items]
    assert all(r["labels"] == ["x"] and r["window_seq"] == 1 and not r["late"] for r in rows)
    assert sum(r["novel"] for r in rows) == 15  # the top 5 %
    novel = {r["doc_id"]: r["novelty_score"] for r in rows if r["novel"]}
    alerts = [a for a in comp.alerts if a["kind"] == "novel_document"]
    assert all(a["score"] == novel[a["subject_id"]] for a in alerts)  # each story's lead's score
    stories = [[a["subject_id"], *a["related_ids"]] for a in alerts]
    assert sorted(d for story in stories for d in story) == sorted(novel)
    assert all(a["score"] == max(novel[d] for d in s) for a, s in zip(alerts, stories, strict=True))

    codes = comp.messages.codes
    assert len(comp.messages) == len(rows)
    for i, (key, value) in enumerate(comp.messages):
        msg = json.loads(value)
        parsed = parse_scored(value)  # what the anomaly worker reads
        assert key == "s" and (parsed.stream, parsed.doc_id) == ("s", rows[i]["doc_id"])
        assert (parsed.window_seq, parsed.index, parsed.n) == (1, i, len(rows))
        assert parsed.timestamp_ms == w.items[i].doc.timestamp_ms
        assert parsed.features == representation(msg)
        assert msg["score"] == pytest.approx(rows[i]["novelty_score"], abs=0)
        assert msg["novel"] == rows[i]["novel"]
        row = codes[i]
        assert msg["code_index"] == row.indices.tolist()
        assert msg["code_value"] == row.data.astype(float).tolist()
        assert rows[i]["top_atoms"] == [
            int(a) for a in row.indices[np.argsort(-row.data, kind="stable")][:3]
        ]
        assert msg["n_terms"] == len(w.items[i].doc.text.split())


def test_late_rows_carry_the_window_of_their_event_time():
    config = DetectorConfig(warmup_documents=200, initial_atoms=20)
    models = build_models(config)
    (w,) = _windows(300, 300)
    before = score_late(models, "s", w.items[:4], size_ms=3_600_000)[0].rows()
    assert all(r["novelty_score"] is None and r["late"] for r in before)  # no model yet
    process_window(models, w, config)
    rows = score_late(models, "s", w.items[:4], size_ms=3_600_000)[0].rows()
    assert [r["window_seq"] for r in rows] == [b.doc.timestamp_ms // 3_600_000 for b in w.items[:4]]
    assert all(r["late"] and r["novelty_score"] is not None for r in rows)
    unwindowed = score_late(models, "s", w.items[:4], None)[0].rows()
    assert [r["window_seq"] for r in unwindowed] == [-1] * 4


def test_a_windows_results_take_a_fraction_of_per_document_dicts_and_messages():
    """20,000 documents: the columns and the unencoded messages hold under 200 bytes a document
    beyond the documents themselves, a third of a dict per row and a JSON message per document
    (what the worker held before)."""
    n = 20_000
    rng = np.random.default_rng(0)
    items = [
        Buffered(Document(f"tweet-{i:07d}", f"text {i} " * 8, 1_700_000_000_000 + i), 0, i)
        for i in range(n)
    ]
    codes = sp.random(n, 1500, density=8 / 1500, random_state=0, format="csr", dtype=np.float32)
    scores = rng.random(n)
    tracemalloc.start()
    cols = DocumentColumns(
        stream=["s"] * n,
        doc_id=[b.doc.id for b in items],
        event_time=[b.doc.event_time for b in items],
        window_seq=np.zeros(n, dtype=np.int64),
        novelty_score=scores,
        reconstruction_error=scores.copy(),
        novel=scores > 0.95,
        late=np.zeros(n, dtype=bool),
        dominant_topic=np.zeros(n, dtype=np.int64),
        emerging_topic=np.full(n, -1),
        top_atoms_indptr=np.arange(0, 3 * n + 1, 3),
        top_atoms=np.zeros(3 * n, dtype=np.int64),
        labels=[b.doc.labels for b in items],
        text=[b.doc.text for b in items],
    )
    messages = ScoreMessages(
        "s",
        0,
        cols.doc_id,
        np.array([b.doc.timestamp_ms for b in items]),
        scores,
        scores,
        cols.novel,
        codes,
        np.full(n, 9),
    )
    held, _ = tracemalloc.get_traced_memory()
    as_dicts = cols.rows()
    as_json = list(messages)
    held_before, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert held / n < 200, held / n  # the codes themselves (given) are not counted
    assert (held_before - held) / n > 3 * held / n  # what a dict and JSON per document hold
    assert len(as_dicts) == len(as_json) == n
