"""The dead-letter copy of a message near the broker's size limit, through a real broker."""

from __future__ import annotations

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import (
    DLQ_MAX_PAYLOAD_BYTES,
    BatchConsumer,
    dead_letter_message,
    make_producer,
    produce,
)
from sparsewatch.consumers.messages import InvalidMessageError, parse_message

from tests.support.kafka_topics import read_at_least


def test_a_refused_message_near_the_size_limit_reaches_the_dead_letter_topic(
    kafka_bootstrap, topic_name
):
    """A ~1 MB poison message (the producer's limit) is refused with a reason and its copy,
    cut to DLQ_MAX_PAYLOAD_BYTES, with the reason, source and original size in headers, keyed by
    its source, is delivered; a small one is copied whole."""
    dlq = f"{topic_name}.dlq"
    ensure_topics(kafka_bootstrap, {topic_name: 1, dlq: 1})
    big = b'{"id": "x", "timestamp": 1, "text": "' + b"\xff" * 990_000 + b'"}'
    small = b'\xef\xbb\xbf{"id": "y", "text": "a", "timestamp": 1}'
    producer = make_producer(kafka_bootstrap)
    for value in (big, small):
        produce(producer, topic_name, b"stream-a", value)
    assert producer.flush(30) == 0
    copies = {}
    with BatchConsumer(kafka_bootstrap, f"{topic_name}-g", [topic_name]) as consumer:
        seen = []
        for _ in range(30):
            seen += consumer.poll_batch(10, timeout=1.0)
            if len(seen) == 2:
                break
        assert [m.value() for m in seen] == [big, small]
        for msg in seen:
            with pytest.raises(InvalidMessageError) as refused:
                parse_message(msg.value())
            reason = refused.value.reason
            key, value, headers = dead_letter_message(
                msg.topic(), msg.partition(), msg.offset(), reason, msg.value()
            )
            produce(producer, dlq, key, value, headers=headers)
            copies[key] = reason
    assert producer.flush(30) == 0
    got = {m.key(): m for m in read_at_least(kafka_bootstrap, dlq, 2)}
    assert set(got) == {f"{topic_name}:0:0".encode(), f"{topic_name}:0:1".encode()}
    first, second = got[f"{topic_name}:0:0".encode()], got[f"{topic_name}:0:1".encode()]
    assert first.value() == big[:DLQ_MAX_PAYLOAD_BYTES]
    assert dict(first.headers()) == {
        "reason": copies[first.key()].encode(),
        "source": first.key(),
        "truncated_from_bytes": str(len(big)).encode(),
    }
    assert "size limit" in copies[first.key()]
    assert second.value() == small and dict(second.headers())["reason"].startswith(b"invalid JSON")
