"""A topic read back whole, and whether a topic exists."""

from __future__ import annotations

import json
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient


def consume_values(bootstrap: str, topic: str, timeout: float = 60.0) -> list[dict]:
    """Every message value of ``topic``, in offset order per partition."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"audit-{uuid.uuid4().hex}", "log_level": 3}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        wanted = 0
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            wanted += high - low
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        got: list[dict] = []
        deadline = time.monotonic() + timeout
        while len(got) < wanted and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                if msg.error() is None:
                    got.append(json.loads(msg.value()))
        assert len(got) == wanted, "not every message came back"
        return got
    finally:
        consumer.close()


def topic_exists(bootstrap: str, topic: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    return topic in admin.list_topics(timeout=10).topics
