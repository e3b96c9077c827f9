"""The ingest bridge's dead letters in the results database through a PostgreSQL outage (real
broker, real PostgreSQL): the bridge waits for the database before it begins a batch's Kafka
transaction, so nothing of the batch is forwarded or committed meanwhile, and every dead letter
ends up once in the table and once on the dead-letter topic; stopped during the outage it says so
in one line and the next start records what it could not. Its waits for the database count in
sparsewatch_retries_total."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from sparsewatch.consumers.ingest import IngestRoute
from sparsewatch.storage.store import Store

from tests.conftest import PostgresOutage
from tests.support.ingest_kafka import (
    committed,
    dead_letter_source,
    make_route,
    make_tweet,
    prepare,
    produce,
    read_all,
    reap_bridges,  # noqa: F401 (autouse: kills what spawn started)
    spawn,
)
from tests.support.ports import free_port


def _batch(start: int, n_good: int, n_bad: int) -> list[tuple[bytes | None, bytes | None]]:
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"en", json.dumps(make_tweet(start + i, "en")).encode()) for i in range(n_good)
    ]
    records += [(b"en", f"broken {start + j}".encode()) for j in range(n_bad)]
    return records


def _wait_committed(route: IngestRoute, proc: subprocess.Popen, log: Path, expected: int) -> None:
    deadline = time.monotonic() + 120
    while committed(route.bootstrap, route.group_id, route.source_topics[0], 3) < expected:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.1)


def _retries(port: int) -> float:
    """``sparsewatch_retries_total`` of the bridge, as its endpoint serves it."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read()
    found = re.search(rb'^sparsewatch_retries_total\{worker="ingest"\} (\S+)$', body, re.M)
    assert found, body.decode()[-2000:]
    return float(found.group(1))


def test_dead_letters_reach_the_database_through_an_outage(
    kafka_bootstrap: str,
    topic_name: str,
    tmp_path: Path,
    postgres_database: tuple[str, str],
    postgres_outage: PostgresOutage,
) -> None:
    url = postgres_database[0]
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    source = route.source_topics[0]
    log = tmp_path / "ingest.log"
    produce(kafka_bootstrap, source, _batch(0, 200, 5))
    port = free_port()
    proc = spawn(route, log, None, ("--metrics-port", str(port)), database_url=url)
    _wait_committed(route, proc, log, 205)
    assert _retries(port) == 0

    postgres_outage.begin()
    produce(kafka_bootstrap, source, _batch(1000, 200, 5))
    time.sleep(4.0)  # the bridge retries the database; the batch is neither forwarded nor committed
    assert committed(kafka_bootstrap, route.group_id, source, 3) == 205
    assert len(read_all(kafka_bootstrap, route.docs_topic, 200)) == 200
    assert "recording dead letters failed" in log.read_text()
    assert _retries(port) >= 2  # (0.2 s, 0.4 s, ... within the 4 s: each wait counted)
    postgres_outage.end()
    _wait_committed(route, proc, log, 410)

    postgres_outage.begin()  # stopped while waiting: one line, nothing committed
    produce(kafka_bootstrap, source, _batch(2000, 0, 1))
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 2, log.read_text()[-2000:]
    last = log.read_text().strip().splitlines()[-1]
    assert last.startswith("error: recording dead letters abandoned on shutdown"), last
    assert last.endswith("the batch is read again at the next start"), last
    assert committed(kafka_bootstrap, route.group_id, source, 3) == 410
    postgres_outage.end()

    final = spawn(route, log, until_idle=3.0, database_url=url)
    assert final.wait(timeout=120) == 0, log.read_text()[-2000:]
    assert committed(kafka_bootstrap, route.group_id, source, 3) == 411
    assert len(read_all(kafka_bootstrap, route.docs_topic, 400)) == 400
    dead = read_all(kafka_bootstrap, route.dlq_topic, 11)
    store = Store.open(url, create=False)
    try:
        rows = store.dead_letters(limit=None)
    finally:
        store.dispose()
    assert len(dead) == len(rows) == 11
    assert sorted((r["topic"], r["partition"], r["offset"], r["payload"]) for r in rows) == sorted(
        (*dead_letter_source(m), m.value()) for m in dead
    )
    assert "Traceback" not in log.read_text()
