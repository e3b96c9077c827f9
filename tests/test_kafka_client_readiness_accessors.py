"""What a BatchConsumer tells the readiness probes (consumers/kafka_client.py: ``member_id``,
``brokers_down_since``; read by consumers/health.py's ConsumerReadiness), against a real broker
and an address where none answers."""

from __future__ import annotations

import socket
import time

from sparsewatch.consumers.health import ConsumerReadiness, Heartbeat
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import BatchConsumer


def test_a_consumer_has_a_member_id_once_it_joined_its_group(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """No member id (and not ready: joining) before the group answered; an id, with the broker
    up and the consumer ready, once it was assigned its partition."""
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    consumer = BatchConsumer(kafka_bootstrap, f"{topic_name}-g", [topic_name])
    readiness = ConsumerReadiness(consumer, Heartbeat("test"))
    try:
        assert consumer.member_id() is None
        assert readiness.why_not(time.monotonic()) == "joining its consumer group"
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "never assigned its partition"
            assert consumer.poll_batch(100, timeout=0.2) == []
        member = consumer.member_id()
        assert isinstance(member, str) and member
        assert consumer.brokers_down_since() is None
        assert readiness.why_not(time.monotonic()) is None
    finally:
        consumer.close()


def test_a_consumer_without_a_broker_says_since_when_all_were_down() -> None:
    """Nothing listens at the bootstrap address: the client reports every broker down, and the
    consumer says when (a monotonic time within the polls), never joined."""
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    consumer = BatchConsumer(f"127.0.0.1:{port}", "readiness-accessors", ["no-such-topic"])
    try:
        started = time.monotonic()
        assert consumer.brokers_down_since() is None
        while consumer.brokers_down_since() is None:
            assert time.monotonic() - started < 30, "never reported every broker down"
            assert consumer.poll_batch(100, timeout=0.2) == []
        down_since = consumer.brokers_down_since()
        assert down_since is not None and started <= down_since <= time.monotonic()
        assert consumer.member_id() is None
    finally:
        consumer.close()
