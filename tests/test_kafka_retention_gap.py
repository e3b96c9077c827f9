"""An offset the broker no longer holds is reported, not silently skipped.

A worker resumes from the offsets stored with its results. When the topic's retention deleted
messages before they were read (a worker down, or behind, for longer than ``retention.ms``),
librdkafka's ``auto.offset.reset = earliest`` used to jump to the earliest retained message
without a word: results were missing and nothing said so. Now the consumer logs an error with the
number of skipped messages, counts them (``sparsewatch_skipped_messages_total``) and goes on at the
earliest retained message. Retention is simulated with the broker's DeleteRecords.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.metrics import SKIPPED
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.schema import checkpoints
from sparsewatch.storage.store import Store

from sparsewatch.config import Config, load_config
from sparsewatch.runner import build_worker
from tests.support.kafka_topics import (
    consumer_noting_resets,
    produce_messages,
    read_offsets,
    topic_with_deleted_head,
)

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize(
    ("start", "skipped", "said"),
    [
        (3, 7, "7 message(s) before 10 were deleted by the topic's retention"),
        (50, 0, "offset 50 is beyond the partition's end (20)"),
    ],
)
def test_a_start_offset_the_broker_does_not_hold_is_reported_and_reading_goes_on(
    kafka_bootstrap, caplog, start, skipped, said
):
    topic = topic_with_deleted_head(kafka_bootstrap, [b"%d" % i for i in range(20)], 10)
    resets: list[tuple[str, int, int]] = []
    with (
        caplog.at_level("ERROR", logger="sparsewatch.consumers.kafka_client"),
        consumer_noting_resets(kafka_bootstrap, topic, resets, start) as consumer,
    ):
        assert read_offsets(consumer, 10) == list(range(10, 20))
        assert consumer.lag() == {(topic, 0): 0}
    assert resets == [(topic, 0, skipped)]
    [error] = [r.getMessage() for r in caplog.records]
    assert said in error and f"{topic} [0]" in error


class _WatermarksFailOnce:
    """A real consumer whose first watermark query fails, as it does while the broker is
    unreachable; everything else goes to the consumer."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        self.failed = 0

    def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        if not self.failed:
            self.failed += 1
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker unreachable (injected)"))
        return self._consumer.get_watermark_offsets(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def test_a_restart_the_broker_did_not_answer_is_retried_at_the_next_poll(kafka_bootstrap, caplog):
    """The restart at the earliest retained message needs the partition's watermarks: when the
    broker does not answer then, the next poll tries again, and the skipped messages are
    reported once, when the restart happens."""
    topic = topic_with_deleted_head(kafka_bootstrap, [b"%d" % i for i in range(20)], 10)
    resets: list[tuple[str, int, int]] = []
    with (
        caplog.at_level("ERROR", logger="sparsewatch.consumers.kafka_client"),
        consumer_noting_resets(kafka_bootstrap, topic, resets, 3) as consumer,
    ):
        failing = _WatermarksFailOnce(consumer._consumer)
        consumer._consumer = failing  # type: ignore[assignment]
        assert read_offsets(consumer, 10) == list(range(10, 20))
        assert failing.failed == 1
    assert resets == [(topic, 0, 7)]
    [error] = [r.getMessage() for r in caplog.records]
    assert "7 message(s) before 10 were deleted by the topic's retention" in error


def test_a_partition_without_a_start_offset_starts_at_the_earliest_retained_message_quietly(
    kafka_bootstrap, caplog
):
    topic = topic_with_deleted_head(kafka_bootstrap, [b"%d" % i for i in range(20)], 5)
    resets: list[tuple[str, int, int]] = []
    with (
        caplog.at_level("ERROR", logger="sparsewatch.consumers.kafka_client"),
        consumer_noting_resets(kafka_bootstrap, topic, resets) as consumer,
    ):
        assert read_offsets(consumer, 15) == list(range(5, 20))
    assert resets == [] and caplog.records == []


@pytest.mark.slow
def test_a_worker_resuming_below_the_retained_messages_says_how_many_it_lost(
    kafka_bootstrap, tmp_path, caplog
):
    """The detector stored resume offset 0, and the broker has since deleted the first 25 of
    its 60 messages: the worker processes the 35 left, logs the 25 it could not read and counts
    them in its metrics."""
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": f"gap-{uuid.uuid4().hex[:8]}",
            "SPARSEWATCH_KAFKA_PARTITIONS": "1",
            "SPARSEWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'gap.db'}",
            "SPARSEWATCH_WINDOWS_COUNT": "20",
            "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "10",
            "SPARSEWATCH_DETECTOR_MAX_ATOMS": "100",
            "SPARSEWATCH_ANOMALY_ENABLED": "false",
        }
    )
    topic = config.kafka.topic("docs")
    docs = generate_stream(60, kind="tweet", stream="s", seed=4)
    end = {"stream": "s", "end_of_stream": True}
    produce_messages(kafka_bootstrap, topic, ((b"s", json.dumps(d).encode()) for d in [*docs, end]))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 25)]).values():
        future.result(30)
    store = Store.open(config.resolved_database_url)
    worker = build_worker("detector", config, store)
    with store.transaction() as tx:  # where an earlier run of the group stopped
        tx.set_partition_offsets(worker.group_id, topic, {0: 0})
    before = SKIPPED.labels("detector")._value.get()
    runner = threading.Thread(target=worker.run, kwargs={"until_idle_s": 3.0})
    try:
        with caplog.at_level("ERROR", logger="sparsewatch.consumers.kafka_client"):
            runner.start()
            runner.join(120)
        assert not runner.is_alive()
        stored = {d["doc_id"] for d in store.documents(streams=["s"], limit=None)}
        assert stored == {d["id"] for d in docs[25:]}
        assert SKIPPED.labels("detector")._value.get() - before == 25
        assert any("25 message(s) before 25 were deleted" in r.getMessage() for r in caplog.records)
        assert store.partition_offsets(worker.group_id, topic) == {0: 61}
    finally:
        worker.stop()
        runner.join(60)
        store.dispose()


def _retention_config(bootstrap: str, tmp_path: Path, **extra: str) -> Config:
    return load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": f"ret-{uuid.uuid4().hex[:8]}",
            "SPARSEWATCH_KAFKA_PARTITIONS": "1",
            "SPARSEWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'ret.db'}",
            "SPARSEWATCH_WINDOWS_SIZE": "1h",
            "SPARSEWATCH_WINDOWS_ALLOWED_LATENESS": "30m",
            "SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY": "10",
            **extra,
        }
    )


@pytest.mark.parametrize(
    ("role", "retention_ms", "age_limit_s", "warned"),
    [
        ("detector", "60000", 0.0, True),  # shorter than a window: a checkpoint every window
        ("detector", "25200000", 3600.0, False),  # 7 h: 3.5 h - 2 windows of 1 h - 30 min
        ("detector", "604800000", 293400.0, False),  # 7 days: 81.5 h, longer than 10 windows
        ("anomaly", "18000000", 0.0, False),  # the anomaly worker's input, the scores topic: 5 h
    ],
)
def test_checkpoints_come_often_enough_for_the_topics_retention(
    kafka_bootstrap, tmp_path, caplog, role, retention_ms, age_limit_s, warned
):
    """A crash re-reads a stream from its last checkpoint: the workers bound their checkpoints'
    age so that this fits in half their input topic's retention (said at start when that comes
    before ``windows.checkpoint_every`` windows), and warn when a window does not fit in all
    of it."""
    config = _retention_config(kafka_bootstrap, tmp_path)
    topic = config.kafka.topic("docs" if role == "detector" else "scores")
    ensure_topics(kafka_bootstrap, {topic: 1}, **{"retention.ms": retention_ms})
    store = Store.open(config.resolved_database_url)
    try:
        with caplog.at_level("INFO", logger="sparsewatch.runner"):
            loop = build_worker(role, config, store)
    finally:
        store.dispose()
    assert loop.max_checkpoint_age_s == pytest.approx(age_limit_s)
    assert loop.checkpoint_every == 10
    said = [r.getMessage() for r in caplog.records if "retention.ms" in r.getMessage()]
    bounded = [m for m in said if "checkpoints a live stream" in m]
    hours = int(retention_ms) / 3_600_000
    assert bounded == (
        [
            f"{role} checkpoints a live stream at least every {age_limit_s / 3600:.3g} h, before "
            "its 10 windows (windows.checkpoint_every) when they span longer: topic "
            f"{topic} keeps messages for {hours:.3g} h (retention.ms), and a restart after a "
            "crash re-reads the stream from its last checkpoint, which must fit in half of that"
        ]
        if age_limit_s < 10 * 3600
        else []
    )
    warnings = [m for m in said if m not in bounded]
    if warned:
        assert warnings == [
            f"topic {topic} keeps messages for 0.0167 h (retention.ms) but a window spans 1.5 h "
            "(windows.size + windows.allowed_lateness): a worker restarted after a crash re-reads "
            "its open windows from Kafka, and messages deleted by then are lost; raise the "
            "topic's retention.ms above the window plus the longest outage"
        ]
    else:
        assert warnings == []


@pytest.mark.slow
def test_a_stream_whose_checkpoint_grew_too_old_is_checkpointed_at_its_next_window(
    kafka_bootstrap, tmp_path
):
    """A topic keeping 7 h with 1-hour windows allows a checkpoint an hour old: a stream restored
    from a checkpoint two hours old is checkpointed with its next window, while a stream whose
    checkpoint is fresh waits for its ``windows.checkpoint_every`` windows (100 here), as before.
    The windows are an hour of event time each, so no count of them could tell the two apart."""
    config = _retention_config(
        kafka_bootstrap,
        tmp_path,
        SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY="100",
        SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S="600",
        SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS="100",
        SPARSEWATCH_DETECTOR_MAX_ATOMS="50",
        SPARSEWATCH_DETECTOR_NEW_ATOMS_PER_WINDOW="0",
    )
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 1}, **{"retention.ms": "25200000"})
    docs = {s: generate_stream(600, kind="tweet", stream=s, seed=i) for i, s in enumerate("ab")}
    producer = make_producer(kafka_bootstrap)

    def send(part: slice) -> None:
        for stream, stream_docs in docs.items():
            for d in stream_docs[part]:
                producer.produce(topic, key=stream.encode(), value=json.dumps(d).encode())
        assert producer.flush(30) == 0

    send(slice(0, 300))  # about 2.6 hours of each stream
    store = Store.open(config.resolved_database_url)
    try:
        build_worker("detector", config, store).run(until_idle_s=3.0)  # shutdown checkpoints
        group = f"{config.kafka.group_id}.detector"
        with store.transaction() as tx:
            tx.connection.execute(
                sa.update(checkpoints)
                .where(checkpoints.c.stream == "a")
                .values(created_at=datetime.now(UTC) - timedelta(hours=2))
            )
        before = {s: c.created_at for s, c in store.load_checkpoints(group).items()}
        send(slice(300, 600))
        worker = build_worker("detector", config, store)
        assert worker.max_checkpoint_age_s == 3600
        runner = threading.Thread(target=worker.run)
        runner.start()
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                now = {s: c.created_at for s, c in store.load_checkpoints(group).items()}
                windows = {s: 0 for s in docs}
                for w in store.windows(limit=None):
                    windows[w["stream"]] += 1
                if now["a"] != before["a"] and windows["b"] >= 4:
                    break
                time.sleep(0.2)
        finally:
            worker.stop()
            runner.join(60)
    finally:
        store.dispose()
    assert now["a"] > before["a"]  # written again with its first window after the restart
    assert now["b"] == before["b"]  # fresh: not rewritten while two more of its windows closed
    assert windows["b"] >= 4


def test_status_shows_the_messages_the_broker_deleted_before_the_worker_read_them(
    kafka_bootstrap, tmp_path, monkeypatch, capsys
):
    from tests.support.cli import run_cli

    prefix = f"gapstatus-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("SPARSEWATCH_KAFKA_GROUP_ID", prefix)
    monkeypatch.setenv("SPARSEWATCH_KAFKA_TOPIC_PREFIX", prefix)
    url = f"sqlite:///{tmp_path / 'status.db'}"
    topic = f"{prefix}.docs"
    produce_messages(kafka_bootstrap, topic, ((b"s", b"%d" % i) for i in range(20)))
    store = Store.open(url)
    try:
        with store.transaction() as tx:  # the detector stopped at offset 3
            tx.set_partition_offsets(f"{prefix}.detector", topic, {0: 3})
    finally:
        store.dispose()
    args = ("status", "--database-url", url, "--bootstrap-servers", kafka_bootstrap)
    code, out, _ = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and "deleted unread" not in out  # nothing deleted: no such column
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 12)]).values():
        future.result(30)
    code, out, err = run_cli(monkeypatch, capsys, *args, "--format", "json")
    assert code == 0, err
    [row] = [o for o in json.loads(out)["offsets"] if o["topic"] == topic]
    assert (row["next_offset"], row["deleted_unread"], row["not_stored"]) == (3, 9, 8)
    code, out, _ = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and "deleted unread" in out
