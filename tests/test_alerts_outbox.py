"""The alerts topic is sent from the committed alerts (an outbox, revision 0008), against a real
broker and real SQLite and PostgreSQL: a job whose transaction fails publishes none of its
alerts; the alerts a crash left pending between a commit and the sending are sent when a writer
starts, before any job, each writer sending only the kinds its worker raises; alerts the broker
did not take stay pending, the job still committed, and go with their stream's next alerts, or
with the sweep of leftovers every minute; each writer sends only its own alerts topic's."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from confluent_kafka import Message
from sparsewatch.consumers import writer as writer_module
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.retry import StopFlag
from sparsewatch.consumers.writer import (
    Destination,
    ResultWriter,
    WriteJob,
    WriterError,
    make_writer,
)
from sparsewatch.storage.store import Store

from tests.support.kafka_topics import consume_messages
from tests.support.writer_jobs import T0

pytestmark = pytest.mark.kafka

DETECTOR_KINDS = ("novel_document", "emerging_topic")


def _destination(bootstrap: str, kinds: tuple[str, ...] | None = DETECTOR_KINDS) -> Destination:
    prefix = f"outbox-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {f"{prefix}.{t}": 1 for t in ("scores", "dlq", "alerts")})
    return Destination(
        bootstrap,
        "g",
        f"{prefix}.docs",
        f"{prefix}.scores",
        f"{prefix}.dlq",
        f"{prefix}.alerts",
        alert_kinds=kinds,
    )


def _alert(subject: str, stream: str = "s", kind: str = "novel_document") -> dict[str, Any]:
    return {
        "kind": kind,
        "stream": stream,
        "subject_id": subject,
        "score": 0.75,
        "window_seq": 3,
        "event_time": T0,
        "summary": f"about {subject}",
    }


def _sent(bootstrap: str, destination: Destination) -> list[tuple[str, str, str]]:
    """The alerts topic's messages as (kind, stream, subject), in offset order."""
    assert destination.alerts_topic is not None
    return [_key(m) for m in consume_messages(bootstrap, destination.alerts_topic)]


def _key(message: Message) -> tuple[str, str, str]:
    kind, stream, subject = json.loads(dict(message.headers())["alert_key"])
    return kind, stream, subject


def _pending(store: Store) -> set[str]:
    return {row["subject_id"] for row in store.pending_alerts()}


def _store_pending(store: Store, destination: Destination, rows: list[dict[str, Any]]) -> None:
    """Alerts committed and not sent: what a writer killed between the two leaves."""
    with store.transaction() as tx:
        tx.insert_alerts(rows, publish_to=destination.alerts_topic)


def test_a_job_whose_transaction_fails_publishes_none_of_its_alerts(kafka_bootstrap, database_url):
    """The alerts were sent before the transaction: one that then failed left alerts on the topic
    that the table never held (and a window redone with more documents stored others)."""
    destination = _destination(kafka_bootstrap)
    bad_topic_row = {"stream": "s", "window_seq": 3}  # missing its topic's fields: refused
    with Store.open(database_url) as store:
        writer = make_writer("thread", store, destination, "outbox")
        try:
            failing = WriteJob(
                calls=[("insert_alerts", ([_alert("a")],)), ("upsert_topics", ([bad_topic_row],))]
            )
            with pytest.raises(WriterError, match="topic"):
                writer.submit(failing).result()
            assert store.alerts(limit=None) == []
            writer.submit(WriteJob(calls=[("insert_alerts", ([_alert("b")],))])).result()
        finally:
            writer.close()
        assert _pending(store) == set()
        assert [a["subject_id"] for a in store.alerts(limit=None)] == ["b"]
    assert _sent(kafka_bootstrap, destination) == [("novel_document", "s", "b")]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_alerts_a_crash_left_pending_are_sent_when_a_writer_starts(
    kafka_bootstrap, database_url, mode
):
    """Before any job, oldest first, only the kinds of the writer's worker (the anomaly worker's
    writer sends its own); once: a second writer sends nothing again. Alerts stored without
    publishing are never sent."""
    destination = _destination(kafka_bootstrap)
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.insert_alerts([_alert("unpublished")])  # a worker with publish_alerts off
        _store_pending(
            store,
            destination,
            [
                _alert("a1", "a"),
                _alert("odd", "a", kind="anomaly"),
                _alert("b1", "b", kind="emerging_topic"),
                _alert("a2", "a"),
            ],
        )
        for _ in range(2):
            make_writer(mode, store, destination, "outbox").close()
            assert _pending(store) == {"odd"}
    assert _sent(kafka_bootstrap, destination) == [
        ("novel_document", "a", "a1"),
        ("emerging_topic", "b", "b1"),
        ("novel_document", "a", "a2"),
    ]


def test_alerts_the_broker_did_not_take_stay_pending_and_go_with_the_next_window(
    kafka_bootstrap, database_url, caplog
):
    """The broker unreachable after the commit: the job is committed and returns, its alerts
    stay pending (logged); the stream's next job, here one with another stream's alert, sends
    them first. Nothing of another stream is sent by a job that does not write it."""
    destination = _destination(kafka_bootstrap)
    with Store.open(database_url) as store:
        _store_pending(store, destination, [_alert("idle", "quiet")])
        broker = make_producer(kafka_bootstrap)
        writer = ResultWriter(store, broker, destination, StopFlag())
        writer.send_pending_alerts()  # the start: what a crash left
        assert _pending(store) == set()
        unreachable = make_producer("127.0.0.1:1", **{"message.timeout.ms": 1000})
        writer.producer = unreachable
        writer.write(WriteJob(calls=[("insert_alerts", ([_alert("s1", "s")],))]))
        assert "could not all be sent" in caplog.text
        assert [a["subject_id"] for a in store.alerts(limit=None, streams=["s"])] == ["s1"]
        assert _pending(store) == {"s1"}
        _store_pending(store, destination, [_alert("q2", "quiet")])
        writer.producer = broker
        writer.write(WriteJob(calls=[("insert_alerts", ([_alert("t1", "t")],))]))
        writer.close()
        assert _pending(store) == {"q2"}  # its stream wrote nothing since
    assert _sent(kafka_bootstrap, destination) == [
        ("novel_document", "quiet", "idle"),
        ("novel_document", "s", "s1"),
        ("novel_document", "t", "t1"),
    ]


def test_a_writer_sends_only_the_alerts_pending_for_its_own_topic(kafka_bootstrap, database_url):
    """Two pipelines (topic prefixes) sharing a database: a writer's start sent the other's
    pending alerts to its own topic and cleared them, so that they never reached theirs."""
    mine, theirs = _destination(kafka_bootstrap), _destination(kafka_bootstrap)
    with Store.open(database_url) as store:
        _store_pending(store, theirs, [_alert("theirs", "a")])
        _store_pending(store, mine, [_alert("mine", "b")])
        make_writer("thread", store, mine, "outbox").close()
        assert _pending(store) == {"theirs"}
        make_writer("thread", store, theirs, "outbox").close()
        assert _pending(store) == set()
    assert _sent(kafka_bootstrap, mine) == [("novel_document", "b", "mine")]
    assert _sent(kafka_bootstrap, theirs) == [("novel_document", "a", "theirs")]


def test_leftovers_of_a_stream_without_new_alerts_are_swept(
    kafka_bootstrap, database_url, monkeypatch
):
    """Alerts another writer left pending (it stopped) of a stream that raises no alert since:
    they waited for the next start of a writer; now every writer sweeps the leftovers, pending
    for longer than a moment, once a minute (here at once)."""
    destination = _destination(kafka_bootstrap)
    with Store.open(database_url) as store:
        writer = ResultWriter(store, make_producer(kafka_bootstrap), destination, StopFlag())
        writer.send_pending_alerts()  # the start: nothing pending yet
        _store_pending(store, destination, [_alert("left", "x")])
        writer.write(WriteJob(calls=[("insert_alerts", ([_alert("y1", "y")],))]))
        assert _pending(store) == {"left"}  # neither its stream's nor a minute old
        monkeypatch.setattr(writer_module, "_SWEEP_EVERY_S", 0)
        monkeypatch.setattr(writer_module, "_LEFTOVER_AGE_S", 0)
        writer.write(WriteJob())
        writer.close()
        assert _pending(store) == set()
    assert _sent(kafka_bootstrap, destination) == [
        ("novel_document", "y", "y1"),
        ("novel_document", "x", "left"),
    ]
