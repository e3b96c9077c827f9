"""The streaming pipeline against a real broker and real databases.

* end to end: two streams plus 1,000 malformed messages through the detector and anomaly workers;
  every good document is processed, every bad one lands in the DLQ with its reason, and the stored
  scores equal the transport-free per-window core run offline on the same windows;
* crash recovery: during a replay of 20,000 documents the detector (or anomaly) worker process is
  killed with SIGKILL five times, at random points of its progress, and restarted; the final
  database equals an uninterrupted run's (the same for a broker restart mid-stream);
* two worker processes in one consumer group share the streams across a rebalance;
* a transaction failing on the worker's writer (process or thread) stops the worker with nothing
  of it stored or committed to Kafka, and a restart completes the stream.

The streams of the end-to-end, crash-recovery and rebalance tests end with end-of-stream markers,
as ``sparsewatch replay --end-of-stream`` sends them: a run stops as soon as its input is done, not
after the idle timeouts.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer, TopicPartition
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.memory import FreeHeapBound
from sparsewatch.consumers.writer import WriterError, alert_key, alert_object
from sparsewatch.replay.producer import replay_documents
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.schema import reason_pattern
from sparsewatch.storage.store import Store
from sqlalchemy import text

from sparsewatch.config import Config, load_config
from sparsewatch.runner import build_worker, run_loops
from tests.support.anomaly_worker import scores_message
from tests.support.kafka_topics import consume_messages, read_at_least
from tests.support.pipeline_kafka import (
    FIXED_DICTIONARY,
    assert_same,
    assert_same_results,
    offline_scores,
    pipeline_env,
    produce,
    stored_results,
    stored_scores,
    streams,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# Refused for its size; its dead-letter copy would exceed the producer's message limit uncut.
HUGE = b'{"id": "x", "text": "' + b"a" * 1_040_000 + b'", "timestamp": 1}'

# How long the workers of a run wait, drained, before they stop: their input ends with
# end-of-stream markers, which close the streams' last windows (see _end_streams).
UNTIL_IDLE_S = 2.0


def _ends(bootstrap: str, topic: str, partitions: int = 2) -> dict[int, int]:
    """The end offset of each partition of ``topic``."""
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex}"})
    try:
        return {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        probe.close()


def test_end_to_end_with_poison_messages(kafka_bootstrap, database_url, cache):
    env = pipeline_env(kafka_bootstrap, f"e2e-{uuid.uuid4().hex[:8]}", database_url)
    config = load_config(env=env)
    docs = _streams(cache, 1200)
    n_bad = produce(kafka_bootstrap, config.kafka.topic("docs"), docs, bad_every=2)
    assert n_bad >= 1000
    big = make_producer(kafka_bootstrap, **{"message.max.bytes": 2_000_000})
    big.produce(config.kafka.topic("docs"), key=b"alpha", value=HUGE)
    assert big.flush(60) == 0
    n_bad += 1
    _end_streams(kafka_bootstrap, config.kafka.topic("docs"), docs)
    store = Store.open(database_url)
    try:
        workers = [build_worker(r, config, store) for r in ("detector", "anomaly")]
        run_loops(workers, [UNTIL_IDLE_S] * 2, install_signals=False)
        stored = stored_scores(store)
        assert len(stored) == len(docs)  # every good document, once
        offline = _offline_scores(cache, env, docs)
        assert_same(stored, offline)
        novel = store.alerts(kinds=["novel_document"], limit=None)
        stories = [(a["stream"], d) for a in novel for d in (a["subject_id"], *a["related_ids"])]
        alerted = set(stories)
        assert len(alerted) == len(stories) == sum(a["n_documents"] for a in novel)
        assert alerted == {key for key, (_, flag) in offline.items() if flag}
        scored = [r for r in store.documents(limit=None) if r["anomaly_score"] is not None]
        assert len(scored) == len(docs)  # the anomaly worker read every score (run_loops)
        assert store.snapshots() and store.windows()
        with store.reading() as conn:
            n_dead = conn.execute(text("select count(*) from dead_letters")).scalar()
            huge = conn.execute(text("select payload from dead_letters where reason like '%size%'"))
            assert [bytes(row[0]) for row in huge] == [HUGE]  # the SQL row keeps every byte
        assert n_dead == n_bad
        reasons = store.dead_letter_reasons(limit=None)  # `sparsewatch dead-letters --summary`
    finally:
        store.dispose()
    dead = read_at_least(kafka_bootstrap, config.kafka.topic("dlq"), n_bad)
    assert len({m.key() for m in dead}) == n_bad
    assert all(dict(m.headers())["reason"] for m in dead)
    by_reason = Counter(reason_pattern(dict(m.headers())["reason"].decode()) for m in dead)
    assert {r["reason"]: r["count"] for r in reasons} == by_reason
    assert len(by_reason) > 3 and [r["count"] for r in reasons] == sorted(by_reason.values())[::-1]
    cut = [m for m in dead if "truncated_from_bytes" in dict(m.headers())]
    assert len(cut) == 1 and cut[0].value() == HUGE[: len(cut[0].value())]
    assert int(dict(cut[0].headers())["truncated_from_bytes"]) == len(HUGE) > len(cut[0].value())


def _end_streams(bootstrap: str, topic: str, docs: list[dict]) -> None:
    """An end-of-stream marker for each stream of ``docs``, after what was produced (same key,
    so the same partition), as ``sparsewatch replay --end-of-stream`` ends a replay: the
    detector closes each stream's last window at its marker instead of after the idle timeout,
    so a run ends as soon as its input is done."""
    producer = make_producer(bootstrap)
    for stream in sorted({d["stream"] for d in docs}):
        marker = json.dumps({"stream": stream, "end_of_stream": True}).encode()
        producer.produce(topic, key=stream.encode(), value=marker)
    assert producer.flush(60) == 0


@pytest.fixture(scope="module")
def cache() -> dict[tuple, object]:
    """What the tests of this module compute alike, computed once: generated streams, and the
    results of uninterrupted runs (the sqlite and postgresql cases of a test, and the tests
    replaying the same documents with the same settings, compare with one)."""
    return {}


def _streams(cache: dict, n_per_stream: int) -> list[dict]:
    """:func:`streams` (seconds to generate 20,000 documents), once per module; the tests only
    read the documents."""
    key = ("streams", n_per_stream)
    if key not in cache:
        cache[key] = streams(n_per_stream)
    return list(cache[key])


def _spawn(env: dict[str, str], log: Path, role: str = "detector") -> subprocess.Popen:
    """``sparsewatch run ROLE --until-idle 2`` with ``env`` over the environment, its output
    appended to ``log``: the input ends with end-of-stream markers, so nothing is left to close
    once it has been read up to its end."""
    return subprocess.Popen(
        [sys.executable, "-m", "sparsewatch", "run", role, "--until-idle", str(UNTIL_IDLE_S)],
        env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def _document_count(store: Store) -> int:
    """The document rows ``store`` holds."""
    with store.reading() as conn:
        return int(conn.execute(text("select count(*) from documents")).scalar())


def _wait_for_rows(
    proc: subprocess.Popen, log: Path, store: Store, target: float, timeout: float = 300
) -> int:
    """Poll ``store`` until it holds at least ``target`` document rows while the worker ``proc``
    runs; the count reached."""
    deadline = time.monotonic() + timeout
    while (rows := _document_count(store)) < target:
        assert proc.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, "the worker made no progress"
        time.sleep(0.05)
    return rows


def _kill_repeatedly(
    env: dict[str, str], log: Path, total: int, seed: int, role: str = "detector", kills: int = 5
) -> None:
    """Start the worker ``kills`` times and SIGKILL it each time at a random point of its
    progress (the stored rows crossing sorted random fractions of ``total``, plus a random delay
    of up to a second), then let a last start finish the stream. A fraction the killed run's last
    transaction already stored past becomes the restarted worker's first stored row, while fewer
    than ``total`` are stored: it is killed at work (restored, caught up, storing), not while
    Python starts with nothing to recover. A restart gets its partitions once the group has given
    up the killed member: its consumer's session timeout is the broker's minimum (6 s,
    ``group.min.session.timeout.ms``), not the workers' default 10 s."""
    env = {**env, "SPARSEWATCH_KAFKA_CLIENT_SESSION_TIMEOUT_MS": "6000"}
    rng = random.Random(seed)
    targets = sorted(rng.uniform(0.05, 0.9) * total for _ in range(kills))
    store = Store.open(env["SPARSEWATCH_DATABASE_URL"])
    try:
        for target in targets:
            stored = _document_count(store)
            proc = _spawn(env, log, role=role)
            _wait_for_rows(proc, log, store, stored + 1 if target <= stored < total else target)
            time.sleep(rng.uniform(0.0, 1.0))
            assert proc.poll() is None, log.read_text()[-2000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    finally:
        store.dispose()
    final = _spawn(env, log, role=role)
    assert final.wait(timeout=600) == 0, log.read_text()[-2000:]


def _result_key(what: str, env: dict[str, str], docs: list[dict]) -> tuple:
    """What determines a run's results: ``what`` runs, every setting but where the input and
    output live, and the documents (each stream ended by :func:`_end_streams`)."""
    where = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS",
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX",
        "SPARSEWATCH_KAFKA_GROUP_ID",
        "SPARSEWATCH_DATABASE_URL",
    }
    settings = tuple(sorted((k, v) for k, v in env.items() if k not in where))
    documents = hashlib.sha256(json.dumps(docs, sort_keys=True).encode()).hexdigest()
    return what, settings, documents


def _reference_run(
    cache: dict, tmp_path: Path, env: dict[str, str], docs: list[dict]
) -> tuple[dict, dict]:
    """The stored scores and alerts of an uninterrupted in-process run over ``env``'s topic
    (holding ``docs``), in its own group and database; once per :func:`_result_key`."""
    key = _result_key("detector", env, docs)
    if key not in cache:
        cache[key] = _uninterrupted_run(tmp_path / "reference.db", env)
    return cache[key]


def _uninterrupted_run(path: Path, env: dict[str, str]) -> tuple[dict, dict]:
    """The detector run in-process over ``env``'s topic, in the group ``reference``, into a new
    SQLite database at ``path``, until drained; the scores and alerts it stored."""
    url = f"sqlite:///{path}"
    config = load_config(
        env={**env, "SPARSEWATCH_DATABASE_URL": url, "SPARSEWATCH_KAFKA_GROUP_ID": "reference"}
    )
    store = Store.open(url)
    try:
        run_loops([build_worker("detector", config, store)], [UNTIL_IDLE_S], install_signals=False)
        return stored_results(store)
    finally:
        store.dispose()


def _offline_scores(cache: dict, env: dict[str, str], docs: list[dict]) -> dict:
    """:func:`offline_scores` under ``env``'s settings; once per :func:`_result_key`."""
    key = _result_key("offline", env, docs)
    if key not in cache:
        cache[key] = offline_scores(load_config(env=env), docs)
    return cache[key]


def test_run_all_keeps_the_anomaly_worker_until_the_detector_has_stopped(kafka_bootstrap, tmp_path):
    """``sparsewatch run all --until-idle S``: the anomaly worker's input (the detector's scores)
    stays empty while the detector waits for and computes its first windows. It stopped after S
    seconds of that and left every score unread; now it is idle only once the detector in the
    same process has stopped and the scores are drained."""
    prefix = f"upstream-{uuid.uuid4().hex[:8]}"
    db_url = f"sqlite:///{tmp_path / 'up.db'}"
    config = load_config(env=pipeline_env(kafka_bootstrap, prefix, db_url, **FIXED_DICTIONARY))
    docs = streams(400)
    ensure_topics(kafka_bootstrap, {config.kafka.topic("docs"): 2})
    # The documents arrive after the anomaly worker's idle time has passed twice over.
    feeder = threading.Timer(4.0, produce, (kafka_bootstrap, config.kafka.topic("docs"), docs))
    store = Store.open(db_url)
    try:
        workers = [build_worker(r, config, store) for r in ("detector", "anomaly")]
        feeder.start()
        run_loops(workers, [12.0, 2.0], install_signals=False)  # 12 s > the idle timeout
        feeder.join()
        assert len(store.documents(limit=None)) == len(docs)
        scores = config.kafka.topic("scores")
        resume = store.partition_offsets(f"{config.kafka.group_id}.anomaly", scores)
    finally:
        store.dispose()
    ends = _ends(kafka_bootstrap, scores)
    assert sum(ends.values()) >= len(docs)  # the detector published every document's scores
    assert {p: resume.get(p, 0) for p in ends} == ends  # and the anomaly worker read them all


def test_detector_survives_kill_minus_nine(kafka_bootstrap, database_url, tmp_path, cache):
    prefix = f"crash-{uuid.uuid4().hex[:8]}"
    env = pipeline_env(
        kafka_bootstrap,
        prefix,
        database_url,
        SPARSEWATCH_ANOMALY_ENABLED="false",
        **FIXED_DICTIONARY,
    )
    docs = _streams(cache, 10_000)  # 10,000 per stream: 20,000 documents
    produce(kafka_bootstrap, f"{prefix}.docs", docs)
    _end_streams(kafka_bootstrap, f"{prefix}.docs", docs)
    _kill_repeatedly(env, tmp_path / "worker.log", len(docs), seed=5)
    store = Store.open(database_url)
    try:
        crashed = stored_results(store)
        stored_alerts = store.alerts(limit=None)
        unsent = store.pending_alerts()
    finally:
        store.dispose()
    assert len(crashed[0]) == len(docs)
    assert_same_results(crashed, _reference_run(cache, tmp_path, env, docs))
    # The alerts topic holds every stored alert, as stored, and nothing else (the outbox: sent
    # after the commit, what a kill left pending sent by the next start).
    assert unsent == [] and stored_alerts
    sent = [
        (dict(m.headers())["alert_key"], json.loads(m.value()))
        for m in consume_messages(kafka_bootstrap, f"{prefix}.alerts")
    ]
    assert {key for key, _ in sent} == {alert_key(row) for row in stored_alerts}
    as_stored = {alert_key(row): alert_object(row) for row in stored_alerts}
    assert all(value == as_stored[key] for key, value in sent)


def _quick_detector_config(bootstrap: str, name: str, db_url: str, **extra: str) -> Config:
    """The detector alone on fresh topics, fixed dictionary, windows closed after 1 s idle."""
    env = pipeline_env(
        bootstrap,
        f"{name}-{uuid.uuid4().hex[:8]}",
        db_url,
        **{
            "SPARSEWATCH_ANOMALY_ENABLED": "false",
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "1",
            **FIXED_DICTIONARY,
            **extra,
        },
    )
    return load_config(env=env)


FAIL_SIXTH_WINDOW = """
CREATE TRIGGER fail_sixth_window BEFORE INSERT ON windows
WHEN (SELECT count(*) FROM windows) >= 5
BEGIN SELECT RAISE(ABORT, 'injected failure at the sixth window'); END
"""


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_failed_write_behind_transaction_stops_the_worker_and_loses_nothing(
    kafka_bootstrap, tmp_path, writer
):
    """A transaction failing on the writer (a trigger of the real database aborts the one that
    stores the sixth window) is raised by the loop; nothing of it reaches the store or Kafka's
    committed offsets, and a restart completes the stream exactly as the offline core computes
    it. For both writers: a child process and a thread."""
    url = f"sqlite:///{tmp_path / 'fail.db'}"
    config = _quick_detector_config(
        kafka_bootstrap,
        "wfail",
        url,
        SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY="2",
        SPARSEWATCH_WRITER=writer,
    )
    docs = streams(1500)
    produce(kafka_bootstrap, config.kafka.topic("docs"), docs)
    group = f"{config.kafka.group_id}.detector"
    store = Store.open(url)
    try:
        with store.transaction() as tx:
            tx.connection.exec_driver_sql(FAIL_SIXTH_WINDOW)
        worker = build_worker("detector", config, store)
        with pytest.raises(WriterError, match="injected failure at the sixth window"):
            worker.run(until_idle_s=5.0)
        stored_offsets = store.partition_offsets(group, config.kafka.topic("docs"))
        partial = stored_scores(store)
        windows = {(w["stream"], w["window_seq"]) for w in store.windows(limit=None)}
        with store.reading() as conn:
            seqs = conn.exec_driver_sql("SELECT DISTINCT stream, window_seq FROM documents")
            document_windows = {tuple(r) for r in seqs}
        with store.transaction() as tx:
            tx.connection.exec_driver_sql("DROP TRIGGER fail_sixth_window")
    finally:
        store.dispose()
    assert 0 < len(partial) < len(docs)
    assert 0 < len(windows) <= 5
    assert document_windows == windows  # whole transactions only
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        committed = consumer.committed(
            [TopicPartition(config.kafka.topic("docs"), p) for p in range(2)], timeout=10
        )
    finally:
        consumer.close()
    for tp in committed:  # Kafka never ahead of the store
        if tp.offset >= 0:
            assert tp.offset <= stored_offsets[tp.partition]
    store = Store.open(url)
    try:
        build_worker("detector", config, store).run(until_idle_s=5.0)
        final = stored_scores(store)
    finally:
        store.dispose()
    assert len(final) == len(docs)
    assert_same(final, offline_scores(config, docs))


def test_end_of_stream_markers_close_the_last_windows_without_the_idle_wait(
    kafka_bootstrap, tmp_path
):
    """A replay ending with end-of-stream markers: with a 10-minute idle timeout the worker still
    stores every document within seconds, the last window of each stream closed by its marker,
    and the results equal the offline core's. The worker also bounds its free heap after every
    batch that closed windows with a zero limit (``heap_free_limit_mb = 0``), which must change
    no result."""
    url = f"sqlite:///{tmp_path / 'eos.db'}"
    config = _quick_detector_config(
        kafka_bootstrap,
        "eos",
        url,
        SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S="600",
        SPARSEWATCH_HEAP_FREE_LIMIT_MB="0",
    )
    docs = streams(600)
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 2})
    summary = replay_documents(docs, kafka_bootstrap, topic, end_of_stream=True)
    assert (summary.produced, summary.end_markers) == (len(docs), 2)
    store = Store.open(url)
    try:
        worker = build_worker("detector", config, store)
        worker.run(until_idle_s=3.0)
        stored = stored_scores(store)
        windows = store.windows(limit=None)
    finally:
        store.dispose()
    # The bound is measured after the committed windows (it trims only when the resident free
    # heap grew since its first measurement, which a long-lived test process may not show).
    assert worker.heap_bound.limit_bytes == 0
    assert worker.heap_bound.checks >= 2 or not FreeHeapBound.supported()
    assert len(stored) == len(docs)
    for stream in ("alpha", "beta"):
        mine = sorted((w["window_seq"], w["closed_by"]) for w in windows if w["stream"] == stream)
        assert mine[-1][1] == "end_of_stream"
        assert {c for _, c in mine[:-1]} == {"watermark"}
    assert_same(stored, offline_scores(config, docs))


def test_an_end_of_stream_marker_checkpoints_its_stream_with_its_last_windows(
    kafka_bootstrap, tmp_path
):
    """With a 10-minute idle timeout and checkpoints due every 100 windows, the transaction of
    the windows an end-of-stream marker closed holds its stream's checkpoint: the stored resume
    offsets reach the partitions' ends while the worker still runs. Before, the stream waited to
    be quiet for the idle timeout, and its resume offset stayed at the documents of its first
    window after the last checkpoint: a crash meanwhile recomputed those windows."""
    url = f"sqlite:///{tmp_path / 'eos-checkpoint.db'}"
    config = _quick_detector_config(
        kafka_bootstrap,
        "eosck",
        url,
        SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S="600",
        SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY="100",
    )
    docs = streams(300)
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 2})
    replay_documents(docs, kafka_bootstrap, topic, end_of_stream=True)
    ends = {p: end for p, end in _ends(kafka_bootstrap, topic).items() if end > 0}
    group = f"{config.kafka.group_id}.detector"
    store = Store.open(url)
    try:
        worker = build_worker("detector", config, store)
        runner = threading.Thread(target=worker.run)
        runner.start()
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                offsets = store.partition_offsets(group, topic)
                checkpoints = store.load_checkpoints(group)
                if offsets == ends and len(checkpoints) == 2:
                    break
                time.sleep(0.2)
        finally:
            worker.stop()
            runner.join(60)
        stored = stored_scores(store)
    finally:
        store.dispose()
    assert offsets == ends
    assert set(checkpoints) == {"alpha", "beta"}
    assert len(stored) == len(docs)


def test_a_worker_runs_again_after_it_returned(kafka_bootstrap, tmp_path):
    """``run`` returns when drained (or stopped) and can be called again on the same loop: the
    second run resumes after the first one's committed work, with a fresh writer thread."""
    url = f"sqlite:///{tmp_path / 'again.db'}"
    config = _quick_detector_config(kafka_bootstrap, "again", url)
    docs = streams(800)
    half = len(docs) // 2
    store = Store.open(url)
    try:
        worker = build_worker("detector", config, store)
        produce(kafka_bootstrap, config.kafka.topic("docs"), docs[:half])
        worker.run(until_idle_s=4.0)
        assert len(stored_scores(store)) == half
        produce(kafka_bootstrap, config.kafka.topic("docs"), docs[half:])
        worker.run(until_idle_s=4.0)
        assert len(stored_scores(store)) == len(docs)
    finally:
        store.dispose()


def test_a_stream_split_over_two_partitions_keeps_one_and_dead_letters_the_other(
    kafka_bootstrap, tmp_path
):
    """Messages of one stream must share a partition (the producer keys them by stream id). When
    an outside producer spreads a stream over two, the worker reads it from the partition it met
    first and sends the other partition's messages to the dead letters with the reason, instead
    of mixing two offset sequences in one stream's windows and checkpoints."""
    url = f"sqlite:///{tmp_path / 'split.db'}"
    config = _quick_detector_config(kafka_bootstrap, "split", url)
    docs = generate_stream(600, kind="tweet", stream="alpha", seed=13)
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 2})
    producer = make_producer(kafka_bootstrap)
    on = {0: set(), 1: set()}
    for i, doc in enumerate(docs):
        p = int(i % 7 == 0)  # every seventh document on partition 1
        producer.produce(topic, value=json.dumps(doc).encode(), partition=p)
        on[p].add(doc["id"])
    assert producer.flush(60) == 0
    store = Store.open(url)
    try:
        build_worker("detector", config, store).run(until_idle_s=4.0)
        stored = {doc_id for _, doc_id in stored_scores(store)}
        with store.reading() as conn:
            dead = conn.execute(text("select partition, reason, payload from dead_letters"))
            dead = [(p, reason, json.loads(payload)["id"]) for p, reason, payload in dead]
    finally:
        store.dispose()
    kept = 0 if stored & on[0] else 1
    assert stored == on[kept]
    assert {doc_id for _, _, doc_id in dead} == on[1 - kept]
    assert {p for p, _, _ in dead} == {1 - kept}
    assert all("must share one partition" in reason for _, reason, _ in dead)


def test_two_workers_share_streams_across_a_rebalance(kafka_bootstrap, tmp_path, cache):
    prefix = f"group-{uuid.uuid4().hex[:8]}"
    db_url = f"sqlite:///{tmp_path / 'shared.db'}"
    env = pipeline_env(kafka_bootstrap, prefix, db_url, SPARSEWATCH_ANOMALY_ENABLED="false")
    docs = _streams(cache, 1500)
    produce(kafka_bootstrap, f"{prefix}.docs", docs)
    _end_streams(kafka_bootstrap, f"{prefix}.docs", docs)
    log = tmp_path / "workers.log"
    store = Store.open(db_url)
    try:
        first = _spawn(env, log)
        assert _wait_for_rows(first, log, store, 1) < len(docs)  # it has begun, not finished
        second = _spawn(env, log)  # joins the group mid-stream: partitions move
        assert first.wait(timeout=600) == 0, log.read_text()[-2000:]
        assert second.wait(timeout=600) == 0, log.read_text()[-2000:]
        shared = stored_results(store)
        windows = store.windows()
    finally:
        store.dispose()
    assert len(shared[0]) == len(docs)
    assert len({(w["stream"], w["window_seq"]) for w in windows}) == len(windows)
    assert_same_results(shared, _reference_run(cache, tmp_path, env, docs))
    assert np.isfinite([s for s, _ in shared[0].values() if s is not None]).all()


def _anomaly_rows(store: Store) -> dict[tuple[str, str], tuple[float, bool]]:
    return {
        (r["stream"], r["doc_id"]): (r["anomaly_score"], bool(r["anomaly"]))
        for r in store.documents(limit=None)
        if r["anomaly_score"] is not None
    }


def test_anomaly_worker_survives_kill_minus_nine(kafka_bootstrap, tmp_path, cache):
    prefix = f"acrash-{uuid.uuid4().hex[:8]}"
    det_url = f"sqlite:///{tmp_path / 'detector.db'}"
    env = pipeline_env(kafka_bootstrap, prefix, det_url, **FIXED_DICTIONARY)
    docs = _streams(cache, 10_000)  # 10,000 per stream: 20,000 documents
    produce(kafka_bootstrap, f"{prefix}.docs", docs)
    _end_streams(kafka_bootstrap, f"{prefix}.docs", docs)
    config = load_config(env=env)
    store = Store.open(det_url)
    try:  # fill <prefix>.scores once
        run_loops([build_worker("detector", config, store)], [UNTIL_IDLE_S], install_signals=False)
    finally:
        store.dispose()
    crash_url = f"sqlite:///{tmp_path / 'anomaly.db'}"
    crash_env = {**env, "SPARSEWATCH_DATABASE_URL": crash_url}
    # Anomaly rows start after the reference period; kill within what will be scored.
    _kill_repeatedly(crash_env, tmp_path / "anomaly.log", len(docs) * 9 // 10, 9, role="anomaly")
    ref_url = f"sqlite:///{tmp_path / 'anomaly-ref.db'}"
    ref_config = load_config(
        env={**env, "SPARSEWATCH_DATABASE_URL": ref_url, "SPARSEWATCH_KAFKA_GROUP_ID": "reference"}
    )
    stores = [Store.open(crash_url), Store.open(ref_url)]
    try:
        run_loops([build_worker("anomaly", ref_config, stores[1])], [UNTIL_IDLE_S], False)
        crashed, reference = (_anomaly_rows(s) for s in stores)
    finally:
        for s in stores:
            s.dispose()
    assert reference and crashed.keys() == reference.keys()
    for key, (score, flag) in reference.items():
        assert crashed[key][1] == flag and abs(crashed[key][0] - score) <= 1e-6


def test_anomaly_worker_takes_a_window_recomputed_after_a_detector_crash(kafka_bootstrap, tmp_path):
    """A detector that died while sending window 1 (4 of its 10 messages out) and closed it with
    12 documents after its restart: the anomaly worker scores the complete version, sends the
    other's messages to the dead letters, and neither stalls the stream nor holds back the
    resume offset."""
    prefix = f"aversion-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'anomaly.db'}"
    env = pipeline_env(kafka_bootstrap, prefix, url, SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS="10")
    topic = f"{prefix}.scores"
    ensure_topics(kafka_bootstrap, {topic: 1})
    sent = [scores_message("s", 0, i, 10, "a") for i in range(10)]
    sent += [scores_message("s", 1, i, 10, "cut") for i in range(4)]
    sent += [scores_message("s", 1, i, 12, "b") for i in range(12)]
    sent += [scores_message("s", 2, i, 10, "c") for i in range(10)]
    producer = make_producer(kafka_bootstrap)
    for raw in sent:
        producer.produce(topic, key=b"s", value=raw)
    producer.flush(30)
    store = Store.open(url)
    try:
        run_loops([build_worker("anomaly", load_config(env=env), store)], [6.0], False)
        rows = _anomaly_rows(store)
        offsets = store.partition_offsets("sparsewatch.anomaly", topic)
        with store.reading() as conn:
            dead = conn.execute(text("select offset, reason, payload from dead_letters"))
            dead = sorted((o, reason, bytes(payload)) for o, reason, payload in dead)
    finally:
        store.dispose()
    expected = {f"0-a-{i}" for i in range(10)} | {f"1-b-{i}" for i in range(12)}
    assert {doc for _, doc in rows} == expected | {f"2-c-{i}" for i in range(10)}
    assert offsets == {0: len(sent)}
    # the cut version's messages: in the dead letters with the reason, in SQL and on the topic
    reason = (
        "scores message of window 1 (10 documents) not used: superseded by its complete "
        "version of 12 documents"
    )
    assert dead == [(10 + i, reason, sent[10 + i]) for i in range(4)]
    dlq = read_at_least(kafka_bootstrap, f"{prefix}.dlq", 4)
    assert sorted(m.value() for m in dlq) == sent[10:14]
    assert {dict(m.headers())["reason"].decode() for m in dlq} == {reason}


def test_detector_survives_a_broker_restart(tmp_path, cache):
    from sparsewatch.kafka_local import LocalKafka

    broker = LocalKafka(tmp_path / "broker", port=0)
    bootstrap = broker.up()
    port = int(bootstrap.rsplit(":", 1)[1])
    try:
        prefix = f"brk-{uuid.uuid4().hex[:8]}"
        db_url = f"sqlite:///{tmp_path / 'restart.db'}"
        env = pipeline_env(
            bootstrap, prefix, db_url, SPARSEWATCH_ANOMALY_ENABLED="false", **FIXED_DICTIONARY
        )
        docs = _streams(cache, 10_000)  # 10,000 per stream: 20,000 documents
        produce(bootstrap, f"{prefix}.docs", docs)
        _end_streams(bootstrap, f"{prefix}.docs", docs)
        log = tmp_path / "worker.log"
        store = Store.open(db_url)
        try:
            worker = _spawn(env, log)
            _wait_for_rows(worker, log, store, len(docs) // 3)
            broker.kill()  # the broker dies mid-stream ...
            assert _document_count(store) < len(docs)
            time.sleep(3.0)
            LocalKafka(tmp_path / "broker", port=port).up()  # ... and comes back on its port
            # The worker stays up and stores the rest (it would stop by itself only once the
            # broker has answered for 30 s: BROKER_GRACE_S), then stops cleanly on SIGTERM.
            assert _wait_for_rows(worker, log, store, len(docs), timeout=600) == len(docs)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=60) == 0, log.read_text()[-2000:]
            restarted = stored_results(store)
        finally:
            store.dispose()
        assert len(restarted[0]) == len(docs)
        assert_same_results(restarted, _reference_run(cache, tmp_path, env, docs))
    finally:
        LocalKafka(tmp_path / "broker", port=port).down()


@pytest.mark.parametrize(
    "windows",
    [{"SPARSEWATCH_WINDOWS_SIZE": "1h"}, {"SPARSEWATCH_WINDOWS_COUNT": "100"}],
    ids=["hour-windows", "count-windows"],
)
def test_a_document_sent_twice_is_dead_lettered_and_changes_nothing(
    kafka_bootstrap, tmp_path, windows
):
    """A producer's retry (or a corpus replayed twice) put the same document in a window twice:
    scored, counted in the window's top-q flags and learnt from twice; a copy arriving after its
    first copy's window had closed was scored again as late (time windows) or learnt again in a
    later window (count windows). Every second copy now goes to the dead letters with the reason,
    and every stored result equals the per-window core's over the stream without the copies."""
    url = f"sqlite:///{tmp_path / 'dup.db'}"
    config = _quick_detector_config(kafka_bootstrap, "dup", url, **windows)
    docs = generate_stream(600, kind="tweet", stream="alpha", seed=14)
    docs.sort(key=lambda d: d["timestamp"])
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 2})
    producer = make_producer(kafka_bootstrap)
    open_copies, closed_copies = [], []
    for i, doc in enumerate(docs):
        producer.produce(topic, key=b"alpha", value=json.dumps(doc).encode())
        if i % 50 == 7:  # the message again, right after: its window is still open
            producer.produce(topic, key=b"alpha", value=json.dumps(doc).encode())
            open_copies.append(doc["id"])
        if i == 400:  # the first 20 again: their windows (the first hour, or 100) have closed
            for old in docs[:20]:
                producer.produce(topic, key=b"alpha", value=json.dumps(old).encode())
                closed_copies.append(old["id"])
    assert producer.flush(60) == 0
    store = Store.open(url)
    try:
        build_worker("detector", config, store).run(until_idle_s=4.0)
        stored = stored_scores(store)
        with store.reading() as conn:
            dead = conn.execute(text("select reason, payload from dead_letters")).all()
    finally:
        store.dispose()
    assert all(reason.startswith("duplicate of the document at partition ") for reason, _ in dead)
    where = {"an open window holds it": open_copies, "a closed window had it": closed_copies}
    for says, copies in where.items():
        ids = [json.loads(payload)["id"] for reason, payload in dead if f"({says})" in reason]
        assert sorted(ids) == sorted(copies), says
    assert_same(stored, offline_scores(config, docs))


@pytest.mark.parametrize("how", ["restart", "quiet-state-dropped"])
def test_a_late_documents_id_is_remembered_across_checkpoints(kafka_bootstrap, tmp_path, how):
    """A late document changed the windower's remembered ids but did not make its stream's state
    differ from the checkpoint: once the stream had gone quiet and been checkpointed, a clean
    restart, or its quiet state dropped and restored from that checkpoint, forgot the late
    document, and its re-send was stored as late again (published twice) instead of going to
    the dead letters, citing the first copy's offset."""
    url = f"sqlite:///{tmp_path / 'late.db'}"
    extra = {"SPARSEWATCH_WINDOWS_SIZE": "1h"}
    if how == "quiet-state-dropped":
        extra["SPARSEWATCH_MAX_IDLE_STREAMS"] = "0"
    config = _quick_detector_config(kafka_bootstrap, "late", url, **extra)
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 1})
    docs = generate_stream(300, kind="tweet", stream="alpha", seed=21)
    docs.sort(key=lambda d: d["timestamp"])
    late = {**docs[0], "id": "late-1", "text": "a late story about a harbour fire"}
    late_offset = len(docs) + 1  # after the documents and the end-of-stream marker
    producer = make_producer(kafka_bootstrap)

    def send(*messages: dict) -> None:
        for message in messages:
            producer.produce(topic, key=b"alpha", value=json.dumps(message).encode())
        assert producer.flush(60) == 0

    def wait_for(what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)

    def dead_letters() -> list[tuple[str, int]]:
        with store.reading() as conn:
            rows = conn.execute(text('select reason, "offset" from dead_letters')).all()
        return [(reason, offset) for reason, offset in rows]

    def stored(doc_id: str) -> list[dict]:
        return [d for d in store.documents(limit=None) if d["doc_id"] == doc_id]

    store = Store.open(url)
    try:
        send(*docs, {"stream": "alpha", "end_of_stream": True})
        if how == "restart":  # each phase a worker of its own, stopped cleanly
            build_worker("detector", config, store).run(until_idle_s=4.0)
            send(late)
            build_worker("detector", config, store).run(until_idle_s=4.0)
            assert len(stored("late-1")) == 1
            send(late)  # re-sent
            build_worker("detector", config, store).run(until_idle_s=4.0)
        else:  # one worker; the stream goes quiet (checkpointed, its state dropped) in between
            worker = build_worker("detector", config, store)
            runner = threading.Thread(target=worker.run, kwargs={"until_idle_s": 60.0})
            runner.start()
            try:
                wait_for("windows stored", lambda: len(store.documents(limit=None)) == len(docs))
                time.sleep(4.0)
                send(late)
                wait_for("the late document stored", lambda: len(stored("late-1")) == 1)
                time.sleep(4.0)
                send(late)  # re-sent
                wait_for("the re-send dead-lettered", lambda: bool(dead_letters()))
            finally:
                worker.stop()
                runner.join(60)
        assert len(stored("late-1")) == 1 and stored("late-1")[0]["late"]
        assert dead_letters() == [
            (f"duplicate of the document at partition 0, offset {late_offset} "
             "(a closed window had it)", late_offset + 1)
        ]  # fmt: skip
    finally:
        store.dispose()


def test_count_windows_go_on_when_a_stream_moves_partition_between_runs(kafka_bootstrap, tmp_path):
    """Count windows, a stream on partition 0, a clean stop; then its documents arrive on
    partition 1 (partitions added, keys rehashed). The restored count-window offset, of partition
    0, made the new partition's first messages "seen": 200 documents vanished without a dead
    letter. Now they are processed."""
    url = f"sqlite:///{tmp_path / 'moved.db'}"
    config = _quick_detector_config(kafka_bootstrap, "moved", url, SPARSEWATCH_WINDOWS_COUNT="50")
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 2})
    docs = generate_stream(600, kind="tweet", stream="m", seed=23)
    docs.sort(key=lambda d: d["timestamp"])
    producer = make_producer(kafka_bootstrap)

    def send(batch: list[dict], partition: int) -> None:
        for doc in batch:
            producer.produce(topic, key=b"m", value=json.dumps(doc).encode(), partition=partition)
        assert producer.flush(60) == 0

    store = Store.open(url)
    try:
        send(docs[:400], partition=0)
        build_worker("detector", config, store).run(until_idle_s=4.0)
        assert len(store.documents(limit=None)) == 400
        send(docs[400:], partition=1)
        build_worker("detector", config, store).run(until_idle_s=4.0)
        stored = {d["doc_id"] for d in store.documents(limit=None)}
        with store.reading() as conn:
            dead = conn.execute(text("select count(*) from dead_letters")).scalar_one()
    finally:
        store.dispose()
    assert stored == {d["id"] for d in docs} and dead == 0


def test_a_document_far_ahead_of_its_kafka_timestamp_is_dead_lettered_not_windowed(
    kafka_bootstrap, tmp_path
):
    """One document dated 2100 (a wrong clock, microseconds read as milliseconds) in a 2026
    stream: windowed, it moved the watermark past every later document, all of which were then
    late (scored, never learnt from), and its own window stayed open until 2100, holding back
    the resume offset. Its event time lies decades after its message's Kafka timestamp, so it
    goes to the dead letters with the reason and the stream is processed as if it had not
    been sent."""
    url = f"sqlite:///{tmp_path / 'ahead.db'}"
    config = _quick_detector_config(kafka_bootstrap, "ahead", url)
    docs = generate_stream(600, kind="tweet", stream="alpha", seed=15)
    docs.sort(key=lambda d: d["timestamp"])
    stray = {**docs[300], "id": "stray", "timestamp": "2100-01-01T00:00:00+00:00"}
    topic = config.kafka.topic("docs")
    ensure_topics(kafka_bootstrap, {topic: 2})
    producer = make_producer(kafka_bootstrap)
    for doc in [*docs[:300], stray, *docs[300:]]:
        producer.produce(topic, key=b"alpha", value=json.dumps(doc).encode())
    assert producer.flush(60) == 0
    store = Store.open(url)
    try:
        build_worker("detector", config, store).run(until_idle_s=4.0)
        stored = stored_scores(store)
        late = [r for r in store.documents(limit=None) if r["late"]]
        with store.reading() as conn:
            dead = conn.execute(text("select reason, payload from dead_letters")).all()
    finally:
        store.dispose()
    assert [json.loads(payload)["id"] for _, payload in dead] == ["stray"]
    ((reason, _),) = dead
    assert "2100-01-01T00:00:00+00:00 is more than windows.max_ahead (1d) after" in reason
    assert late == []
    assert_same(stored, offline_scores(config, docs))
