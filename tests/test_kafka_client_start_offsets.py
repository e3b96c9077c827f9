"""BatchConsumer.lag() for a partition assigned again without a start offset
(consumers/kafka_client.py, against a real broker)."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import BatchConsumer, producer_config

from tests.support.kafka_topics import create_after_deletion, delete_topic


def _produce(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer(producer_config(bootstrap))
    for i in range(n):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(30) == 0


def _poll_until(consumer: BatchConsumer, owned: bool, what: str, deadline_s: float = 60.0) -> None:
    """Poll (nothing read: an instant timeout) until the consumer owns a partition, or none."""
    deadline = time.monotonic() + deadline_s
    while bool(consumer.assignment()) != owned:
        assert time.monotonic() < deadline, what
        assert consumer.poll_batch(100, timeout=0) == []
        time.sleep(0.1)


def test_a_topic_created_again_counts_its_lag_from_its_earliest_message(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """The source topic of a running consumer (the ingest bridge's: no offsets of its own) is
    deleted and created again. The broker deletes the group's committed offsets with the topic,
    so its partition is assigned again without a start offset, at its earliest message. Until
    the first message is read, the lag must count from there (5 messages behind), not from the
    offset the partition started at before the deletion (20: "0 behind", caught up)."""
    group = f"{topic_name}-g"
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    _produce(kafka_bootstrap, topic_name, 20)
    with BatchConsumer(kafka_bootstrap, group, [topic_name]) as first:
        read = 0
        while read < 20:
            read += len(first.poll_batch(100, timeout=1.0))
        first.commit_offsets({(topic_name, 0): 20})
    consumer = BatchConsumer(
        kafka_bootstrap, group, [topic_name], **{"topic.metadata.refresh.interval.ms": 1000}
    )
    try:
        _poll_until(consumer, True, "never assigned")  # (at the committed offset, 20)
        delete_topic(kafka_bootstrap, topic_name)
        _poll_until(consumer, False, "the deleted topic's partition was never revoked")
        create_after_deletion(kafka_bootstrap, topic_name)
        _produce(kafka_bootstrap, topic_name, 5)
        _poll_until(consumer, True, "the topic created again was never assigned")
        deadline = time.monotonic() + 30
        while consumer.lag()[(topic_name, 0)] is None:  # until a fetch says where its end is
            assert time.monotonic() < deadline, "no fetch"
            time.sleep(0.1)
        assert consumer.lag() == {(topic_name, 0): 5}
        assert [m.offset() for m in consumer.poll_batch(100, timeout=5.0)] == list(range(5))
    finally:
        consumer.close()
