"""A quiet stream's windows close on the idle timer while a busy stream shares its partition.

The worker closes a stream's windows by the wall clock only when its next document cannot be in
a backlog of its partition. It used to require an instant with nothing left to read, and start
the stream's idle time over at every check with a backlog; a busy stream's documents arrive while
windows are computed, so the partition had one at most checks, and the quiet stream's last window
stayed open for as long as the busy stream kept sending. Now a stream is idle once everything its
partition held at a time ``idle_timeout_s`` after the stream's last document has been read.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.worker import _Partition
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from sparsewatch.runner import build_worker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

T0 = 1_767_225_600_000  # 2026-01-01T00:00Z, epoch ms
MINUTE_MS = 60_000


def _closed_windows(store: Store, stream: str) -> list[tuple[int, str]]:
    windows = store.windows(limit=None)
    return [(w["window_seq"], w["closed_by"]) for w in windows if w["stream"] == stream]


def test_a_partition_is_read_up_to_the_time_of_the_last_high_watermark_reached():
    part = _Partition(next_offset=100)
    assert part.read_up_to_at == float("-inf")
    part.observe_lag(1.0, 5)  # the high watermark is 105 at t = 1
    part.next_offset = 103
    part.observe_lag(2.0, 4)  # 107 at t = 2
    assert part.read_up_to_at == float("-inf")  # 105 not reached yet
    part.next_offset = 106
    part.observe_lag(3.0, 3)  # 109 at t = 3; 105 reached
    assert part.read_up_to_at == 1.0
    part.next_offset = 110
    part.observe_lag(4.0, 2)  # behind again, but all it held at t = 3 is read
    assert part.read_up_to_at == 3.0
    part.observe_lag(5.0, 0)
    assert part.read_up_to_at == 5.0 and not part.highs
    part.observe_lag(6.0, 4)  # 114 at t = 6 ...
    part.observe_lag(7.0, 4)  # ... and still at t = 7: nothing held then is unread once read
    part.next_offset = 114
    part.observe_lag(8.0, 1)
    assert part.read_up_to_at == 7.0
    unknown = _Partition()  # nothing read from it yet: only "nothing to read" tells
    unknown.observe_lag(1.0, 7)
    assert unknown.read_up_to_at == float("-inf")
    unknown.observe_lag(2.0, 0)
    assert unknown.read_up_to_at == 2.0


def test_a_quiet_stream_closes_by_the_idle_timer_while_a_busy_one_shares_its_partition(
    kafka_bootstrap, tmp_path
):
    prefix = f"idle-{uuid.uuid4().hex[:8]}"
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
            "SPARSEWATCH_KAFKA_PARTITIONS": "1",
            "SPARSEWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'idle.db'}",
            "SPARSEWATCH_WINDOWS_SIZE": "1m",
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "2",
            "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "20",
            "SPARSEWATCH_DETECTOR_MAX_ATOMS": "100",
            "SPARSEWATCH_DETECTOR_NEW_ATOMS_PER_WINDOW": "0",
            "SPARSEWATCH_ANOMALY_ENABLED": "false",
        }
    )
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 1})  # both streams on one partition
    quiet = generate_stream(5, kind="tweet", stream="quiet", seed=1)
    busy = generate_stream(600, kind="tweet", stream="busy", seed=2)
    producer = make_producer(kafka_bootstrap)
    store = Store.open(config.resolved_database_url)
    worker = build_worker("detector", config, store)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        # The busy stream: 10 documents a second, a window closed every 10 documents; the quiet
        # stream's documents once the busy one's warm-up is over.
        sent_quiet_at = closed_at = None
        for i, doc in enumerate(busy):
            ts = T0 + (i // 10) * MINUTE_MS + i % 10
            producer.produce(topic, key=b"busy", value=json.dumps({**doc, "timestamp": ts}))
            if i == 50:
                for j, d in enumerate(quiet):
                    value = json.dumps({**d, "timestamp": T0 + j})
                    producer.produce(topic, key=b"quiet", value=value)
                sent_quiet_at = time.monotonic()
            producer.poll(0)
            time.sleep(0.1)
            if i > 50 and i % 10 == 0 and _closed_windows(store, "quiet"):
                closed_at = time.monotonic()
                break
        assert producer.flush(30) == 0
        # Closed while the busy stream was still sending (for a minute), not once it stopped.
        assert _closed_windows(store, "quiet") == [(T0 // MINUTE_MS, "idle")]
        assert sent_quiet_at is not None and closed_at is not None
        assert closed_at - sent_quiet_at < 30.0
    finally:
        worker.stop()
        runner.join(60)
        store.dispose()
