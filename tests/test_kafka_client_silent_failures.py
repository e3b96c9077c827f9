"""BatchConsumer and the ingest bridge against a real broker: failures that used to pass in silence.

* a static member fenced by another member with its ``group.instance.id`` gets a fatal error
  that librdkafka reports through the error callback only: polling went on returning nothing for
  ever (the bridge stalled, thread alive, nothing forwarded); now ``poll_batch`` raises it;
* a bridge fenced so by another bridge of the same instance stops with an error;
* the producer that replaces a hung one during a broker outage waits for the broker instead of
  ending the bridge when its ``init_transactions`` times out;
* a consumer closed (a worker stopped by SIGINT) after the group assigned it partitions but before
  a poll took the assignment: ``close()`` served the assignment, asked a closing client for the
  committed offsets, waited 30 s for an answer that never came, and raised.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from sparsewatch.consumers import ingest
from sparsewatch.consumers.field_mapping import FieldMapping
from sparsewatch.consumers.ingest import run_ingest, static_member_id
from sparsewatch.consumers.kafka_client import BatchConsumer
from sparsewatch.consumers.retry import StopFlag

from sparsewatch.errors import SparsewatchError
from tests.support.ingest_kafka import make_route
from tests.support.ports import free_port

TWEETS = FieldMapping(id="id_str", text=("full_text",), timestamp="created_at", stream="user.lang")


def _create(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [NewTopic(name, n, 1) for name, n in topics.items()]
    for future in admin.create_topics(wanted).values():
        future.result(30)


def _poll_until_assigned(consumer: BatchConsumer, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not consumer.assignment():
        assert time.monotonic() < deadline, "never assigned"
        consumer.poll_batch(10, timeout=0.2)


def test_a_fenced_static_member_raises_its_fatal_error_instead_of_polling_in_silence(
    kafka_bootstrap: str, topic_name: str
) -> None:
    _create(kafka_bootstrap, {topic_name: 2})
    group, instance = f"{topic_name}-g", f"{topic_name}-0"
    first = BatchConsumer(kafka_bootstrap, group, [topic_name], **{"group.instance.id": instance})
    second = None
    try:
        _poll_until_assigned(first)
        second = BatchConsumer(
            kafka_bootstrap, group, [topic_name], **{"group.instance.id": instance}
        )
        _poll_until_assigned(second)
        deadline = time.monotonic() + 30  # (the first learns it at its next heartbeat)
        with pytest.raises(KafkaException) as raised:
            while time.monotonic() < deadline:
                first.poll_batch(10, timeout=0.2)
        assert raised.value.args[0].fatal()
        assert "fenced" in raised.value.args[0].str()
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_bridge_fenced_by_another_of_its_instance_stops_with_an_error(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """Another consumer joins the bridge's group under the bridge's static instance id (a second
    bridge started with the same ``--instance``): the bridge can never read again and ends with
    an error, where it polled a dead consumer for ever."""
    route = make_route(kafka_bootstrap, topic_name)
    _create(kafka_bootstrap, {route.source_topics[0]: 2, route.docs_topic: 2, route.dlq_topic: 1})
    stop, out = StopFlag(), {}

    def run() -> None:
        try:
            out["stats"] = run_ingest(route, TWEETS, stop)
        except Exception as exc:  # checked by the test
            out["error"] = exc

    bridge = threading.Thread(target=run, daemon=True)
    bridge.start()
    member = static_member_id(route.group_id, route.instance, route.source_topics)
    other = None
    try:
        time.sleep(3.0)  # the bridge joins its group
        other = BatchConsumer(
            kafka_bootstrap, route.group_id, route.source_topics, **{"group.instance.id": member}
        )
        _poll_until_assigned(other)
        bridge.join(30)
        assert not bridge.is_alive(), "the fenced bridge went on polling"
        assert isinstance(out.get("error"), SparsewatchError), out
        assert "fenced" in str(out["error"])
    finally:
        stop.request()
        bridge.join(30)
        if other is not None:
            other.close()


def test_a_replacement_producer_waits_for_a_broker_that_is_down(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The producer replacing a hung one is made while the broker may still be down (the hang
    follows a broker restart): its ``init_transactions`` timing out ended the bridge with
    "cannot start Kafka transactions" whenever the outage outlasted the call's timeout. It is
    retried until the broker answers or a stop is requested (None then)."""
    monkeypatch.setattr(ingest, "_TXN_TIMEOUT_S", 1.0)
    stop, out = StopFlag(), {}
    bootstrap = f"127.0.0.1:{free_port()}"

    def replace() -> None:
        try:
            out["producer"] = ingest._replacement_producer(bootstrap, "tid-down", stop)
        except Exception as exc:  # checked by the test
            out["error"] = exc

    thread = threading.Thread(target=replace, daemon=True)
    thread.start()
    thread.join(5.0)  # five of its timeouts
    assert thread.is_alive(), out
    stop.request()
    thread.join(10.0)
    assert not thread.is_alive() and out == {"producer": None}


def test_closing_before_a_poll_took_the_assignment_neither_waits_nor_raises(
    kafka_bootstrap: str, topic_name: str
) -> None:
    _create(kafka_bootstrap, {topic_name: 2})
    told: list[tuple[str, list[tuple[str, int]]]] = []
    consumer = BatchConsumer(
        kafka_bootstrap,
        f"{topic_name}-g",
        [topic_name],
        on_assign=lambda parts: told.append(("assign", parts)),  # type: ignore[func-returns-value]
        on_revoke=lambda parts: told.append(("revoke", parts)),
    )
    time.sleep(3.0)  # the group's assignment arrives; no poll takes it
    started = time.monotonic()
    consumer.close()
    assert time.monotonic() - started < 5.0
    assert told == []  # neither restored nor checkpointed: never taken up
