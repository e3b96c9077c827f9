"""``db prune`` against a worker writing the documents it deletes, on PostgreSQL: no deadlock over
a late document (stored in its own, older window, written and scored in the call of a later one),
a late document a worker holds is left for a later prune instead of waited for, and a batch that
does lose a deadlock is run again instead of failing ``db prune`` partway."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sparsewatch.storage.schema import documents
from sparsewatch.storage.store import Store, StoreTx

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
BEFORE = EPOCH + 100 * HOUR


def _doc(doc_id: str, window: int, late: bool = False) -> dict:
    return {
        "stream": "s",
        "doc_id": doc_id,
        "event_time": EPOCH + window * HOUR + timedelta(minutes=1),
        "window_seq": window,
        "novelty_score": 0.1,
        "late": late,
    }


def _score(doc_id: str, window: int) -> dict:
    return {
        "stream": "s",
        "doc_id": doc_id,
        "anomaly_score": 0.9,
        "anomaly": True,
        "window_seq": window,
    }


def _setup(store: Store, windows: tuple[int, ...], docs: list[dict]) -> None:
    """Duration windows of an hour (window ``w`` covers hour ``w``) and their documents."""
    with store.transaction() as tx:
        for w in windows:
            tx.upsert_window("s", w, EPOCH + w * HOUR, EPOCH + (w + 1) * HOUR, 1, None, {}, "x")
        tx.insert_documents(docs)


def _doc_ids(store: Store) -> list[str]:
    with store.engine.connect() as conn:
        return sorted(conn.execute(sa.select(documents.c.doc_id)).scalars())


def _run(results: dict[str, str], name: str, action: Callable[[], object]) -> threading.Thread:
    def target() -> None:
        try:
            action()
            results[name] = "ok"
        except Exception as exc:  # the outcome is what the test checks
            results[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def _wait_for_lock_waiters(engine: sa.Engine, n: int, timeout: float = 20.0) -> None:
    """Wait until ``n`` sessions of the database wait for a row lock."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + timeout
    while True:
        with engine.connect() as conn:
            if conn.execute(query).scalar_one() >= n:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {n} sessions waiting for a lock after {timeout} s")
        time.sleep(0.05)


@contextmanager
def _locked(engine: sa.Engine, doc_id: str) -> Iterator[sa.Connection]:
    """A transaction holding document ``doc_id``'s row lock, committed at the end."""
    with engine.connect() as conn, conn.begin():
        conn.execute(
            sa.select(documents.c.doc_id).where(documents.c.doc_id == doc_id).with_for_update()
        )
        yield conn


@pytest.mark.parametrize("anomaly_waits_s", [0.3, 1.5])
def test_prune_and_an_anomaly_worker_do_not_deadlock_over_a_late_document(
    postgres_database: tuple[str, str], anomaly_waits_s: float
) -> None:
    """``z-late`` is stored in its own window 3 but was scored in window 7, so the anomaly worker
    writes it in its call for window 7, after ``a7`` (key order). Pruning locked window 3's
    documents first: it held ``z-late`` and waited for ``a7``, which the anomaly worker held while
    it waited for ``z-late``. PostgreSQL aborted one of the two: the anomaly worker's transaction
    when its wait began first (0.3 s), ``db prune`` when pruning waited longer than its
    ``deadlock_timeout`` (1 s) before the cycle closed (1.5 s)."""
    url, _ = postgres_database
    with Store.open(url) as store:
        late = _doc("z-late", 3, late=True)
        _setup(store, (3, 5, 7, 9), [late, _doc("m", 5), _doc("a7", 7), _doc("n9", 9)])
        results: dict[str, str] = {}
        with _locked(store.engine, "m"):  # holds pruning at window 5, after window 3's documents
            pruning = _run(results, "prune", lambda: store.prune(before=BEFORE, keep_windows=1))
            _wait_for_lock_waiters(store.engine, 1)

            def anomaly() -> None:
                with store.transaction() as tx:  # the anomaly worker's call for window 7
                    tx.upsert_anomaly_scores([_score("a7", 7), _score("z-late", 7)])

            scoring = _run(results, "anomaly", anomaly)
            time.sleep(anomaly_waits_s)
        pruning.join(60)
        scoring.join(60)
        assert results == {"prune": "ok", "anomaly": "ok"}
        # z-late went, with its window, if pruning came first; else it is an orphan for the next
        store.prune(before=BEFORE, keep_windows=1)
        assert _doc_ids(store) == ["n9"]


def test_prune_leaves_a_late_document_a_worker_holds_instead_of_waiting(
    postgres_database: tuple[str, str],
) -> None:
    """Pruning never waits for a late document: it cannot know the order a worker locks it in.
    One held stays, an orphan of a pruned window, and goes with a later prune."""
    url, _ = postgres_database
    with Store.open(url) as store:
        _setup(store, (3, 7, 9), [_doc("z-late", 3, late=True), _doc("a7", 7), _doc("n9", 9)])
        results: dict[str, str] = {}
        with store.engine.connect() as worker, worker.begin():
            # a worker's transaction that wrote the late document, still open
            StoreTx(worker).upsert_anomaly_scores([_score("z-late", 9)])
            pruning = _run(results, "prune", lambda: store.prune(before=BEFORE, keep_windows=1))
            pruning.join(20)
            finished = not pruning.is_alive()
        pruning.join(60)
        assert finished, "db prune waited for the late document the worker held"
        assert results == {"prune": "ok"}
        assert _doc_ids(store) == ["n9", "z-late"]
        report = store.prune(before=BEFORE, keep_windows=1)
        assert report.deleted["documents"] == 1
        assert _doc_ids(store) == ["n9"]


def test_a_prune_batch_that_loses_a_deadlock_is_run_again(
    postgres_database: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A writer that locks documents in another order than pruning (``a7`` before ``m``) makes a
    deadlock that PostgreSQL resolves by aborting pruning's transaction (pruning waits first, so
    its ``deadlock_timeout`` ends first): the batch is rolled back and run again once the writer
    is done, and counted once; ``db prune`` used to fail with "deadlock detected"."""
    url, _ = postgres_database
    with Store.open(url) as store:
        _setup(store, (5, 7, 9), [_doc("m", 5), _doc("a7", 7), _doc("n9", 9)])
        results: dict[str, str] = {}
        reports = []
        caplog.set_level(logging.WARNING, logger="sparsewatch.consumers.retry")
        with _locked(store.engine, "a7") as writer:
            pruning = _run(
                results,
                "prune",
                lambda: reports.append(store.prune(before=BEFORE, keep_windows=1)),
            )
            _wait_for_lock_waiters(store.engine, 1)  # pruning holds m, waits for a7

            def lock_m() -> None:
                writer.execute(
                    sa.select(documents.c.doc_id).where(documents.c.doc_id == "m").with_for_update()
                )

            writing = _run(results, "writer", lock_m)
            writing.join(60)
        pruning.join(60)
        assert results == {"writer": "ok", "prune": "ok"}
        assert "deadlock detected" in caplog.text  # retried
        assert reports[0].deleted["windows"] == 2
        assert reports[0].deleted["documents"] == 2
        assert _doc_ids(store) == ["n9"]
