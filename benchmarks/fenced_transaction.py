"""Cost of the idle-session guard of a fenced transaction on PostgreSQL.

``StoreTx.check_owners`` opens every worker transaction on PostgreSQL with ``SET LOCAL
idle_in_transaction_session_timeout`` (a stalled previous owner then holds a claim up for at most
``OWNER_LOCK_IDLE_TIMEOUT_S``). This measures what that statement adds to the smallest fenced
transaction (the owners checked under lock, two resume offsets stored), against the same
transaction without it (baseline), interleaved in pairs whose order alternates, on a fresh
database of the server given; medians, and the ratio. A window's transaction is this plus its
documents, alerts and checkpoint (``benchmarks/storage_write.py``: milliseconds to tens of
milliseconds), and a window of the pipeline benchmark takes about 0.4 s end to end.

    python benchmarks/fenced_transaction.py --postgres-url URL [--pairs 600]

``--postgres-url`` defaults to ``SPARSEWATCH_TEST_DATABASE_URL``. Results:
``benchmarks/results/fenced_transaction.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import sparsewatch.storage.store as store_module
from postgres_databases import postgres_database
from sparsewatch.storage.store import Store

RESULTS = Path(__file__).resolve().parent / "results"


def _without_guard(check: Callable[..., None]) -> Callable[..., None]:
    """``check_owners`` as it runs on a connection that is not PostgreSQL's (no SET LOCAL)."""

    def check_owners(tx: store_module.StoreTx, *args: object) -> None:
        dialect = tx.connection.dialect
        name = dialect.name
        try:
            dialect.name = "baseline"
            check(tx, *args)
        finally:
            dialect.name = name

    return check_owners


def measure(url: str, pairs: int) -> dict[str, float]:
    """Median seconds of the fenced transaction with and without the guard."""
    store = Store.open(url)
    guarded = store_module.StoreTx.check_owners
    variants = {"with_guard": guarded, "baseline": _without_guard(guarded)}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    try:
        tokens = store.claim_partitions("bench", "docs", [0, 1])
        for i in range(pairs):
            order = list(variants) if i % 2 else list(reversed(variants))
            for name in order:
                store_module.StoreTx.check_owners = variants[name]  # type: ignore[method-assign]
                started = time.perf_counter()
                with store.transaction() as tx:
                    tx.check_owners("bench", "docs", tokens)
                    tx.set_partition_offsets("bench", "docs", {0: i, 1: i})
                seconds[name].append(time.perf_counter() - started)
    finally:
        store_module.StoreTx.check_owners = guarded  # type: ignore[method-assign]
        store.dispose()
    return {name: statistics.median(values) for name, values in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=os.environ.get("SPARSEWATCH_TEST_DATABASE_URL"))
    parser.add_argument("--pairs", type=int, default=600)
    args = parser.parse_args()
    if not args.postgres_url:
        parser.error("give --postgres-url or set SPARSEWATCH_TEST_DATABASE_URL")
    with postgres_database(args.postgres_url) as url:
        medians = measure(url, args.pairs)
    result = {
        "command": f"python benchmarks/fenced_transaction.py --pairs {args.pairs} "
        "--postgres-url URL",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": platform.platform(),
        "pairs": args.pairs,
        "median_ms": {name: round(s * 1000, 4) for name, s in medians.items()},
        "added_ms": round((medians["with_guard"] - medians["baseline"]) * 1000, 4),
        "ratio": round(medians["with_guard"] / medians["baseline"], 4),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fenced_transaction.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
