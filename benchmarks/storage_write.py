"""Cost of writing one window's results to SQL (SQLite file, and PostgreSQL when given).

One "window" is what the detector worker writes in ONE transaction: the window row, N documents
(with text), the novel-document alerts (5%), 10 topics, the model checkpoint (a float32 dictionary
of ``--terms`` x ``--atoms``) and the partition offsets. Measured per window (median of
``--windows`` windows, after one warm-up window), with a breakdown, against a baseline in the same
run: the same documents written (a) as a Python loop of single-row INSERT statements in one
transaction and (b) through SQLAlchemy's own ``executemany`` of the same upsert (what
``storage/bulk.py`` replaces).

    python benchmarks/storage_write.py [--docs 1000] [--windows 15] [--postgres URL]

``--postgres`` defaults to ``SPARSEWATCH_TEST_DATABASE_URL`` (a fresh database is created on that
server). Results: ``benchmarks/results/storage_write.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import sparsewatch.storage.store as store_module
import sqlalchemy as sa
from sparsewatch.storage.schema import documents
from sparsewatch.storage.store import Store

RESULTS = Path(__file__).resolve().parent / "results" / "storage_write.json"
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def window_rows(seq: int, n: int, rng: np.random.Generator) -> tuple[list[dict], list[dict]]:
    start = T0 + timedelta(hours=seq)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
    docs = [
        {
            "stream": "bench",
            "doc_id": f"w{seq}-d{i}",
            "event_time": start + timedelta(seconds=i),
            "window_seq": seq,
            "novelty_score": np.float32(rng.random()),
            "reconstruction_error": np.float32(rng.random()),
            "novel": bool(i % 20 == 0),
            "late": False,
            "dominant_topic": int(i % 10),
            "top_atoms": rng.integers(0, 200, size=3),
            "labels": ["earn"],
            "text": " ".join(rng.choice(words, size=120)),
        }
        for i in range(n)
    ]
    alerts = [
        {
            "kind": "novel_document",
            "stream": "bench",
            "subject_id": d["doc_id"],
            "score": d["novelty_score"],
            "window_seq": seq,
            "event_time": d["event_time"],
            "summary": d["text"][:80],
        }
        for d in docs
        if d["novel"]
    ]
    return docs, alerts


def write_window(
    store: Store, seq: int, docs: list[dict], alerts: list[dict], state: dict[str, np.ndarray]
) -> dict[str, float]:
    """One window's transaction; returns seconds per part and in total."""
    parts: dict[str, float] = {}
    t_start = time.perf_counter()
    with store.transaction() as tx:
        t = time.perf_counter()
        tx.upsert_window("bench", seq, T0, T0 + timedelta(hours=1), len(docs), 0.9, {}, "watermark")
        tx.insert_documents(docs)
        parts["documents"] = time.perf_counter() - t
        t = time.perf_counter()
        tx.insert_alerts(alerts)
        tx.upsert_topics(
            [
                {
                    "stream": "bench",
                    "window_seq": seq,
                    "topic_id": k,
                    "terms": [[f"t{j}", 0.1] for j in range(8)],
                    "strength": 1.0,
                    "emerging": False,
                }
                for k in range(10)
            ]
        )
        parts["alerts+topics"] = time.perf_counter() - t
        t = time.perf_counter()
        tx.put_checkpoint("bench-group", "bench", state, {"window_seq": seq})
        tx.set_partition_offsets("bench-group", "docs", {0: seq * len(docs), 1: 0, 2: 0, 3: 0})
        parts["checkpoint+offsets"] = time.perf_counter() - t
        t = time.perf_counter()
    parts["commit"] = time.perf_counter() - t
    parts["total"] = time.perf_counter() - t_start
    return parts


def single_row_baseline(store: Store, docs: list[dict]) -> float:
    """The documents as one INSERT statement per row (same transaction discipline)."""
    t = time.perf_counter()
    with store.transaction() as tx:
        for d in docs:
            row = {
                **d,
                "novelty_score": float(d["novelty_score"]),
                "reconstruction_error": float(d["reconstruction_error"]),
                "top_atoms": [int(a) for a in d["top_atoms"]],
            }
            tx.connection.execute(sa.insert(documents).values(**row))
    return time.perf_counter() - t


def sqlalchemy_executemany_baseline(store: Store, docs: list[dict]) -> float:
    """The same upsert through SQLAlchemy's own ``executemany`` (instead of storage.bulk)."""

    def plain(conn: sa.Connection, _key: str, stmt: Any, _table: Any, rows: list) -> None:
        conn.execute(stmt, rows)

    original = store_module.bulk_execute
    store_module.bulk_execute = plain
    try:
        t = time.perf_counter()
        with store.transaction() as tx:
            tx.insert_documents(docs)
        return time.perf_counter() - t
    finally:
        store_module.bulk_execute = original


def bench(url: str, n_docs: int, n_windows: int, state: dict[str, np.ndarray]) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    store = Store.open(url)
    try:
        runs: list[dict[str, float]] = []
        baseline: list[float] = []
        sa_many: list[float] = []
        for seq in range(n_windows + 1):
            docs, alerts = window_rows(seq, n_docs, rng)
            parts = write_window(store, seq, docs, alerts, state)
            base_docs, _ = window_rows(seq + 10_000, n_docs, rng)
            base = single_row_baseline(store, base_docs)
            many_docs, _ = window_rows(seq + 20_000, n_docs, rng)
            many = sqlalchemy_executemany_baseline(store, many_docs)
            if seq > 0:  # the first window warms caches and the connection pool
                runs.append(parts)
                baseline.append(base)
                sa_many.append(many)
    finally:
        store.dispose()
    median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return {
        "median_s": median,
        "p90_total_s": float(np.quantile([r["total"] for r in runs], 0.9)),
        "docs_per_s": n_docs / median["total"],
        "baseline_single_row_documents_s": statistics.median(baseline),
        "bulk_documents_speedup_vs_single_row": statistics.median(baseline) / median["documents"],
        "baseline_sqlalchemy_executemany_documents_s": statistics.median(sa_many),
        "bulk_documents_speedup_vs_sqlalchemy_executemany": statistics.median(sa_many)
        / median["documents"],
    }


def fresh_postgres(admin_url: str) -> str:
    name = f"sw_bench_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--windows", type=int, default=15)
    parser.add_argument("--terms", type=int, default=5000)
    parser.add_argument("--atoms", type=int, default=100)
    parser.add_argument("--postgres", default=os.environ.get("SPARSEWATCH_TEST_DATABASE_URL"))
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    dictionary = rng.random((args.terms, args.atoms), dtype=np.float32)
    dictionary[dictionary < 0.9] = 0  # projected atoms are sparse
    state = {"A": dictionary, "n_seen": np.array(12345)}
    results: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared)",
        "docs_per_window": args.docs,
        "windows": args.windows,
        "checkpoint_bytes": int(sum(a.nbytes for a in state.values())),
        "backends": {},
    }
    with tempfile.TemporaryDirectory() as folder:
        results["backends"]["sqlite"] = bench(
            f"sqlite:///{folder}/bench.db", args.docs, args.windows, state
        )
    if args.postgres:
        results["backends"]["postgresql"] = bench(
            fresh_postgres(args.postgres), args.docs, args.windows, state
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    for name, r in results["backends"].items():
        m = r["median_s"]
        print(
            f"{name:10s} window {m['total'] * 1e3:7.1f} ms (p90 {r['p90_total_s'] * 1e3:.1f})"
            f"  documents {m['documents'] * 1e3:6.1f} ms  alerts+topics "
            f"{m['alerts+topics'] * 1e3:5.1f} ms  checkpoint "
            f"{m['checkpoint+offsets'] * 1e3:6.1f} ms"
            f"  commit {m['commit'] * 1e3:5.1f} ms  | single-row docs "
            f"{r['baseline_single_row_documents_s'] * 1e3:7.1f} ms"
            f" ({r['bulk_documents_speedup_vs_single_row']:.1f}x)  SQLAlchemy executemany "
            f"{r['baseline_sqlalchemy_executemany_documents_s'] * 1e3:6.1f} ms"
            f" ({r['bulk_documents_speedup_vs_sqlalchemy_executemany']:.2f}x)"
        )


if __name__ == "__main__":
    main()
