"""The consumer wrapper against a real broker: explicit commits lose and duplicate nothing."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import BatchConsumer, produce, producer_config

N_DOCS = 1000


def _produce(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer(producer_config(bootstrap))
    for i in range(n):
        doc = {"id": f"doc-{i}", "text": f"document number {i}", "timestamp": 1_700_000_000_000 + i}
        producer.produce(topic, key=f"s{i % 3}", value=json.dumps(doc).encode())
        if i % 200 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def _consume(bootstrap: str, topic: str, group: str, stop_after: int | None) -> list[str]:
    """Consume in batches, committing after each; stop (without committing more) after a limit."""
    seen: list[str] = []
    empty_polls = 0
    with BatchConsumer(bootstrap, group, [topic]) as consumer:
        while empty_polls < 5:
            batch = consumer.poll_batch(max_messages=97, timeout=1.0)
            if not batch:
                empty_polls += 1
                continue
            empty_polls = 0
            seen.extend(json.loads(m.value())["id"] for m in batch)
            consumer.commit(batch)
            if stop_after is not None and len(seen) >= stop_after:
                break
    return seen


def test_two_consumers_in_one_group_see_every_document_once(kafka_bootstrap, topic_name):
    ensure_topics(kafka_bootstrap, {topic_name: 3})
    _produce(kafka_bootstrap, topic_name, N_DOCS)
    group = f"g-{topic_name}"
    first = _consume(kafka_bootstrap, topic_name, group, stop_after=400)
    second = _consume(kafka_bootstrap, topic_name, group, stop_after=None)
    assert 400 <= len(first) < N_DOCS
    assert len(second) == N_DOCS - len(first)
    together = first + second
    assert len(together) == len(set(together)) == N_DOCS
    assert set(together) == {f"doc-{i}" for i in range(N_DOCS)}


def test_uncommitted_batch_is_redelivered(kafka_bootstrap, topic_name):
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    _produce(kafka_bootstrap, topic_name, 50)
    group = f"g-{topic_name}"
    with BatchConsumer(kafka_bootstrap, group, [topic_name]) as consumer:
        batch: list = []
        while len(batch) < 50:
            batch += consumer.poll_batch(max_messages=50, timeout=2.0)
        consumer.commit(batch[:20])  # crash after making only 20 durable
    again = _consume(kafka_bootstrap, topic_name, group, stop_after=None)
    assert again == [f"doc-{i}" for i in range(20, 50)]


def test_lag_is_unknown_before_a_fetch_and_exact_after(kafka_bootstrap, topic_name):
    """An empty partition is caught up, a partition with a backlog is not, and never a guess."""
    ensure_topics(kafka_bootstrap, {topic_name: 2})
    producer = Producer(producer_config(kafka_bootstrap))
    for _ in range(50):
        producer.produce(topic_name, value=b"x", partition=0)
    assert producer.flush(30) == 0
    with BatchConsumer(kafka_bootstrap, f"lag-{topic_name}", [topic_name]) as c:
        seen = 0
        lags = []
        while seen < 50:
            seen += len(c.poll_batch(max_messages=10, timeout=1.0))
            lags.append(c.lag())
            assert set(lags[-1]) == set(c.assignment())  # every owned partition, known or not
        # Whatever was reported on the way: never "caught up" on partition 0 before the end.
        assert all(lag.get((topic_name, 0)) != 0 for lag in lags[:-1])
        final = c.lag()
        while None in final.values():
            c.poll_batch(max_messages=10, timeout=0.5)
            final = c.lag()
        assert final == {(topic_name, 0): 0, (topic_name, 1): 0}
        c.commit_offsets({(topic_name, 0): 50})
    # A restart at the committed end, with nothing left to read: caught up, not "unknown".
    with BatchConsumer(kafka_bootstrap, f"lag-{topic_name}", [topic_name]) as c:
        for _ in range(20):
            assert c.poll_batch(max_messages=10, timeout=0.5) == []
            if c.lag() == {(topic_name, 0): 0, (topic_name, 1): 0}:
                break
        assert c.lag() == {(topic_name, 0): 0, (topic_name, 1): 0}


def test_produce_waits_for_a_full_local_queue(kafka_bootstrap, topic_name):
    """A producer whose local queue holds 5 messages: ``produce`` raises ``BufferError`` at the
    6th, the helper waits for deliveries instead, and every message arrives once."""
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    producer = Producer(producer_config(kafka_bootstrap, **{"queue.buffering.max.messages": 5}))
    with pytest.raises(BufferError):
        for i in range(6):
            producer.produce(topic_name, key=b"s", value=json.dumps({"id": f"x-{i}"}).encode())
    assert producer.flush(30) == 0
    for i in range(200):
        produce(producer, topic_name, b"s", json.dumps({"id": f"doc-{i}"}).encode(), 0.05)
    assert producer.flush(30) == 0
    seen = _consume(kafka_bootstrap, topic_name, f"g-{topic_name}", None)
    assert sorted(seen) == sorted([f"x-{i}" for i in range(5)] + [f"doc-{i}" for i in range(200)])


def test_messages_already_fetched_are_handed_out_without_waiting_for_a_full_batch(
    kafka_bootstrap, topic_name
):
    """``poll_batch`` hands out what the consumer has already fetched at once, however short of
    ``max_messages``: the last messages of a backlog come without waiting out the timeout.
    librdkafka's ``consume(1000, 30)`` held them for the whole 30 s."""
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    _produce(kafka_bootstrap, topic_name, 5)
    got: list = []
    with BatchConsumer(kafka_bootstrap, f"g-{topic_name}", [topic_name]) as consumer:
        start = time.monotonic()
        while len(got) < 5 and time.monotonic() - start < 60:
            got += consumer.poll_batch(max_messages=1000, timeout=1.0)
        _produce(kafka_bootstrap, topic_name, 300)
        time.sleep(3.0)  # fetched meanwhile, in the background
        start = time.monotonic()
        backlog = consumer.poll_batch(max_messages=1000, timeout=30.0)
        waited_s = time.monotonic() - start
    assert len(got) == 5
    assert len(backlog) == 300
    assert waited_s < 10
