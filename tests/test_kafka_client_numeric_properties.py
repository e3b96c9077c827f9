"""Client properties from the configuration are text (a TOML integer is taken as its text): the
consumer's own use of ``max.poll.interval.ms`` divided that text by a number, and every worker
and the ingest bridge died at start with TypeError once an operator set it (real Kafka)."""

from __future__ import annotations

import uuid

from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import BatchConsumer

from sparsewatch.config import load_config


def test_a_configured_max_poll_interval_sets_the_keepalive_and_the_consumer_reads(
    kafka_bootstrap: str,
) -> None:
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "SPARSEWATCH_KAFKA_CLIENT_MAX_POLL_INTERVAL_MS": "12000",
        }
    )
    connection = config.kafka.connection()
    assert connection.consumer["max.poll.interval.ms"] == "12000"  # text, as documented
    topic = f"numeric-properties-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, {topic: 1})
    consumer = BatchConsumer(connection, f"{topic}-group", [topic], **{"session.timeout.ms": 6000})
    try:
        assert consumer._keepalive_after_s == 3.0  # a quarter of 12 s
        assert consumer.poll_batch(10, 0.5) == []
    finally:
        consumer.close()
