"""Destination topics that take smaller messages than the producer's 1,000,000 bytes (their
``max.message.bytes``), against a real broker: the ingest bridge (consumers/ingest.py), the
replay (replay/producer.py) and the detector worker's writer (consumers/writer.py).

The broker refuses a record batch over a topic's limit whole, and librdkafka does not split it:
every message of the batch fails. The bridge aborted its transaction, read the batch again and
failed again, for ever (a document over the limit, a dead letter over the dead-letter topic's,
or just a batch of small records); a replay lost every document batched with an oversized one;
the worker's writer failed its job, and the worker stopped at every restart. Now the limits are
read at start: batches stay within them, a document over the documents topic's is a dead letter
(a rejected document for the replay) whose reason names the topic's limit, and a dead letter's
copy of the refused record is cut to fit the dead-letter topic.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from sparsewatch.consumers import ingest
from sparsewatch.consumers.field_mapping import to_document
from sparsewatch.consumers.ingest import IngestRoute, run_ingest
from sparsewatch.consumers.kafka_admin import (
    BATCH_OVERHEAD_BYTES,
    MIN_DEAD_LETTER_TOPIC_BYTES,
    TopicLimits,
    ensure_topics,
)
from sparsewatch.consumers.kafka_client import dead_letter_message, make_producer, producer_config
from sparsewatch.consumers.messages import RecordError, encode, parse_document
from sparsewatch.consumers.retry import StopFlag
from sparsewatch.consumers.writer import Destination, make_writer
from sparsewatch.replay.documents import ErrorFile
from sparsewatch.replay.producer import replay_documents
from sparsewatch.storage.store import Store

from sparsewatch.errors import SparsewatchError
from tests.support.cli import run_process
from tests.support.ingest_kafka import (
    TWEETS,
    bridge_in_a_thread,
    committed,
    make_route,
    make_tweet,
    produce,
    read_all,
)
from tests.support.pipeline_kafka import pipeline_env, spawn_worker, streams
from tests.support.pipeline_kafka import produce as produce_documents

LIMIT = 20_000  # the small topics' max.message.bytes
DLQ_LIMIT = 8_192
_DONE_S = 60.0  # a bridge that has not drained its source by then is stuck


def _letters(rng: random.Random, n: int) -> str:
    """``n`` bytes of random lowercase words: text that lz4 hardly compresses, so that the
    batches' sizes on the broker are their sizes here."""
    return " ".join(
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=7)) for _ in range(n // 8 + 1)
    )[:n]


def _tweet(rng: random.Random, i: int, text_bytes: int = 200) -> dict:
    return {**make_tweet(i, ("en", "de")[i % 2]), "full_text": _letters(rng, text_bytes)}


def _prepare(route: IngestRoute, docs_limit: int | None, dlq_limit: int | None) -> None:
    """The bridge's topics, the documents and dead-letter ones with the given limits."""
    ensure_topics(route.bootstrap, {route.source_topics[0]: 2})
    for topic, limit in ((route.docs_topic, docs_limit), (route.dlq_topic, dlq_limit)):
        config = {} if limit is None else {"max.message.bytes": str(limit)}
        ensure_topics(route.bootstrap, {topic: 2 if topic == route.docs_topic else 1}, **config)


def _bridge(route: IngestRoute, store: Store) -> dict:
    """run_ingest until its source is drained (3 s idle): its stats or error; a bridge still
    running after ``_DONE_S`` (a batch aborted and read again for ever) fails the test."""
    with bridge_in_a_thread(route, store, until_idle_s=3.0) as (_, bridge, out):
        bridge.join(_DONE_S)
        assert not bridge.is_alive(), (
            f"the bridge is stuck: {out} (transactions aborted and the batch read again?)"
        )
    assert "error" not in out, out
    return out


def _ids(bootstrap: str, topic: str, expected: int) -> list[str]:
    return [parse_document(m.value(), 100_000).id for m in read_all(bootstrap, topic, expected)]


def _headers(msg: Message) -> dict[str, bytes]:
    return dict(msg.headers() or [])


# -- the ingest bridge --------------------------------------------------------------------------


def test_small_records_whose_batches_exceed_the_topic_limit_are_all_forwarded(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """2,000 tweets of about 700 bytes, each far below the documents topic's 20,000 bytes: one
    transaction's batch (1,000 records) was refused whole, for ever."""
    route = make_route(kafka_bootstrap, topic_name)
    _prepare(route, LIMIT, None)
    rng = random.Random(1)
    tweets = [_tweet(rng, i) for i in range(2_000)]
    produce(
        kafka_bootstrap, route.source_topics[0], [(b"k", json.dumps(t).encode()) for t in tweets]
    )
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        stats = _bridge(route, store)["stats"]
    finally:
        store.dispose()
    assert (stats.read, stats.forwarded, stats.dead_lettered, stats.aborted) == (2_000, 2_000, 0, 0)
    ids = _ids(kafka_bootstrap, route.docs_topic, 2_000)
    assert sorted(ids) == sorted(t["id_str"] for t in tweets) and len(set(ids)) == len(ids)


def test_a_document_over_the_documents_topic_limit_is_dead_lettered_naming_the_limit(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """A tweet whose document would be about 30,000 bytes, among small ones, for a documents
    topic of 20,000 bytes: it is a dead letter (whole: the dead-letter topic takes it), its
    reason names the topic's limit; the tweets before and after it are forwarded once."""
    route = make_route(kafka_bootstrap, topic_name)
    _prepare(route, LIMIT, None)
    rng = random.Random(2)
    tweets = [_tweet(rng, i) for i in range(300)]
    big = json.dumps(_tweet(rng, 999, 30_000)).encode()
    records = [(b"k", json.dumps(t).encode()) for t in tweets]
    records.insert(150, (b"k", big))
    produce(kafka_bootstrap, route.source_topics[0], records)
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        stats = _bridge(route, store)["stats"]
        stored = store.dead_letters(limit=None)
    finally:
        store.dispose()
    assert (stats.read, stats.forwarded, stats.dead_lettered) == (301, 300, 1)
    ids = _ids(kafka_bootstrap, route.docs_topic, 300)
    assert sorted(ids) == sorted(t["id_str"] for t in tweets)
    [dead] = read_all(kafka_bootstrap, route.dlq_topic, 1)
    reason = _headers(dead)["reason"].decode()
    assert reason.startswith("message of ") and f"limit of topic {route.docs_topic}, " in reason
    assert f"max.message.bytes, {LIMIT}, less {BATCH_OVERHEAD_BYTES} bytes" in reason
    assert dead.value() == big and "truncated_from_bytes" not in _headers(dead)
    assert [(r["reason"], r["payload"]) for r in stored] == [(reason, big)]


def test_a_dead_letter_over_the_dead_letter_topic_limit_is_cut_to_fit(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """A malformed record of 50,000 bytes for a dead-letter topic of 8,192: its copy there is
    cut to fit, a truncated_from_bytes header giving its size; the database keeps it whole."""
    route = make_route(kafka_bootstrap, topic_name)
    _prepare(route, None, DLQ_LIMIT)
    rng = random.Random(3)
    broken = b"{" + _letters(rng, 50_000).encode()
    tweets = [_tweet(rng, i) for i in range(100)]
    records = [(b"k", json.dumps(t).encode()) for t in tweets]
    records.insert(40, (b"k", broken))
    produce(kafka_bootstrap, route.source_topics[0], records)
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        stats = _bridge(route, store)["stats"]
        stored = store.dead_letters(limit=None)
    finally:
        store.dispose()
    assert (stats.read, stats.forwarded, stats.dead_lettered) == (101, 100, 1)
    assert sorted(_ids(kafka_bootstrap, route.docs_topic, 100)) == sorted(
        t["id_str"] for t in tweets
    )
    [dead] = read_all(kafka_bootstrap, route.dlq_topic, 1)
    headers = _headers(dead)
    assert headers["truncated_from_bytes"] == str(len(broken)).encode()
    assert broken.startswith(dead.value()) and 7_000 < len(dead.value()) < DLQ_LIMIT
    assert headers["reason"].decode().startswith("invalid JSON")
    assert [r["payload"] for r in stored] == [broken]


def test_a_dead_letter_topic_too_small_for_dead_letters_is_a_one_line_error(
    kafka_bootstrap: str, topic_name: str
) -> None:
    route = make_route(kafka_bootstrap, topic_name)
    _prepare(route, None, 2_000)
    produce(kafka_bootstrap, route.source_topics[0], [(b"k", b"not json")])
    with pytest.raises(SparsewatchError) as raised:
        run_ingest(route, TWEETS, StopFlag(), until_idle_s=3.0)
    message = str(raised.value)
    assert message.startswith(f"the dead-letter topic {route.dlq_topic} takes messages of at ")
    assert f"at least {MIN_DEAD_LETTER_TOPIC_BYTES}" in message and "\n" not in message


def test_a_limit_lowered_while_the_bridge_runs_is_read_again(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """The documents topic's max.message.bytes lowered to 20,000 while the bridge runs: the
    batch the broker then refuses is aborted, the bridge reads the limits again, and the batch
    read again goes through with them: the large tweet is a dead letter, every other one is
    forwarded once."""
    route = make_route(kafka_bootstrap, topic_name)
    _prepare(route, None, None)
    rng = random.Random(4)
    first = [_tweet(rng, i) for i in range(100)]
    later = [_tweet(rng, i) for i in range(100, 400)]
    big = json.dumps(_tweet(rng, 999, 30_000)).encode()
    produce(
        kafka_bootstrap, route.source_topics[0], [(b"k", json.dumps(t).encode()) for t in first]
    )
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        with bridge_in_a_thread(route, store, until_idle_s=5.0) as (_, bridge, out):
            assert len(read_all(kafka_bootstrap, route.docs_topic, 100)) == 100
            _set_limit(kafka_bootstrap, route.docs_topic, LIMIT)
            records = [(b"k", json.dumps(t).encode()) for t in later]
            records.insert(10, (b"k", big))
            produce(kafka_bootstrap, route.source_topics[0], records)
            bridge.join(_DONE_S)
            assert not bridge.is_alive(), f"the bridge is stuck: {out}"
        assert "error" not in out, out
        stats = out["stats"]
    finally:
        store.dispose()
    assert (stats.read, stats.forwarded, stats.dead_lettered) == (401, 400, 1)
    assert stats.aborted >= 1  # the batch the broker refused, read again with the new limits
    ids = _ids(kafka_bootstrap, route.docs_topic, 400)
    assert sorted(ids) == sorted(t["id_str"] for t in first + later)
    [dead] = read_all(kafka_bootstrap, route.dlq_topic, 1)
    assert f"max.message.bytes, {LIMIT}," in _headers(dead)["reason"].decode()


def test_a_refusal_the_limits_do_not_explain_is_a_one_line_error(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker that does not say its topics' limits (DescribeConfigs not allowed: here its
    answer is left out) and refuses a batch as too large: read again, the limits are still
    unknown, and the bridge stops with a one-line error instead of reading the batch again for
    ever; nothing of the batch is committed."""
    monkeypatch.setattr(ingest.TopicLimits, "read", classmethod(lambda cls, *_a, **_k: cls()))
    route = make_route(kafka_bootstrap, topic_name)
    _prepare(route, LIMIT, None)
    rng = random.Random(8)
    produce(
        kafka_bootstrap,
        route.source_topics[0],
        [(b"k", json.dumps(_tweet(rng, 1, 30_000)).encode())],
    )
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        with bridge_in_a_thread(route, store, until_idle_s=3.0) as (_, bridge, out):
            bridge.join(_DONE_S)
            assert not bridge.is_alive(), f"the bridge is stuck: {out}"
    finally:
        store.dispose()
    error = out.get("error")
    assert isinstance(error, SparsewatchError), out
    message = str(error)
    assert message.startswith("ingest stopped: the broker refused a batch as too large (")
    assert f"({route.docs_topic}: not known, {route.dlq_topic}: not known)" in message
    assert "\n" not in message
    assert committed(kafka_bootstrap, route.group_id, route.source_topics[0], 2) == 0


def _set_limit(bootstrap: str, topic: str, limit: int) -> None:
    """Set ``topic``'s max.message.bytes, as an operator would while it is in use."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(
        "max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert TopicLimits.read(bootstrap, [topic]).max_message_bytes == {topic: limit}


# -- the limits themselves, against the broker -------------------------------------------------


def test_what_the_limits_let_through_the_broker_takes(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """Documents up to the topic's message limit (the largest exactly at it) and dead letters cut
    to fit are all accepted by a topic of 20,000 bytes and a dead-letter topic of the minimum
    size, however their sizes fall: the framing counted is the broker's. A document over the
    limit is refused by the mapping."""
    docs_topic, dlq_topic = f"{topic_name}-docs", f"{topic_name}-dlq"
    ensure_topics(kafka_bootstrap, {docs_topic: 1}, **{"max.message.bytes": str(LIMIT)})
    ensure_topics(
        kafka_bootstrap, {dlq_topic: 1}, **{"max.message.bytes": str(MIN_DEAD_LETTER_TOPIC_BYTES)}
    )
    limits = TopicLimits.read(kafka_bootstrap, [docs_topic, dlq_topic])
    limit = limits.message_limit(docs_topic)
    assert limit.max_bytes == LIMIT - BATCH_OVERHEAD_BYTES
    rng = random.Random(5)
    base = {"id": "d", "timestamp": 1_700_000_000_000, "stream": "s"}
    envelope = len(encode({**base, "text": "", "labels": [], "meta": {}})) + len(b"s") + 36
    room = limit.max_bytes - envelope
    producer = make_producer(kafka_bootstrap, **limits.producer_settings())
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    sizes = []
    for n in range(room - 300, room + 20):
        fields = {**base, "text": _letters(rng, n)}
        size = len(encode({**fields, "labels": [], "meta": {}})) + len(b"s") + 36
        if size > limit.max_bytes:
            with pytest.raises(RecordError, match="exceeds the limit of topic"):
                to_document(fields, limit=limit)
            continue
        doc = to_document(fields, limit=limit)
        producer.produce(docs_topic, key=b"s", value=encode(doc), on_delivery=delivered)
        sizes.append(size)
    assert max(sizes) == limit.max_bytes and len(sizes) > 250
    for n in range(0, 6_000, 97):
        reason = "r" * (n % 700 if n < 5_000 else n)  # the longest cut too
        key, value, headers = dead_letter_message("src", 3, n, reason, rng.randbytes(n))
        value, headers = limits.fit(dlq_topic, key, value, headers)
        producer.produce(dlq_topic, key=key, value=value, headers=headers, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert failures == []


# -- the replay ---------------------------------------------------------------------------------


def test_a_replay_to_a_small_topic_rejects_only_the_oversized_document(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """2,000 documents of about 500 bytes and one of 30,000 to a topic of 20,000 bytes: the
    large one is rejected (in the errors file, with the topic's limit), every other is
    delivered. Before, batches over the limit were refused whole: documents far below it
    failed with the large one, or with each other."""
    ensure_topics(kafka_bootstrap, {topic_name: 2}, **{"max.message.bytes": str(LIMIT)})
    rng = random.Random(6)
    docs = [
        {"id": f"d{i}", "text": _letters(rng, 400), "timestamp": 1_700_000_000_000 + i}
        for i in range(2_000)
    ]
    docs.insert(700, {"id": "big", "text": _letters(rng, 30_000), "timestamp": 1_700_000_000_700})
    errors_path = tmp_path / "errors.jsonl"
    with ErrorFile(errors_path) as errors:
        summary = replay_documents(docs, kafka_bootstrap, topic_name, errors=errors)
    assert (summary.produced, summary.rejected, summary.failed) == (2_000, 1, 0)
    [entry] = [json.loads(line) for line in errors_path.read_text().splitlines()]
    assert f"limit of topic {topic_name}, " in entry["reason"]
    assert f"max.message.bytes, {LIMIT}," in entry["reason"]
    ids = _ids(kafka_bootstrap, topic_name, 2_000)
    assert sorted(ids) == sorted(d["id"] for d in docs if d["id"] != "big")


# -- the detector worker ------------------------------------------------------------------------


def test_the_detector_worker_fits_small_scores_and_dead_letter_topics(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """Scores topic of 20,000 bytes, dead-letter topic of 8,192: a window's score messages (a
    batch of about 150 kB) and the dead letter of a 60,000-byte malformed message were refused
    and the worker stopped, at every restart again. Now it drains its input: every scored
    document is on the scores topic, the dead letter is cut to fit."""
    prefix = topic_name
    ensure_topics(kafka_bootstrap, {f"{prefix}.docs": 2})
    ensure_topics(kafka_bootstrap, {f"{prefix}.scores": 2}, **{"max.message.bytes": str(LIMIT)})
    ensure_topics(kafka_bootstrap, {f"{prefix}.dlq": 1}, **{"max.message.bytes": str(DLQ_LIMIT)})
    docs = streams(400)
    produce_documents(kafka_bootstrap, f"{prefix}.docs", docs)
    rng = random.Random(7)
    bad = b"{" + _letters(rng, 60_000).encode()
    produce(kafka_bootstrap, f"{prefix}.docs", [(b"alpha", bad)])
    db = tmp_path / "w.db"
    log = tmp_path / "worker.log"
    proc = spawn_worker(pipeline_env(kafka_bootstrap, prefix, f"sqlite:///{db}"), log)
    try:
        code = proc.wait(240)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"the worker did not stop: {log.read_text()[-2000:]}") from None
    assert code == 0, log.read_text()[-3000:]
    store = Store.open(f"sqlite:///{db}")
    try:
        scored = {r["doc_id"] for r in store.documents(limit=None)}
        assert [r["payload"] for r in store.dead_letters(limit=None)] == [bad]
    finally:
        store.dispose()
    assert len(scored) == len(docs)
    on_topic = [
        json.loads(m.value())["doc_id"]
        for m in read_all(kafka_bootstrap, f"{prefix}.scores", len(docs), committed=False)
    ]
    assert set(on_topic) == scored
    [dead] = read_all(kafka_bootstrap, f"{prefix}.dlq", 1, committed=False)
    assert _headers(dead)["truncated_from_bytes"] == str(len(bad)).encode()
    assert bad.startswith(dead.value()) and len(dead.value()) < DLQ_LIMIT


def test_a_worker_refuses_a_dead_letter_topic_too_small_for_dead_letters(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    ensure_topics(kafka_bootstrap, {f"{topic_name}.dlq": 1}, **{"max.message.bytes": "2000"})
    destination = Destination(kafka_bootstrap, "g", f"{topic_name}.docs", None, f"{topic_name}.dlq")
    store = Store.open(f"sqlite:///{tmp_path / 'w.db'}")
    try:
        with pytest.raises(SparsewatchError, match=r"dead-letter topic .* at least 4096"):
            make_writer("thread", store, destination, "test")
    finally:
        store.dispose()


def test_default_topics_keep_the_producers_own_settings(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """A topic with the broker's default limit (1,048,588 bytes) changes nothing: the
    producer's own limit and batch size apply, as before."""
    ensure_topics(kafka_bootstrap, {topic_name: 1})
    limits = TopicLimits.read(kafka_bootstrap, [topic_name, f"{topic_name}-absent"])
    assert limits.max_message_bytes[topic_name] > 1_000_000
    assert f"{topic_name}-absent" not in limits.max_message_bytes
    assert limits.producer_settings() == {}
    assert limits.message_limit(topic_name).max_bytes == 1_000_000
    assert "batch.size" not in producer_config(kafka_bootstrap, **limits.producer_settings())


def test_run_with_a_dead_letter_topic_too_small_is_one_error_without_a_traceback(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """``sparsewatch run detector`` refused such a topic, but logged the refusal with a
    traceback first (a SparsewatchError was not one of the runner's one-line errors)."""
    ensure_topics(kafka_bootstrap, {f"{topic_name}.dlq": 1}, **{"max.message.bytes": "2000"})
    proc = run_process(
        "run",
        "detector",
        "--until-idle",
        "5",
        timeout=180,
        SPARSEWATCH_DATA_DIR=str(tmp_path),
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        SPARSEWATCH_KAFKA_TOPIC_PREFIX=topic_name,
        SPARSEWATCH_ANOMALY_ENABLED="false",
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "at least 4096" in proc.stderr.strip().splitlines()[-1]
