"""Work between two polls that outlasts the broker's ``max.poll.interval.ms`` (real Kafka).

A day's window of a busy stream can take minutes to compute. Before ``BatchConsumer.keepalive``
the broker then took the worker's partitions away (``_MAX_POLL_EXCEEDED``) and gave them back, and
the worker recomputed the same windows from its checkpoint for ever. These tests shorten the
interval to 10 s (librdkafka's floor is the 10 s session timeout) and make a window's computation
last 14 s: the real core's work plus a sleep, the only stand-in here (broker and database are real).
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from sparsewatch.consumers import detector_worker
from sparsewatch.consumers.detector_core import StreamModels
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import BatchConsumer, make_producer
from sparsewatch.consumers.windowing import ClosedWindow
from sparsewatch.consumers.worker import WorkerLoop

from sparsewatch.config import Config, DetectorConfig, load_config
from sparsewatch.runner import build_worker, open_results_store
from tests.support.pipeline_kafka import (
    assert_same,
    offline_scores,
    pipeline_env,
    produce,
    stored_scores,
    streams,
)

SHORT_POLL_INTERVAL = {"max.poll.interval.ms": 10_000}
SLOW_S = 14.0  # longer than the interval


def _reading(bootstrap: str, name: str) -> tuple[str, BatchConsumer, list[str], list[int]]:
    """A topic of 3,000 messages, a consumer recording its revocations and losses, and the
    offsets of its first 50 messages read (many more are fetched already)."""
    topic = f"{name}-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: 1})
    producer = make_producer(bootstrap)
    for i in range(3000):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(30) == 0
    events: list[str] = []
    consumer = BatchConsumer(
        bootstrap,
        f"{topic}-group",
        [topic],
        on_revoke=lambda ps: events.append("revoked"),
        on_lost=lambda ps: events.append("lost"),
        **SHORT_POLL_INTERVAL,
    )
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while len(seen) < 50 and time.monotonic() < deadline:
        seen += [m.offset() for m in consumer.poll_batch(50, timeout=1.0)]
    return topic, consumer, events, seen


def _read_to_the_end(consumer: BatchConsumer, seen: list[int]) -> None:
    deadline = time.monotonic() + 60
    while (not seen or seen[-1] < 2999) and time.monotonic() < deadline:
        seen += [m.offset() for m in consumer.poll_batch(500, timeout=1.0)]


def test_reading_continues_exactly_after_work_longer_than_the_poll_interval(kafka_bootstrap):
    """Messages fetched before the pause are neither lost nor read twice, the member keeps its
    partition (no revocation, no loss), and an offset committed during the work reaches the
    broker once the work is done. Without the keep-alive the partition is lost after 10 s and
    read again from the start."""
    topic, consumer, events, seen = _reading(kafka_bootstrap, "keepalive")
    try:
        with consumer.keepalive():
            consumer.commit_offsets({(topic, 0): len(seen)}, asynchronous=True)
            time.sleep(SLOW_S)
            assert consumer.lag() == {(topic, 0): None}  # unknown while the helper polls
        _read_to_the_end(consumer, seen)
        assert seen == list(range(3000))
        assert events == []
        committed = consumer._consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == 50
    finally:
        consumer.close()


def test_a_partition_lost_during_the_work_is_read_again_once_assigned_again(tmp_path):
    """The broker goes away for longer than the session timeout while the helper polls: the
    partition is lost (served once the work is done) and assigned again at the next poll. It
    must not stay paused: reading goes on to the partition's end. (Before the fix the client kept
    it paused through the new assignment, and a worker read nothing more after a broker
    restart.)"""
    from sparsewatch.kafka_local import LocalKafka

    broker = LocalKafka(tmp_path / "broker", port=0)
    bootstrap = broker.up()
    port = int(bootstrap.rsplit(":", 1)[1])
    consumer = None
    try:
        _, consumer, events, seen = _reading(bootstrap, "keepalive-lost")
        with consumer.keepalive():
            time.sleep(5.0)  # the helper polls
            broker.kill()
            time.sleep(14.0)  # longer than the 10 s session
            LocalKafka(tmp_path / "broker", port=port).up()
        _read_to_the_end(consumer, seen)
        assert events == ["lost"]
        assert seen[-1] == 2999
    finally:
        if consumer is not None:
            consumer.close()
        LocalKafka(tmp_path / "broker", port=port).down()


@pytest.fixture
def slow_second_window(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every stream's window 2 takes :data:`SLOW_S` longer; returns the windows computed."""
    computed: list[tuple[str, int]] = []
    real = detector_worker.process_window

    def slow(models: StreamModels, window: ClosedWindow, config: DetectorConfig) -> Any:
        computed.append((window.stream, window.seq))
        if window.seq == 2:
            time.sleep(SLOW_S)
        return real(models, window, config)

    monkeypatch.setattr(detector_worker, "process_window", slow)
    return computed


def _run(worker: WorkerLoop, until_idle_s: float) -> threading.Thread:
    thread = threading.Thread(target=worker.run, kwargs={"until_idle_s": until_idle_s})
    thread.start()
    return thread


def _detector_config(bootstrap: str, prefix: str, tmp_path: Path) -> Config:
    """The detector alone on count windows of 300, without the topic models (a faster core)."""
    env = pipeline_env(
        bootstrap,
        prefix,
        f"sqlite:///{tmp_path / 'results.db'}",
        SPARSEWATCH_ANOMALY_ENABLED="false",
        SPARSEWATCH_WINDOWS_COUNT="300",
        SPARSEWATCH_DETECTOR_TOPICS="false",
        SPARSEWATCH_DETECTOR_EMERGING_TOPICS="false",
    )
    return load_config(env=env)


def test_a_window_slower_than_the_poll_interval_is_computed_once(
    kafka_bootstrap, tmp_path, slow_second_window
):
    prefix = f"slowwin-{uuid.uuid4().hex[:8]}"
    config = _detector_config(kafka_bootstrap, prefix, tmp_path)
    docs = [d for d in streams(1000) if d["stream"] == "alpha"]  # windows 0-2, 100 left
    produce(kafka_bootstrap, f"{prefix}.docs", docs)
    store = open_results_store(config)
    try:
        thread = _run(build_worker("detector", config, store, SHORT_POLL_INTERVAL), 20.0)
        thread.join(180)
        assert not thread.is_alive()
        assert slow_second_window == [("alpha", seq) for seq in range(4)]  # 3: by the idle timer
        assert_same(stored_scores(store), offline_scores(config, docs))
    finally:
        store.dispose()


def test_a_member_joining_during_a_slow_window_takes_over_without_loss_or_duplicates(
    kafka_bootstrap, tmp_path, slow_second_window
):
    """Two streams on two partitions; a second worker joins the group while the first computes
    a slow window: the revocation waits for that window, then the partition moves. Every
    document is stored once, as the core alone computes it."""
    prefix = f"slowjoin-{uuid.uuid4().hex[:8]}"
    config = _detector_config(kafka_bootstrap, prefix, tmp_path)
    docs = streams(1200)
    produce(kafka_bootstrap, f"{prefix}.docs", docs)
    stores = [open_results_store(config), open_results_store(config)]
    try:
        first = _run(build_worker("detector", config, stores[0], SHORT_POLL_INTERVAL), 20.0)
        deadline = time.monotonic() + 60
        while not any(seq == 2 for _, seq in slow_second_window) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3.0)  # inside the slow window
        second = _run(build_worker("detector", config, stores[1], SHORT_POLL_INTERVAL), 20.0)
        first.join(300)
        second.join(300)
        assert not first.is_alive() and not second.is_alive()
        stored = stored_scores(stores[0])
        windows = stores[0].windows()
    finally:
        for store in stores:
            store.dispose()
    assert len({(w["stream"], w["window_seq"]) for w in windows}) == len(windows)
    assert_same(stored, offline_scores(config, docs))
