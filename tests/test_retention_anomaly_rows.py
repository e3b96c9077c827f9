"""Retention of the rows the anomaly worker writes, and of many snapshots, on real SQLite and
PostgreSQL databases: a lagging anomaly worker's scores of a pruned window are prunable, the
detector still fills a row the anomaly worker created first, and the snapshots left by earlier
prunes go however many there are (PostgreSQL takes at most 65,535 bind parameters a statement)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import sqlalchemy as sa
from sparsewatch.consumers.anomaly_worker import AnomalyStreamState
from sparsewatch.consumers.score_messages import parse_scored
from sparsewatch.storage import retention
from sparsewatch.storage.schema import snapshots, windows
from sparsewatch.storage.serialization import arrays_to_npz, npz_to_arrays
from sparsewatch.storage.store import Checkpoint, Store

from sparsewatch.config import load_config
from tests.support.anomaly_worker import scores_payload

T0 = datetime(2024, 3, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
FUTURE = datetime(2100, 1, 1, tzinfo=UTC)
N_DOCS = 20


def _event_time(seq: int, i: int) -> datetime:
    return T0 + seq * HOUR + timedelta(seconds=i, milliseconds=250)


def _detector_window(store: Store, seq: int) -> None:
    """Window ``seq`` (``[T0 + seq h, T0 + (seq + 1) h)``) as the detector writes it."""
    docs = [
        {
            "stream": "s",
            "doc_id": f"{seq}-{i}",
            "event_time": _event_time(seq, i),
            "window_seq": seq,
            "novelty_score": 0.5,
            "novel": False,
            "late": False,
            "text": f"doc {i}",
        }
        for i in range(N_DOCS)
    ]
    start = T0 + seq * HOUR
    with store.transaction() as tx:
        tx.upsert_window("s", seq, start, start + HOUR, N_DOCS, 0.8, {}, "watermark")
        tx.insert_documents(docs)


def _scores_message(seq: int, i: int, rng: np.random.Generator) -> bytes:
    """The detector's ``<prefix>.scores`` message of document ``i`` of window ``seq``."""
    atoms = int(rng.integers(0, 4))
    return scores_payload(
        stream="s",
        doc_id=f"{seq}-{i}",
        seq=seq,
        i=i,
        n=N_DOCS,
        timestamp=int(_event_time(seq, i).timestamp() * 1000),
        score=float(rng.uniform(0.2, 1.0)),
        error=float(rng.uniform(0.2, 1.0)),
        code_value=[0.1] * atoms,
        n_terms=12,
    )


def _anomaly_worker_writes(store: Store, seqs: range) -> int:
    """Run the anomaly worker's per-stream state over windows ``seqs`` and perform its store
    calls as its writer does (one transaction per window); the number of documents scored."""
    config = load_config(env={"SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": str(N_DOCS)})
    state = AnomalyStreamState("s", config, None)
    rng = np.random.default_rng(0)
    scored = 0
    offset = 0
    for seq in seqs:
        for i in range(N_DOCS):
            for out in state.add(parse_scored(_scores_message(seq, i, rng)), 0, offset, 0.0):
                with store.transaction() as tx:
                    for name, args in out.calls:
                        getattr(tx, name)(*args)
                        if name == "upsert_anomaly_scores":
                            scored += len(args[0])
            offset += 1
    return scored


def _doc_ids(store: Store) -> set[str]:
    return {d["doc_id"] for d in store.documents(limit=None)}


def test_a_lagging_anomaly_workers_scores_of_a_pruned_window_are_pruned_later(database_url):
    # The detector wrote windows 0..9, `db prune` kept the newest 5; the anomaly worker, behind,
    # then scored windows 0..9: its rows of windows 0..4 have no detector columns, and never
    # will. They used to be key-only rows (no window, no event time) that no prune could ever
    # tell from rows whose detector columns are still coming: they stayed for ever.
    with Store.open(database_url) as store:
        for seq in range(10):
            _detector_window(store, seq)
        store.prune(before=FUTURE, keep_windows=5)
        assert _doc_ids(store) == {f"{s}-{i}" for s in range(5, 10) for i in range(N_DOCS)}
        assert _anomaly_worker_writes(store, range(10)) == 10 * N_DOCS
        behind = {f"{s}-{i}" for s in range(5) for i in range(N_DOCS)}
        rows = {d["doc_id"]: d for d in store.documents(limit=None)}
        assert behind <= set(rows)
        for doc_id in behind:  # what the scores message told: the window and the event time
            seq, i = map(int, doc_id.split("-"))
            row = rows[doc_id]
            assert row["anomaly_score"] is not None and row["novelty_score"] is None
            assert (row["window_seq"], row["event_time"]) == (seq, _event_time(seq, i))
        dry = store.prune(before=FUTURE, keep_windows=5, dry_run=True)
        report = store.prune(before=FUTURE, keep_windows=5)
        assert report.deleted == dry.deleted
        assert report.deleted["documents"] == 5 * N_DOCS
        kept = _doc_ids(store)
        assert kept == {f"{s}-{i}" for s in range(5, 10) for i in range(N_DOCS)}
        # the kept windows' rows have both the detector's and the anomaly worker's columns
        for row in store.documents(limit=None):
            assert row["novelty_score"] == 0.5 and row["anomaly_score"] is not None
            assert row["text"] is not None and row["late"] is False


def test_a_row_the_anomaly_worker_wrote_first_still_gets_the_detectors_columns(database_url):
    # The detector produces a window's scores messages before its transaction commits, so the
    # anomaly worker may write a document first; with the event time and window it now stores,
    # the detector's columns (its own window for a late document) must still be written, once.
    anomaly = {
        "stream": "s",
        "doc_id": "d",
        "anomaly_score": 1.5,
        "anomaly": True,
        "window_seq": 9,  # the detector's window that scored it (late: its own window is 3)
        "event_time": T0 + 3 * HOUR,
    }
    doc = {
        "stream": "s",
        "doc_id": "d",
        "event_time": T0 + 3 * HOUR + timedelta(microseconds=700),
        "window_seq": 3,
        "novelty_score": 0.25,
        "novel": True,
        "late": True,
        "text": "t",
    }
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.upsert_anomaly_scores([anomaly])
        (row,) = store.documents()
        assert (row["window_seq"], row["event_time"], row["late"]) == (9, T0 + 3 * HOUR, None)
        with store.transaction() as tx:
            tx.insert_documents([doc])
        with store.transaction() as tx:  # replays change nothing
            tx.insert_documents([{**doc, "novelty_score": 0.99, "window_seq": 4}])
            tx.upsert_anomaly_scores([{**anomaly, "window_seq": 11, "event_time": FUTURE}])
        (row,) = store.documents()
        assert (row["window_seq"], row["event_time"]) == (3, doc["event_time"])
        assert (row["novelty_score"], row["novel"], row["late"], row["text"]) == (
            0.25,
            True,
            True,
            "t",
        )
        assert (row["anomaly_score"], row["anomaly"]) == (1.5, True)
        # a row the anomaly worker wrote without them (as it did before) gets them later
        with store.transaction() as tx:
            tx.upsert_anomaly_scores(
                [{"stream": "s", "doc_id": "e", "anomaly_score": 0.5, "anomaly": False}]
            )
        with store.transaction() as tx:
            tx.upsert_anomaly_scores([{**anomaly, "doc_id": "e", "anomaly_score": 0.7}])
        with store.transaction() as tx:  # and a rescoring without them keeps them
            tx.upsert_anomaly_scores(
                [{"stream": "s", "doc_id": "e", "anomaly_score": 0.8, "anomaly": False}]
            )
        row = {d["doc_id"]: d for d in store.documents()}["e"]
        assert (row["window_seq"], row["event_time"]) == (9, T0 + 3 * HOUR)
        assert (row["anomaly_score"], row["anomaly"]) == (0.8, False)


def test_a_naive_event_time_for_anomaly_scores_is_refused(database_url):
    row = {"stream": "s", "doc_id": "d", "anomaly_score": 1.0, "anomaly": True}
    with Store.open(database_url) as store:
        for bad in ({"event_time": datetime(2024, 3, 1)}, {"window_seq": "x"}):
            with pytest.raises((ValueError, TypeError)), store.transaction() as tx:
                tx.upsert_anomaly_scores([{**row, **bad}])
        assert store.documents() == []


def test_tens_of_thousands_of_snapshots_left_by_earlier_prunes_go(database_url):
    # An earlier prune with a large keep_snapshots left 33,000 snapshots whose window is gone;
    # one prune deleted them all in one tuple-IN statement: two bind parameters a snapshot, past
    # PostgreSQL's limit of 65,535 ("number of parameters must be between 0 and 65535").
    n = 33_000
    with Store.open(database_url) as store:
        _detector_window(store, n + 10)  # the stream's one window, newer than every snapshot
        blob = arrays_to_npz({"A": np.ones(1)})
        rows = [
            {
                "stream": "s",
                "window_seq": seq,
                "model_kind": kind,
                "shapes": {},
                "blob": blob,
                "meta": {},
                "vocabulary_version": 1,
                "created_at": T0 + timedelta(seconds=seq),
            }
            for seq in range(n // 2)
            for kind in ("dictionary", "topics")
        ]
        with store.engine.begin() as conn:
            conn.execute(sa.insert(snapshots), rows)
        dry = store.prune(before=FUTURE, keep_windows=1, keep_snapshots=2, dry_run=True)
        report = store.prune(before=FUTURE, keep_windows=1, keep_snapshots=2)
        assert report.deleted == dry.deleted
        assert report.deleted["snapshots"] == n - 4
        with store.reading() as conn:
            left = conn.execute(sa.select(snapshots.c.window_seq, snapshots.c.model_kind)).all()
            assert conn.execute(sa.select(sa.func.count()).select_from(windows)).scalar_one() == 1
        last = n // 2 - 1
        assert sorted(left) == sorted(
            (seq, kind) for seq in (last - 1, last) for kind in ("dictionary", "topics")
        )


def test_snapshots_are_deleted_in_batches_that_keep_the_kept_ones(database_url, monkeypatch):
    # Batches smaller than the snapshots to go, both at a window's pruning and for snapshots
    # whose window an earlier prune deleted: the newest of each kind stay, every other goes.
    monkeypatch.setattr(retention, "SNAPSHOT_BATCH", 3)
    with Store.open(database_url) as store:
        for seq in range(6):
            _detector_window(store, seq)
            with store.transaction() as tx:
                for kind in ("dictionary", "topics"):
                    tx.put_snapshot("s", seq, kind, {"A": np.ones(2)}, {}, 1)
        store.prune(before=FUTURE, keep_windows=1, keep_snapshots=4)  # windows 0..4 go
        with store.reading() as conn:
            assert len(conn.execute(sa.select(snapshots)).all()) == 8
        dry = store.prune(before=FUTURE, keep_windows=1, keep_snapshots=1, dry_run=True)
        report = store.prune(before=FUTURE, keep_windows=1, keep_snapshots=1)
        assert report.deleted["snapshots"] == dry.deleted["snapshots"] == 6
        with store.reading() as conn:
            left = conn.execute(sa.select(snapshots.c.window_seq, snapshots.c.model_kind)).all()
        assert sorted(left) == [(5, "dictionary"), (5, "topics")]


def _constant_window(state: AnomalyStreamState, seq: int) -> None:
    """A window of unexplained documents (score 1, empty code): no feature varies."""
    for i in range(N_DOCS):
        message = scores_payload(
            stream="s",
            doc_id=f"{seq}-{i}",
            seq=seq,
            i=i,
            n=N_DOCS,
            timestamp=1000 * seq,
            score=1.0,
            error=1.0,
            code_value=[],
            n_terms=12,
        )
        state.add(parse_scored(message), 0, 0, 0.0)


def test_the_constant_features_warning_is_not_repeated_after_a_restore(caplog):
    # A stream is checkpointed and leaves memory when idle, and is restored when it comes back:
    # the warning that nothing can be scored was logged again at each restore.
    config = load_config(env={"SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": str(N_DOCS)})
    state = AnomalyStreamState("s", config, None)
    warning = "every feature is constant"
    with caplog.at_level("WARNING"):
        for seq in range(2):
            _constant_window(state, seq)
        for seq in range(2, 5):
            st, meta = state.checkpoint()  # stored as the writer stores it
            st = npz_to_arrays(arrays_to_npz(st))
            state = AnomalyStreamState("s", config, Checkpoint("g", "s", st, meta, T0))
            _constant_window(state, seq)
    assert state.model is None
    assert caplog.text.count(warning) == 1
    # a checkpoint written before the flag was kept restores as not warned
    st, meta = state.checkpoint()
    del st["warned_constant"]
    caplog.clear()
    with caplog.at_level("WARNING"):
        _constant_window(AnomalyStreamState("s", config, Checkpoint("g", "s", st, meta, T0)), 5)
    assert caplog.text.count(warning) == 1
