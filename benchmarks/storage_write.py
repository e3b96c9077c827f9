"""Cost of writing one window's results to SQL (SQLite file, and PostgreSQL when given).

One "window" is what the detector worker writes in ONE transaction: the window row, N documents
(with text), the novel-document alerts (5%), 10 topics, the model checkpoint (a float32 dictionary
of ``--terms`` x ``--atoms``) and the partition offsets. Measured per window (median of
``--windows`` windows, after one warm-up window), with a breakdown, against a baseline in the same
run: the same documents written (a) as a Python loop of single-row INSERT statements in one
transaction. Then, interleaved per window, the same number of fresh documents written alone (a
transaction each; wall and client CPU, and the PostgreSQL backend's CPU when the server runs on
this machine) by ``storage/bulk.py`` and by two baselines of the same upsert: (b) SQLAlchemy's own
``executemany`` and (c) the driver's ``executemany`` of the statement compiled once (on SQLite what
``storage/bulk.py`` does; on PostgreSQL its path before the ``COPY``); the baselines take the
bound values as a dict per row. ``insert_documents`` is handed a dict per document in those three,
as a user of the store does; a fourth write hands it
:class:`~sparsewatch.storage.document_columns.DocumentColumns`, as the detector worker does.

    python benchmarks/storage_write.py [--docs 1000] [--windows 15] [--postgres-url URL]

``--postgres-url``: also measure on this PostgreSQL server (in a fresh database created on it,
dropped at the end); defaults to ``SPARSEWATCH_TEST_DATABASE_URL``, ``--postgres-url ''`` measures
SQLite only.
Results: ``benchmarks/results/storage_write.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import sparsewatch.storage.store as store_module
import sqlalchemy as sa
from postgres_databases import postgres_database
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.schema import documents
from sparsewatch.storage.store import Store
from sqlalchemy.dialects import postgresql, sqlite

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


def _dialect_insert(conn: sa.Connection) -> Any:
    return postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert


def _server_cpu_s(conn: sa.Connection) -> float | None:
    """CPU seconds of the PostgreSQL backend serving ``conn`` (a server on this machine), or
    ``None`` (SQLite runs in this process: its work is in the client CPU)."""
    if conn.dialect.name != "postgresql":
        return None
    pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:  # a server elsewhere
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Timing = tuple[float, float, float | None]


def _timed_documents(store: Store, docs: list[dict] | DocumentColumns, bulk: Any) -> Timing:
    """Wall, client CPU (this process) and server CPU seconds of ``insert_documents`` and its
    commit in a transaction of its own, the store's bulk upsert of columns replaced by ``bulk``."""
    original = store_module.bulk_upsert_columns
    store_module.bulk_upsert_columns = bulk
    try:
        with store.transaction() as tx:
            conn = tx.connection
            server = _server_cpu_s(conn)
            t, cpu = time.perf_counter(), time.process_time()
            tx.insert_documents(docs)
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
        with store.reading() as conn:  # the same pooled connection: one at a time here
            after = _server_cpu_s(conn)
        return wall, cpu, None if server is None or after is None else after - server
    finally:
        store_module.bulk_upsert_columns = original


def _row_by_row(baseline: Any) -> Any:
    """A baseline that takes a dict per row, handed the bound columns as such (the rows
    ``insert_documents`` built before it wrote columns)."""

    def run(conn: sa.Connection, key: str, table: Any, columns: dict, conflict: Any) -> None:
        names = list(columns)
        values = zip(*columns.values(), strict=True)
        baseline(conn, key, table, [dict(zip(names, v, strict=True)) for v in values], conflict)

    return run


def sqlalchemy_executemany(conn: sa.Connection, _key: str, table: Any, rows: list, conflict: Any):
    """Baseline: the same upsert through SQLAlchemy's own ``executemany`` (what storage.bulk
    replaces)."""
    conn.execute(conflict(_dialect_insert(conn)(table)), rows)


_COMPILED: dict[tuple[str, tuple[str, ...]], tuple[str, list[str], list[Any]]] = {}


def driver_executemany(conn: sa.Connection, _key: str, table: Any, rows: list, conflict: Any):
    """Baseline: the storage path before the PostgreSQL COPY, ``INSERT ... VALUES ... ON
    CONFLICT`` compiled once and handed to the driver's ``executemany`` (psycopg pipelines it),
    the values bound by the column types' processors; on SQLite this is what storage.bulk does."""
    dialect = conn.dialect
    names = list(rows[0])
    cache_key = (dialect.name, tuple(names))
    if cache_key not in _COMPILED:  # compiled once, as storage.bulk does
        stmt = conflict(_dialect_insert(conn)(table))
        compiled = stmt.compile(dialect=dialect, column_keys=names)
        order = list(compiled.positiontup) if compiled.positional else names
        impls = [table.c[n].type.dialect_impl(dialect) for n in order]
        _COMPILED[cache_key] = compiled.string, order, [t.bind_processor(dialect) for t in impls]
    sql, order, processors = _COMPILED[cache_key]
    pairs = zip(order, processors, strict=True)
    columns = [[p(r[n]) if p else r[n] for r in rows] for n, p in pairs]
    tuples = list(zip(*columns, strict=True))
    if dialect.positional:
        conn.exec_driver_sql(sql, tuples)
    else:
        conn.exec_driver_sql(sql, [dict(zip(order, t, strict=True)) for t in tuples])


def bench(url: str, n_docs: int, n_windows: int, state: dict[str, np.ndarray]) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    store = Store.open(url)
    try:
        runs: list[dict[str, float]] = []
        baseline: list[float] = []
        sa_many: list[Timing] = []
        by_driver: list[Timing] = []
        by_bulk: list[Timing] = []
        by_columns: list[Timing] = []
        for seq in range(n_windows + 1):
            docs, alerts = window_rows(seq, n_docs, rng)
            parts = write_window(store, seq, docs, alerts, state)
            base_docs, _ = window_rows(seq + 10_000, n_docs, rng)
            base = single_row_baseline(store, base_docs)
            many_docs, _ = window_rows(seq + 20_000, n_docs, rng)
            many = _timed_documents(store, many_docs, _row_by_row(sqlalchemy_executemany))
            driver_docs, _ = window_rows(seq + 30_000, n_docs, rng)
            driver = _timed_documents(store, driver_docs, _row_by_row(driver_executemany))
            bulk_docs, _ = window_rows(seq + 40_000, n_docs, rng)
            bulk = _timed_documents(store, bulk_docs, store_module.bulk_upsert_columns)
            # as the detector hands them over: columns made before the transaction
            columns = DocumentColumns.from_rows(window_rows(seq + 50_000, n_docs, rng)[0])
            as_columns = _timed_documents(store, columns, store_module.bulk_upsert_columns)
            if seq > 0:  # the first window warms caches and the connection pool
                runs.append(parts)
                baseline.append(base)
                sa_many.append(many)
                by_driver.append(driver)
                by_bulk.append(bulk)
                by_columns.append(as_columns)
    finally:
        store.dispose()
    median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return {
        "median_s": median,
        "p90_total_s": float(np.quantile([r["total"] for r in runs], 0.9)),
        "docs_per_s": n_docs / median["total"],
        "baseline_single_row_documents_s": statistics.median(baseline),
        "bulk_documents_speedup_vs_single_row": statistics.median(baseline) / median["documents"],
        # The same documents written alone (a transaction each), interleaved: storage.bulk
        # against SQLAlchemy's executemany and the driver's executemany.
        "documents_alone": {
            "storage_bulk": _medians(by_bulk),
            "storage_bulk_given_columns": _medians(by_columns),
            "sqlalchemy_executemany": _medians(sa_many),
            "driver_executemany": _medians(by_driver),
        },
    }


def _medians(runs: list[Timing]) -> dict[str, float | None]:
    wall, client, server = zip(*runs, strict=True)
    return {
        "wall_s": statistics.median(wall),
        "client_cpu_s": statistics.median(client),
        # /proc counts whole clock ticks (10 ms): the mean over the windows, not a median
        "server_cpu_s_mean": None if None in server else statistics.fmean(server),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--windows", type=int, default=15)
    parser.add_argument("--terms", type=int, default=5000)
    parser.add_argument("--atoms", type=int, default=100)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SPARSEWATCH_TEST_DATABASE_URL"),
        help="also measure on this PostgreSQL server, in a fresh database dropped at the end "
        "(default: $SPARSEWATCH_TEST_DATABASE_URL; '' for SQLite only)",
    )
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
    if args.postgres_url:
        with postgres_database(args.postgres_url) as url:
            results["backends"]["postgresql"] = bench(url, args.docs, args.windows, state)
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
            f" ({r['bulk_documents_speedup_vs_single_row']:.1f}x)"
        )
        alone = r["documents_alone"]
        bulk = alone["storage_bulk"]
        given = alone["storage_bulk_given_columns"]
        print(
            f"{'':10s} documents alone: storage.bulk given columns {given['wall_s'] * 1e3:6.1f} ms"
            f" wall {given['client_cpu_s'] * 1e3:6.1f} ms CPU, given dicts "
            f"{bulk['wall_s'] * 1e3:6.1f} ms wall {bulk['client_cpu_s'] * 1e3:6.1f} ms CPU"
        )
        for label in ("sqlalchemy", "driver"):
            base = alone[f"{label}_executemany"]
            server = ""
            if bulk["server_cpu_s_mean"] is not None:
                server = (
                    f", server {bulk['server_cpu_s_mean'] * 1e3:.1f} vs "
                    f"{base['server_cpu_s_mean'] * 1e3:.1f} ms (mean)"
                )
            print(
                f"{'':10s} documents alone: storage.bulk {bulk['wall_s'] * 1e3:6.1f} ms wall "
                f"{bulk['client_cpu_s'] * 1e3:6.1f} ms CPU; {label} executemany "
                f"{base['wall_s'] * 1e3:6.1f} ms ({base['wall_s'] / bulk['wall_s']:.2f}x) wall "
                f"{base['client_cpu_s'] * 1e3:6.1f} ms "
                f"({base['client_cpu_s'] / bulk['client_cpu_s']:.2f}x) CPU{server}"
            )


if __name__ == "__main__":
    main()
