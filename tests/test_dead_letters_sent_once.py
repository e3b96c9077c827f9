"""A message refused again when it is read again is not sent to the dead-letter topic twice.

A stream's open window holds its partition's resume offset back, so after a restart (or a
rebalance) a worker re-reads the messages after that offset, and a malformed one among them is
refused again. Its copy went to the dead-letter topic at every such re-read, while the
``dead_letters`` table kept one row. The writer now leaves out the dead letters the table holds:
a row is stored only after its copy was delivered. Real broker, real SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.writer import Destination, WriteJob, make_writer
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from sparsewatch.runner import build_worker
from tests.support.kafka_topics import consume_messages
from tests.support.postgres_databases import postgres_database, require_postgres_server

pytestmark = pytest.mark.kafka


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> Any:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'dead.db'}"
        return
    admin = require_postgres_server(request.getfixturevalue("postgres_admin_url"))
    with postgres_database(admin) as url:
        yield url


def _dead(offset: int, reason: str = "not JSON", payload: bytes = b"{x") -> dict[str, Any]:
    return {"topic": "docs", "partition": 0, "offset": offset, "reason": reason, "payload": payload}


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_writer_sends_only_dead_letters_the_table_does_not_hold(
    kafka_bootstrap: str, database_url: str, mode: str
) -> None:
    dlq = f"dead-once-{uuid.uuid4().hex[:8]}.dlq"
    ensure_topics(kafka_bootstrap, {dlq: 1})
    with Store.open(database_url) as store:
        writer = make_writer(mode, store, Destination(kafka_bootstrap, "g", "docs", None, dlq), "t")
        try:
            writer.submit(WriteJob(dead=[_dead(3), _dead(7)])).result()
            writer.submit(WriteJob(dead=[_dead(7, "again"), _dead(3), _dead(9)])).result()
            # the same coordinates, other bytes (a topic deleted and created again): sent
            writer.submit(WriteJob(dead=[_dead(3, payload=b"{other")])).result()
        finally:
            writer.close()
        assert sorted(r["offset"] for r in store.dead_letters(limit=None)) == [3, 7, 9]
    sent = consume_messages(kafka_bootstrap, dlq)
    assert sorted(m.key() for m in sent) == [b"docs:0:3", b"docs:0:3", b"docs:0:7", b"docs:0:9"]
    assert sorted(m.value() for m in sent if m.key() == b"docs:0:3") == [b"{other", b"{x"]


def test_a_restart_rereading_a_malformed_message_in_an_open_window_sends_it_once(
    kafka_bootstrap: str, database_url: str
) -> None:
    """A malformed message amid an open window's documents: the worker stops (the window still
    open, so the stored resume offset is its first document's) and a second one re-reads it."""
    prefix = f"dead-once-{uuid.uuid4().hex[:8]}"
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
            "SPARSEWATCH_KAFKA_PARTITIONS": "1",
            "SPARSEWATCH_DATABASE_URL": database_url,
            "SPARSEWATCH_WINDOWS_SIZE": "1d",
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "600",
            "SPARSEWATCH_WRITER": "thread",
            "SPARSEWATCH_ANOMALY_ENABLED": "false",
        }
    )
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 1})
    now_ms = int(time.time() * 1000)
    values = [
        json.dumps({"id": f"d{i}", "stream": "s", "text": f"words {i}", "timestamp": now_ms + i})
        for i in range(4)
    ]
    values.insert(2, "{not json")
    producer = make_producer(kafka_bootstrap)
    for value in values:
        producer.produce(topic, key=b"s", value=value.encode())
    assert producer.flush(30) == 0

    for _ in range(2):
        with Store.open(database_url) as store:
            build_worker("detector", config, store).run(until_idle_s=2.0)
            assert store.partition_offsets(f"{config.kafka.group_id}.detector", topic) == {0: 0}
            assert [r["offset"] for r in store.dead_letters(limit=None)] == [2]
    sent = consume_messages(kafka_bootstrap, config.kafka.topic("dlq"))
    assert [m.key() for m in sent] == [f"{topic}:0:2".encode()]
