"""How fast the query commands answer on a LARGE results database (SQLite file and PostgreSQL).

Builds a database with the store's own bulk writes (``StoreTx.insert_documents`` with
:class:`~sparsewatch.storage.document_columns.DocumentColumns`, ``insert_alerts``, windows,
topics, snapshots, dead letters): ``--streams`` streams of ``--windows`` windows in all of
``--docs`` documents each, a novel_document alert for 5% of the documents and an anomaly alert for
another 5%, 10 topics a window, a snapshot every 10 windows, ``--dead-letters`` dead letters with
numbered reasons (about 80,000 distinct; ``--distinct-reasons``: every one distinct, as the
duplicates of a corpus replayed twice are). ``created_at`` is each window's close (the workers'
clock runs with the stream).
Then times each query command's typical invocation (median of ``--repeat``) and prints the query
plan of its SQL (EXPLAIN QUERY PLAN / EXPLAIN). Baseline in the same run: the index of
revision 0003 (``documents.window_seq``) dropped, ``documents --window`` timed again, and one
more 1,000-document window's insert (the detector's write) timed with and without it in
alternation (``--insert-rounds`` paired rounds: the index's cost to the writer).

    python benchmarks/query_scale.py [--backend sqlite|postgresql|both] [--windows 2000]
        [--docs 500] [--dead-letters 200000] [--distinct-reasons] [--output FILE]
        [--database-url URL [--measure-only]]

PostgreSQL: a fresh database on the server of ``SPARSEWATCH_TEST_DATABASE_URL`` (dropped at the
end). ``--database-url``: build into that (empty) database instead and keep it, so that a later
run with ``--measure-only`` times the queries again on the same data (before and after a change
of the query code) without the build, the window-index baseline or the inserts. Results:
``--output`` (JSON) when given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import sparsewatch.storage.store as store_module
import sqlalchemy as sa
from postgres_databases import postgres_database
from sparsewatch.storage.alert_follower import AlertFollower
from sparsewatch.storage.alert_queries import fetch_alerts
from sparsewatch.storage.dead_letter_queries import (
    count_dead_letters,
    dead_letter_reasons,
    fetch_dead_letters,
)
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.document_queries import fetch_documents
from sparsewatch.storage.snapshot_queries import fetch_snapshots
from sparsewatch.storage.status_queries import stream_status
from sparsewatch.storage.store import Store
from sparsewatch.storage.window_queries import fetch_topics

T0 = datetime(2024, 1, 1, tzinfo=UTC)
WORDS = np.array(
    [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
)
REASONS = (
    "not JSON: Expecting value: line 1 column {n} (char {n})",
    "duplicate of offset {n}",
    "missing field 'text'",
    "message of {n} bytes exceeds the limit",
    "timestamp {n} is not a time",
)
DISTINCT_REASON = "duplicate of the document at partition {partition}, offset {offset}"


class Clock:
    """The store's clock (``created_at``), set to the simulated stream's time."""

    now = T0

    def __call__(self) -> datetime:
        return self.now


def document_columns(stream: str, seq: int, start: datetime, n: int, rng: Any) -> DocumentColumns:
    novel = rng.random(n) < 0.05
    return DocumentColumns(
        stream=[stream] * n,
        doc_id=[f"{stream}-w{seq}-d{i}" for i in range(n)],
        event_time=[start + timedelta(seconds=3600 * i / n) for i in range(n)],
        window_seq=np.full(n, seq, dtype=np.int64),
        novelty_score=rng.random(n),
        reconstruction_error=rng.random(n),
        novel=novel,
        late=rng.random(n) < 0.01,
        dominant_topic=rng.integers(0, 10, n),
        emerging_topic=np.where(rng.random(n) < 0.02, 10, -1),
        top_atoms_indptr=np.arange(0, 3 * n + 1, 3, dtype=np.int64),
        top_atoms=rng.integers(0, 200, 3 * n),
        labels=[()] * n,
        text=[" ".join(rng.choice(WORDS, 16)) for _ in range(n)],
    )


def write_window(
    store: Store, clock: Clock, stream: str, seq: int, n: int, rng: Any, snapshot: bool
) -> None:
    start = T0 + timedelta(hours=seq)
    clock.now = start + timedelta(hours=1, seconds=5)
    cols = document_columns(stream, seq, start, n, rng)
    scores = cols.novelty_score
    alerts = []
    for kind, picked in (
        ("novel_document", np.flatnonzero(cols.novel)),
        ("anomaly", np.flatnonzero(rng.random(n) < 0.05)),
    ):
        alerts += [
            {
                "kind": kind,
                "stream": stream,
                "subject_id": cols.doc_id[i],
                "score": float(scores[i]) * (10 if kind == "anomaly" else 1),
                "window_seq": seq,
                "event_time": cols.event_time[i],
                "summary": cols.text[i][:80],
            }
            for i in picked.tolist()
        ]
    with store.transaction() as tx:
        tx.upsert_window(stream, seq, start, start + timedelta(hours=1), n, 0.9, {}, "watermark")
        tx.insert_documents(cols)
        tx.insert_alerts(alerts)
        tx.upsert_topics(
            [
                {
                    "stream": stream,
                    "window_seq": seq,
                    "topic_id": k,
                    "terms": [[str(w), 0.1] for w in WORDS[:8]],
                    "strength": float(rng.random()),
                    "emerging": k == 10,
                }
                for k in range(11)
            ]
        )
        if snapshot:
            arrays = {"dictionary": rng.random((200, 50)).astype(np.float32)}
            tx.put_snapshot(stream, seq, "l1_dictionary", arrays, {"window_seq": seq}, 1)
        tx.put_checkpoint("bench.detector", stream, {"seq": np.array([seq])}, {})
        tx.set_partition_offsets("bench.detector", "docs", {0: seq * n})


def build(store: Store, args: argparse.Namespace) -> dict[str, float]:
    rng = np.random.default_rng(0)
    clock = Clock()
    original = store_module._now
    store_module._now = clock
    streams = [f"stream{s}" for s in range(args.streams)]
    t = time.perf_counter()
    try:
        per_stream = args.windows // len(streams)
        for seq in range(per_stream):
            for stream in streams:
                write_window(store, clock, stream, seq, args.docs, rng, seq % 10 == 0)
        t_docs = time.perf_counter() - t
        batch = 5000
        for first in range(0, args.dead_letters, batch):
            clock.now = T0 + timedelta(hours=per_stream * first / max(args.dead_letters, 1))
            rows = []
            for offset in range(first, min(first + batch, args.dead_letters)):
                reason = REASONS[offset % len(REASONS)].format(n=offset * 7 % 100_000)
                if args.distinct_reasons:
                    reason = DISTINCT_REASON.format(partition=offset % 4, offset=offset // 4)
                rows.append(
                    {
                        "topic": "docs",
                        "partition": offset % 4,
                        "offset": offset,
                        "reason": reason,
                        "payload": b"x" * 40,
                    }
                )
            store.insert_dead_letters(rows)
    finally:
        store_module._now = original
    if store.engine.dialect.name == "postgresql":  # as autovacuum does; nothing runs
        with store.engine.connect() as conn:  # ANALYZE on SQLite (no planner statistics)
            conn.exec_driver_sql("ANALYZE")
            conn.commit()
    return {"documents_s": t_docs, "total_s": time.perf_counter() - t}


def plan(conn: sa.Connection, sql: str, params: Any) -> list[str]:
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params).all()
        return [str(r[-1]) for r in rows]
    rows = conn.exec_driver_sql("EXPLAIN " + sql, params).all()
    return [r[0] for r in rows]


def cases(store: Store, now: datetime) -> dict[str, Callable[[sa.Connection], Any]]:
    return {
        "alerts (newest 50)": lambda c: fetch_alerts(c, limit=50),
        "alerts --kind anomaly": lambda c: fetch_alerts(c, kinds=["anomaly"], limit=50),
        "alerts --since 2h": lambda c: fetch_alerts(c, since=now - timedelta(hours=2), limit=50),
        "alerts --stream stream1": lambda c: fetch_alerts(c, streams=["stream1"], limit=50),
        "alerts --min-score 9.9": lambda c: fetch_alerts(c, min_score=9.9, limit=50),
        "alerts --grep zeta": lambda c: fetch_alerts(c, text="zeta alpha", limit=50),
        "alerts --grep omega (none)": lambda c: fetch_alerts(c, text="omega", limit=50),
        "alerts --by event": lambda c: fetch_alerts(c, time_field="event", limit=50),
        "alerts --by event --kind anomaly": lambda c: fetch_alerts(
            c, time_field="event", kinds=["anomaly"], limit=50
        ),
        "documents (first 50)": lambda c: fetch_documents(c, limit=50),
        "documents --window 300": lambda c: fetch_documents(c, window_seq=300, limit=50),
        "documents --novel": lambda c: fetch_documents(c, novel_only=True, limit=50),
        "documents --topic 10": lambda c: fetch_documents(c, topic=10, limit=50),
        "documents --grep omega (none)": lambda c: fetch_documents(c, text="omega", limit=50),
        "documents --stream stream1": lambda c: fetch_documents(c, streams=["stream1"], limit=50),
        "documents --stream s1 --window 300": lambda c: fetch_documents(
            c, streams=["stream1"], window_seq=300, limit=50
        ),
        "topics": lambda c: fetch_topics(c, n_terms=8, limit=50),
        "topics --emerging": lambda c: fetch_topics(c, emerging_only=True, limit=50),
        "status": lambda c: stream_status(c),
        "status dead letters count": lambda c: count_dead_letters(c),
        "dead-letters (newest 50)": lambda c: fetch_dead_letters(c, limit=50),
        "dead-letters --summary": lambda c: dead_letter_reasons(c),
        "dead-letters --summary --since 2d": lambda c: dead_letter_reasons(
            c, since=now - timedelta(days=2)
        ),
        "dead-letters --reason omega (none)": lambda c: fetch_dead_letters(
            c, reason="omega", limit=50
        ),
        "snapshots list": lambda c: fetch_snapshots(c, limit=50),
        "follow poll": follow_poll,
        "follow poll --kind anomaly": lambda c: follow_poll(c, kinds=["anomaly"]),
        "follow look": follow_look(store),
        "follow look --kind anomaly": follow_look(store, kinds=["anomaly"]),
        "follow look --grep omega (none)": follow_look(store, text="omega"),
    }


def follow_poll(conn: sa.Connection, **filters: Any) -> Any:
    follower = AlertFollower(**filters)
    follower.start(conn, 50)
    return follower.poll(conn)


def follow_look(store: Store, **filters: Any) -> Callable[[sa.Connection], Any]:
    """One look of a running ``alerts --follow`` (started here, untimed): what it costs every
    ``--interval`` seconds."""
    follower = AlertFollower(**filters)
    with store.reading() as conn:
        follower.start(conn, 50)
    return follower.poll


def measure(store: Store, repeat: int, only: tuple[str, ...] | None = None) -> dict[str, Any]:
    with store.reading() as conn:
        now = fetch_alerts(conn, limit=1)[0]["created_at"]
    out: dict[str, Any] = {}
    captured: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        captured.append((statement, parameters))

    for name, run in cases(store, now).items():
        if only is not None and name not in only:
            continue
        times = []
        for _ in range(repeat):
            with store.reading() as conn:
                t = time.perf_counter()
                result = run(conn)
                times.append(time.perf_counter() - t)
        sa.event.listen(store.engine, "before_cursor_execute", capture)
        captured.clear()
        with store.reading() as conn:
            run(conn)
        sa.event.remove(store.engine, "before_cursor_execute", capture)
        plans = []
        with store.reading() as conn:
            for sql, params in captured:
                if sql.lstrip().upper().startswith("SELECT") and "pg_collation" not in sql:
                    plans.append(plan(conn, sql, params))
        n = len(result) if hasattr(result, "__len__") else result
        out[name] = {"median_s": statistics.median(times), "rows": n, "plans": plans}
        print(f"{name:40s} {statistics.median(times) * 1000:9.1f} ms  rows={n}", flush=True)
    return out


# The index of revision 0003 and the queries it serves: the baseline drops it
WINDOW_INDEX = "ix_documents_window_seq"
WINDOW_QUERIES = ("documents --window 300",)


def set_window_index(store: Store, present: bool) -> None:
    store.engine.dispose()  # no pooled connection keeps the schema it read before
    with store.engine.begin() as conn:
        if present:
            conn.exec_driver_sql(
                f"CREATE INDEX IF NOT EXISTS {WINDOW_INDEX} ON documents (window_seq)"
            )
        else:
            conn.exec_driver_sql(f"DROP INDEX IF EXISTS {WINDOW_INDEX}")


def insert_window_times(store: Store, repeat: int, docs: int = 1000) -> dict[str, Any]:
    """One more ``docs``-document window's insert (the detector's write), with and without the
    window index in alternation (paired rounds): medians and the median paired ratio."""
    rng = np.random.default_rng(1)
    times: dict[bool, list[float]] = {True: [], False: []}
    for k in range(repeat):
        for present in (True, False) if k % 2 == 0 else (False, True):
            set_window_index(store, present)
            seq = 10**6 + 2 * k + present
            cols = document_columns("stream0", seq, T0, docs, rng)
            ids = [f"x{seq}-{d}" for d in cols.doc_id]
            cols = DocumentColumns(**{**cols.__dict__, "doc_id": ids})
            t = time.perf_counter()
            with store.transaction() as tx:
                tx.insert_documents(cols)
            times[present].append(time.perf_counter() - t)
    set_window_index(store, True)
    ratios = [a / b for a, b in zip(times[True], times[False], strict=True)]
    return {
        "with_index_median_s": statistics.median(times[True]),
        "without_index_median_s": statistics.median(times[False]),
        "paired_ratio_median": statistics.median(ratios),
        "rounds": repeat,
    }


def run_backend(url: str, args: argparse.Namespace) -> dict[str, Any]:
    store = Store.open(url)
    try:
        if args.measure_only:
            return {"queries": measure(store, args.repeat)}
        built = build(store, args)
        print(f"built in {built['total_s']:.0f} s", flush=True)
        result = {"build": built, "queries": measure(store, args.repeat)}
        print("-- baseline: without the window index (revision 0002)", flush=True)
        set_window_index(store, False)
        result["queries_without_window_index"] = measure(store, args.repeat, WINDOW_QUERIES)
        set_window_index(store, True)
        inserts = insert_window_times(store, args.insert_rounds)
        result["insert_1000_documents"] = inserts
        print(
            "insert of one 1000-document window: "
            f"{inserts['with_index_median_s']:.4f} s with the window index, "
            f"{inserts['without_index_median_s']:.4f} s without "
            f"(paired ratio {inserts['paired_ratio_median']:.3f})",
            flush=True,
        )
        if args.plans:
            for name, r in result["queries"].items():
                print(f"--- {name}")
                for p in r["plans"]:
                    print("\n".join("    " + line for line in p))
        return result
    finally:
        store.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--windows", type=int, default=2000)
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--dead-letters", type=int, default=200_000)
    parser.add_argument(
        "--distinct-reasons", action="store_true", help="every dead letter's reason distinct"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--insert-rounds", type=int, default=9)
    parser.add_argument("--plans", action="store_true", help="print the query plans")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--database-url", default=None, help="build into this database, kept")
    parser.add_argument("--measure-only", action="store_true", help="time --database-url again")
    args = parser.parse_args()
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    if args.database_url is not None:
        backend = sa.make_url(args.database_url).get_backend_name()
        results[backend] = run_backend(args.database_url, args)
    elif args.measure_only:
        parser.error("--measure-only needs --database-url")
    needs_server = args.database_url is None and args.backend in ("postgresql", "both")
    if needs_server and not os.environ.get("SPARSEWATCH_TEST_DATABASE_URL"):
        parser.error(f"--backend {args.backend} needs SPARSEWATCH_TEST_DATABASE_URL (a server)")
    if args.database_url is None and args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            print("== SQLite", flush=True)
            results["sqlite"] = run_backend(f"sqlite:///{tmp}/scale.db", args)
    if args.database_url is None and args.backend in ("postgresql", "both"):
        with postgres_database(os.environ["SPARSEWATCH_TEST_DATABASE_URL"]) as url:
            print("== PostgreSQL", flush=True)
            results["postgresql"] = run_backend(url, args)
    if args.output is not None:
        args.output.write_text(json.dumps(results, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
