"""What exactly-once costs the ingest bridge: ``run_ingest`` (one Kafka transaction per batch:
documents, dead letters and consumed offsets together) against the same bridge made
at-least-once (the same consumer, mapping and idempotent producer, no transaction: each batch is
flushed, then its offsets committed), on the same tweets, in the same run; and what recording
the dead letters in the results database costs (``sparsewatch ingest``'s default: one SQL
transaction per batch that has dead letters) against the exactly-once bridge without it.

    python benchmarks/ingest_throughput.py [--records 50000] [--repeats 5] [--batch-size 1000]
        [--postgres-url URL | --database-url URL]

Each repeat writes ``--records`` tweets in Twitter's JSON (1% malformed) to a fresh source topic
of 3 partitions, then runs the three bridges one after the other (in rotating order) over it,
each in its own consumer group and to its own documents topic, both with batches of at most
``--batch-size`` records (one transaction each for the exactly-once bridge). Measured: the
seconds spent on batches (from a batch in hand to its commit; the idle wait at the end excluded)
and the process CPU over the run. Reported: medians over the repeats, and the median of the
per-repeat ratios (exactly-once over at-least-once; with the database over without). The
database is a fresh one on the PostgreSQL server of ``--postgres-url`` (dropped at the end), or
``--database-url`` (used as it is, and kept), else a SQLite file in a temporary folder (the
default of ``database_url``: a file). Uses the broker in ``KAFKA_BOOTSTRAP_SERVERS``, else starts
the local one. Results: ``benchmarks/results/ingest_throughput.json`` (``_postgresql.json`` on
PostgreSQL).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from postgres_databases import postgres_database
from sparsewatch.consumers.field_mapping import FieldMapping
from sparsewatch.consumers.ingest import IngestRoute, map_record, run_ingest
from sparsewatch.consumers.kafka_client import (
    BatchConsumer,
    dead_letter_message,
    make_producer,
    next_offsets,
    produce,
)
from sparsewatch.consumers.messages import RecordError
from sparsewatch.consumers.retry import StopFlag
from sparsewatch.storage.engine import mask_url
from sparsewatch.storage.store import Store

RESULTS = Path(__file__).resolve().parent / "results" / "ingest_throughput.json"
TWEETS = FieldMapping(id="id_str", text=("full_text",), timestamp="created_at", stream="user.lang")
LANGS = ("en", "de", "fr", "es", "it", "pt")
KINDS = ("eo", "alo", "eo_db")  # exactly-once, at-least-once, exactly-once with the database


def _tweets(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(5000)]
    out = []
    for i in range(n):
        if rng.random() < 0.01:
            out.append(f"broken {i}".encode())
            continue
        minute, second = divmod(i % 3600, 60)
        tweet = {
            "id_str": str(10**12 + i),
            "full_text": " ".join(rng.choices(words, k=rng.randint(8, 25))),
            "created_at": f"Wed Oct 10 20:{minute:02d}:{second:02d} +0000 2018",
            "user": {"lang": rng.choice(LANGS), "screen_name": f"user{rng.randrange(10**6)}"},
            "retweet_count": rng.randrange(100),
        }
        out.append(json.dumps(tweet).encode())
    return out


def _create(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()])
    for future in futures.values():
        future.result(30)


def _at_least_once(route: IngestRoute, idle_s: float, batch_size: int) -> dict[str, float]:
    """The baseline: run_ingest's loop without a transaction."""
    producer = make_producer(route.bootstrap)
    consumer = BatchConsumer(route.bootstrap, route.group_id, route.source_topics)
    busy = 0.0
    forwarded = 0
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s:
            batch = consumer.poll_batch(batch_size, timeout=0.5)
            if not batch:
                continue
            last = time.monotonic()
            for msg in batch:
                try:
                    key, value = map_record(msg, TWEETS)
                except RecordError as exc:
                    dkey, payload, headers = dead_letter_message(
                        msg.topic(), msg.partition(), msg.offset(), str(exc), msg.value() or b""
                    )
                    produce(producer, route.dlq_topic, dkey, payload, headers=headers)
                    continue
                produce(producer, route.docs_topic, key, value)
                forwarded += 1
            assert producer.flush(30) == 0
            consumer.commit_offsets(next_offsets(batch))
            busy += time.monotonic() - last
    finally:
        consumer.close()
    return {"busy_s": busy, "forwarded": forwarded}


def _exactly_once(route: IngestRoute, idle_s: float, batch_size: int) -> dict[str, float]:
    stats = run_ingest(route, TWEETS, StopFlag(), until_idle_s=idle_s, batch_size=batch_size)
    return {"busy_s": stats.busy_s, "forwarded": stats.forwarded}


def _exactly_once_to_database(store: Store) -> Any:
    def run(route: IngestRoute, idle_s: float, batch_size: int) -> dict[str, float]:
        stats = run_ingest(
            route,
            TWEETS,
            StopFlag(),
            until_idle_s=idle_s,
            batch_size=batch_size,
            record_dead_letters=store.insert_dead_letters,
        )
        return {"busy_s": stats.busy_s, "forwarded": stats.forwarded}

    return run


def _timed(run: Any, route: IngestRoute, batch_size: int) -> dict[str, float]:
    cpu = time.process_time()
    result = run(route, 3.0, batch_size)
    result["cpu_s"] = time.process_time() - cpu
    result["records_per_s"] = result["forwarded"] / result["busy_s"]
    return result


def bench(
    bootstrap: str, records: int, repeats: int, batch_size: int, store: Store
) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for r in range(repeats):
        tag = f"ingest-bench-{uuid.uuid4().hex[:8]}"
        source = f"{tag}.src"
        docs = {f"{tag}.docs-{kind}": 4 for kind in KINDS}
        _create(bootstrap, {source: 3, **docs, f"{tag}.dlq": 1})
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        tweets = _tweets(records, seed=r)
        for i, value in enumerate(tweets):
            producer.produce(source, value=value)
            if i % 10_000 == 0:
                producer.flush(30)
        assert producer.flush(60) == 0

        def route(kind: str, tag: str = tag, source: str = source) -> IngestRoute:
            return IngestRoute(
                bootstrap, f"{tag}.{kind}", (source,), f"{tag}.docs-{kind}", f"{tag}.dlq"
            )

        bridges = {
            "eo": _exactly_once,
            "alo": _at_least_once,
            "eo_db": _exactly_once_to_database(store),
        }
        order = KINDS[r % 3 :] + KINDS[: r % 3]
        result = {kind: _timed(bridges[kind], route(kind), batch_size) for kind in order}
        result["ratio_busy"] = result["eo"]["busy_s"] / result["alo"]["busy_s"]
        result["ratio_cpu"] = result["eo"]["cpu_s"] / result["alo"]["cpu_s"]
        result["ratio_busy_db"] = result["eo_db"]["busy_s"] / result["eo"]["busy_s"]
        assert result["eo"]["forwarded"] == result["alo"]["forwarded"]
        assert result["eo_db"]["forwarded"] == result["eo"]["forwarded"]
        runs.append(result)
        print(
            f"repeat {r}: exactly-once {result['eo']['records_per_s']:,.0f} records/s, "
            f"at-least-once {result['alo']['records_per_s']:,.0f} records/s, "
            f"ratio {result['ratio_busy']:.3f}; with the database "
            f"{result['eo_db']['records_per_s']:,.0f} records/s, "
            f"ratio {result['ratio_busy_db']:.3f}"
        )

    def median(kind: str, key: str) -> float:
        return statistics.median(run[kind][key] for run in runs)

    return {
        "records": records,
        "repeats": repeats,
        "batch_size": batch_size,
        "exactly_once": {k: median("eo", k) for k in ("busy_s", "cpu_s", "records_per_s")},
        "at_least_once": {k: median("alo", k) for k in ("busy_s", "cpu_s", "records_per_s")},
        "exactly_once_database": {
            k: median("eo_db", k) for k in ("busy_s", "cpu_s", "records_per_s")
        },
        "median_ratio_busy": statistics.median(run["ratio_busy"] for run in runs),
        "median_ratio_busy_database": statistics.median(run["ratio_busy_db"] for run in runs),
        "median_ratio_cpu": statistics.median(run["ratio_cpu"] for run in runs),
        "runs": runs,
    }


@contextmanager
def results_database(database_url: str | None, postgres_url: str | None) -> Iterator[str]:
    """The URL of the results database the dead letters are recorded in, for the ``with`` block:
    ``database_url`` as it is (kept), else a fresh database on the PostgreSQL server of
    ``postgres_url``, else a SQLite file in a temporary folder; either of the last two is removed
    when the block ends, however it ends."""
    if database_url:
        yield database_url
    elif postgres_url:
        with postgres_database(postgres_url) as url:
            yield url
    else:
        with tempfile.TemporaryDirectory(prefix="bench-db-") as folder:
            yield f"sqlite:///{Path(folder) / 'db'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=1000)
    database = parser.add_mutually_exclusive_group()
    database.add_argument(
        "--postgres-url",
        default=None,
        help="record the dead letters in a fresh database on this PostgreSQL server (an admin "
        "URL, e.g. $SPARSEWATCH_TEST_DATABASE_URL), dropped at the end",
    )
    database.add_argument(
        "--database-url",
        default=None,
        help="the results database the dead letters are recorded in, used as it is and kept "
        "(default: a SQLite file in a temporary folder)",
    )
    args = parser.parse_args()
    with results_database(args.database_url, args.postgres_url) as url:
        store = Store.open(url)
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        broker = None
        if not bootstrap:
            from sparsewatch.kafka_local import LocalKafka

            broker = LocalKafka(Path(tempfile.mkdtemp(prefix="bench-kafka-")), port=0)
            bootstrap = broker.up()
        try:
            started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            results = bench(bootstrap, args.records, args.repeats, args.batch_size, store)
        finally:
            store.dispose()
            if broker is not None:
                broker.down()
    results["command"] = (
        f"python benchmarks/ingest_throughput.py --records {args.records} --repeats {args.repeats}"
        f" --batch-size {args.batch_size}"
        + (f" --postgres-url {mask_url(args.postgres_url)}" if args.postgres_url else "")
        + (f" --database-url {mask_url(url)}" if args.database_url else "")
    )
    results["database"] = url.split(":", 1)[0]
    results["started"] = started
    results["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    out = RESULTS if url.startswith("sqlite") else RESULTS.with_stem(f"{RESULTS.stem}_postgresql")
    out.write_text(json.dumps(results, indent=2) + "\n")
    eo, alo = results["exactly_once"], results["at_least_once"]
    print(
        f"exactly-once {eo['records_per_s']:,.0f} records/s against at-least-once "
        f"{alo['records_per_s']:,.0f}: busy time x{results['median_ratio_busy']:.3f}, "
        f"CPU x{results['median_ratio_cpu']:.3f} (medians of {args.repeats}); dead letters "
        f"also in the database: {results['exactly_once_database']['records_per_s']:,.0f} "
        f"records/s, busy time x{results['median_ratio_busy_database']:.3f}"
    )


if __name__ == "__main__":
    main()
