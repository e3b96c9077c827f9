"""A live stream's lull does not cut its current window short (``windows.idle_close``).

Event times near the worker's wall clock, one-hour windows, a one-second idle timeout. With the
default ``"ended"`` the idle timer closes a quiet stream's window only once the wall clock has
passed its end (plus the allowed lateness): a stream whose window ended a while ago closes at
once, but the window a live stream is in stays open through the lull, and the documents after it
are learnt in that window instead of being stored late. With ``"all"`` the lull closes it and the
documents after it are late (the earlier behaviour, still available).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import pytest
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.worker import WorkerLoop
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store

from sparsewatch.config import Config, load_config
from sparsewatch.runner import build_worker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MINUTE_MS = 60_000
IDLE_S = 1.0


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@contextmanager
def _running_detector(config: Config) -> Iterator[tuple[Store, WorkerLoop]]:
    """A detector worker running on a thread, with its store; stopped on the way out."""
    store = Store.open(config.resolved_database_url)
    worker = build_worker("detector", config, store)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        yield store, worker
    finally:
        worker.stop()
        runner.join(60)
        store.dispose()


def _windows(store: Store, stream: str) -> list[tuple[int, str]]:
    """The stream's closed windows: (documents, closed by)."""
    rows = store.windows(streams=[stream], limit=None)
    return [(w["n_documents"], w["closed_by"]) for w in rows]


def _config(kafka_bootstrap: str, db: str, **extra: str):
    env = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": f"live-{uuid.uuid4().hex[:8]}",
        "SPARSEWATCH_KAFKA_PARTITIONS": "1",
        "SPARSEWATCH_DATABASE_URL": f"sqlite:///{db}",
        "SPARSEWATCH_WINDOWS_SIZE": "1h",
        "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": str(IDLE_S),
        "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "10",
        "SPARSEWATCH_DETECTOR_MAX_ATOMS": "100",
        "SPARSEWATCH_ANOMALY_ENABLED": "false",
    }
    return load_config(env={**env, **extra})


@pytest.mark.parametrize("idle_close", ["ended", "all"])
def test_a_lull_in_a_live_stream_keeps_its_window_open_until_the_wall_clock_ends_it(
    kafka_bootstrap, tmp_path, idle_close
):
    config = _config(
        kafka_bootstrap, tmp_path / "live.db", SPARSEWATCH_WINDOWS_IDLE_CLOSE=idle_close
    )
    topic = config.kafka.topic("docs")
    now_ms = int(time.time() * 1000)
    # "recent": an hour window that ended over a minute ago; "live": the window ten minutes
    # ahead, which ends at least ten minutes after this test starts.
    recent = generate_stream(20, kind="tweet", stream="recent", seed=1)
    live = generate_stream(40, kind="tweet", stream="live", seed=2)
    producer = make_producer(kafka_bootstrap)

    def send(docs: list[dict], t_ms: int) -> None:
        for i, doc in enumerate(docs):
            value = json.dumps({**doc, "timestamp": t_ms + i})
            producer.produce(topic, key=doc["stream"].encode(), value=value)
        assert producer.flush(30) == 0

    with _running_detector(config) as (store, _worker):
        windows = partial(_windows, store)
        send(recent, now_ms - 61 * MINUTE_MS - 20)
        send(live[:20], now_ms + 10 * MINUTE_MS)
        # The wall clock has passed the recent stream's window: the idle timer closes it.
        assert _wait_for(lambda: bool(windows("recent")), 60.0), "recent window never closed"
        assert windows("recent") == [(20, "idle")]
        if idle_close == "ended":
            time.sleep(3 * IDLE_S)  # idle three timeouts over: still open
            assert windows("live") == []
            assert store.documents(streams=["live"], limit=None) == []
        else:
            assert _wait_for(lambda: bool(windows("live")), 30.0)
            assert windows("live") == [(20, "idle")]
        send(live[20:], now_ms + 10 * MINUTE_MS + 1_000)  # after the lull, the same window
        producer.produce(
            topic, key=b"live", value=json.dumps({"stream": "live", "end_of_stream": True})
        )
        assert producer.flush(30) == 0

        def stored_live() -> bool:
            return len(store.documents(streams=["live"], limit=None)) == len(live)

        assert _wait_for(stored_live, 60.0)
        late = [d["doc_id"] for d in store.documents(streams=["live"], limit=None) if d["late"]]
        if idle_close == "ended":
            assert windows("live") == [(40, "end_of_stream")]
            assert late == []  # every document learnt from
        else:
            assert windows("live") == [(20, "idle")]
            assert sorted(late) == sorted(d["id"] for d in live[20:])


def test_idle_live_streams_beyond_max_idle_streams_close_their_windows_and_leave_memory(
    kafka_bootstrap, tmp_path, caplog
):
    """Open windows keep an idle live stream's models in memory; beyond ``max_idle_streams`` (1
    here) the least recently active idle streams have their windows closed at once (as with
    ``idle_close = "all"``) and leave memory once checkpointed, so memory stays bounded by the
    streams active within the idle timeout."""
    config = _config(kafka_bootstrap, tmp_path / "crowd.db", SPARSEWATCH_MAX_IDLE_STREAMS="1")
    topic = config.kafka.topic("docs")
    t_ms = int(time.time() * 1000) + 10 * MINUTE_MS  # a window that ends after the test
    producer = make_producer(kafka_bootstrap)
    with _running_detector(config) as (store, worker):
        windows = partial(_windows, store)
        with caplog.at_level("INFO", logger="sparsewatch.consumers.worker"):
            for seed, stream in enumerate(("a", "b", "c")):  # idle one after the other
                for i, doc in enumerate(
                    generate_stream(15, kind="tweet", stream=stream, seed=seed)
                ):
                    value = json.dumps({**doc, "timestamp": t_ms + i})
                    producer.produce(topic, key=stream.encode(), value=value)
                assert producer.flush(30) == 0
                time.sleep(2.5 * IDLE_S)
            assert _wait_for(lambda: bool(windows("b")), 30.0)
            assert _wait_for(lambda: worker.streams_in_memory == frozenset({"c"}), 30.0)
        assert windows("a") == windows("b") == [(15, "idle")]
        assert windows("c") == []  # the most recently active idle stream keeps its window open
        assert any("max_idle_streams (1)" in r.getMessage() for r in caplog.records)
        # one INFO line per committed window, saying what it was and found
        logged = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
        for stream in ("a", "b"):
            assert any(
                re.fullmatch(
                    rf"detector: stream {stream} window \d+ \(closed by idle\): 15 documents, "
                    r"\d+ novel, \d+ emerging-topic alerts, computed in [\d.]+ s; "
                    r"committed [\d.]+ s after its close",
                    m,
                )
                for m in logged
            ), logged
        producer.produce(topic, key=b"c", value=json.dumps({"stream": "c", "end_of_stream": True}))
        assert producer.flush(30) == 0
        assert _wait_for(lambda: windows("c") == [(15, "end_of_stream")], 30.0)
