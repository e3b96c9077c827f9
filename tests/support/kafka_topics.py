"""A topic filled with given messages, read back whole or up to a count, a topic whose first
messages the broker deleted, a topic deleted and created again, a consumer that notes its
restarts, and whether a topic exists."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import BatchConsumer, make_producer


def produce_messages(bootstrap: str, topic: str, messages: Iterable[tuple[bytes, bytes]]) -> None:
    """``messages`` (key, value) produced to ``topic``, created with one partition if it is new,
    every one delivered."""
    ensure_topics(bootstrap, {topic: 1})
    producer = make_producer(bootstrap)
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def consume_messages(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Message]:
    """Every committed message of ``topic``, in offset order per partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"audit-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 3,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        wanted = 0
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            wanted += high - low
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        got: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(got) < wanted and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                if msg.error() is None:
                    got.append(msg)
        assert len(got) == wanted, "not every message came back"
        return got
    finally:
        consumer.close()


def consume_values(bootstrap: str, topic: str, timeout: float = 60.0) -> list[dict]:
    """Every message value of ``topic``, in offset order per partition."""
    return [json.loads(msg.value()) for msg in consume_messages(bootstrap, topic, timeout)]


def read_at_least(bootstrap: str, topic: str, n: int, timeout: float = 60.0) -> list[Message]:
    """The messages of ``topic`` from its start, read until there are ``n`` or more (or
    ``timeout`` has passed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            got += [m for m in consumer.consume(500, timeout=1.0) if m.error() is None]
    finally:
        consumer.close()
    return got


def topic_with_deleted_head(bootstrap: str, values: list[bytes], keep_from: int) -> str:
    """A one-partition topic holding ``values``, the first ``keep_from`` of them deleted."""
    topic = f"gap-{uuid.uuid4().hex[:8]}"
    produce_messages(bootstrap, topic, ((b"k", value) for value in values))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, keep_from)]).values():
        assert future.result(30).low_watermark == keep_from  # the partition's new low watermark
    return topic


def consumer_noting_resets(
    bootstrap: str, topic: str, resets: list[tuple[str, int, int]], start: int | None = None
) -> BatchConsumer:
    """A consumer of ``topic`` (group ``g-<topic>``) starting at offset ``start`` (None: where
    the consumer would) that appends its restarts (topic, partition, messages skipped) to
    ``resets``."""
    return BatchConsumer(
        bootstrap,
        f"g-{topic}",
        [topic],
        on_assign=None if start is None else lambda parts: {tp: start for tp in parts},
        on_reset=lambda t, p, n: resets.append((t, p, n)),
    )


def read_offsets(consumer: BatchConsumer, n: int, timeout_s: float = 30.0) -> list[int]:
    """The offsets of the messages ``consumer`` polls until there are ``n`` or more (or
    ``timeout_s`` has passed)."""
    offsets: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(offsets) < n and time.monotonic() < deadline:
        offsets += [m.offset() for m in consumer.poll_batch(100, timeout=0.5)]
    return offsets


def topic_exists(bootstrap: str, topic: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    return topic in admin.list_topics(timeout=10).topics


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete ``topic``, once the broker has accepted the deletion."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # (kept until the answer came)
    admin.delete_topics([topic])[topic].result(30)


def create_after_deletion(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` (just deleted) again, waiting while its deletion is still under way."""
    deadline = time.monotonic() + 30
    while True:
        try:
            ensure_topics(bootstrap, {topic: partitions})
            return
        except RuntimeError:
            assert time.monotonic() < deadline
            time.sleep(0.5)
