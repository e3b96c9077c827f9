"""``sparsewatch ingest``: a live topic of foreign JSON records bridged to the documents topic,
exactly once, against a real broker (consumers/ingest.py).

* tweets in Twitter's own JSON (``id_str``, ``full_text``, ``created_at``, a nested ``user``)
  become document messages the detector accepts, keyed by the stream a nested field names;
* every kind of unmappable record lands on the dead-letter topic, with its reason, its source
  coordinates and its original bytes; the rest is forwarded;
* killed with SIGKILL at random moments while a producer keeps writing, and restarted, the
  bridge delivers every record exactly once (read-committed readers), in order per stream;
* SIGTERM ends it after the batch in progress, with status 0; bad arguments are one line.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from sparsewatch.consumers import ingest
from sparsewatch.consumers.field_mapping import FieldMapping
from sparsewatch.consumers.ingest import IngestRoute, map_record, run_ingest, transactional_id
from sparsewatch.consumers.kafka_client import producer_config
from sparsewatch.consumers.messages import RecordError, parse_document
from sparsewatch.consumers.retry import StopFlag
from sparsewatch.storage.store import Store

from tests.support.ingest_kafka import (
    TWEETS,
    assert_exactly_once,
    bridge_in_a_thread,
    cli,
    committed,
    committed_or_none,
    create,
    dead_letter_source,
    make_route,
    make_tweet,
    prepare,
    produce,
    read_all,
    reap_bridges,  # noqa: F401 (autouse: kills what spawn started)
    spawn,
    tweet_records,
    tweets_with_bad,
)

# -- mapping one record (no broker needed: a Message is a plain value here) ---------------------


def _message(value: bytes | None, timestamp: tuple[int, int] = (0, 0)) -> Message:
    return Message(topic="src", partition=2, offset=7, value=value, timestamp=timestamp)


def test_a_tweet_maps_to_a_document_the_detector_accepts() -> None:
    tweet = make_tweet(61, "pt")
    key, value = map_record(_message(json.dumps(tweet).encode()), TWEETS)
    doc = parse_document(value, 100_000)
    assert key == b"pt" and doc.stream == "pt" and doc.id == "10061"
    assert doc.text == tweet["full_text"]
    assert doc.timestamp_ms == 1539201661000  # Wed Oct 10 20:01:01 2018 UTC
    assert doc.meta["retweet_count"] == 61 % 7 and doc.meta["user"]["screen_name"] == "user61"


def test_the_kafka_timestamp_can_be_the_event_time() -> None:
    record = json.dumps({"id": "a", "text": "quake", "created_at": "not a date"}).encode()
    msg = _message(record, (TIMESTAMP_CREATE_TIME, 1_700_000_000_123))
    _, value = map_record(msg, FieldMapping(), kafka_time=True)
    assert parse_document(value, 100_000).timestamp_ms == 1_700_000_000_123
    try:
        map_record(_message(record), FieldMapping(), kafka_time=True)
    except RecordError as exc:
        assert "no Kafka timestamp" in str(exc)
    else:
        raise AssertionError("a record without a Kafka timestamp was mapped")


# -- through the broker ---------------------------------------------------------------------------


def test_tweets_are_forwarded_keyed_by_stream_and_bad_records_dead_lettered(
    kafka_bootstrap: str, topic_name: str, database_url: str
) -> None:
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    tweets = [make_tweet(i, ("en", "de", "fr")[i % 3]) for i in range(300)]
    bad = [
        (b"k", b"{not json"),
        (b"k", b"[1, 2]"),
        (
            b"k",
            json.dumps({"id_str": "b1", "created_at": "Wed Oct 10 20:00:00 +0000 2018"}).encode(),
        ),
        (
            b"k",
            json.dumps({**make_tweet(1, "en"), "id_str": "b2", "created_at": "yesterday"}).encode(),
        ),
        (
            b"k",
            json.dumps(
                {**make_tweet(2, "en"), "id_str": "b3", "full_text": "x" * 200_000}
            ).encode(),
        ),
        (b"k", b'{"id_str": "b4", "full_text": "caf\xe9"}'),
        (b"k", None),
    ]
    records = [(t["user"]["lang"].encode(), json.dumps(t).encode()) for t in tweets]
    records[100:100] = bad[:4]
    records[250:250] = bad[4:]
    produce(kafka_bootstrap, route.source_topics[0], records)

    store = Store.open(database_url)
    try:
        sink = store.insert_dead_letters
        stats = run_ingest(route, TWEETS, StopFlag(), until_idle_s=3.0, record_dead_letters=sink)
        stored = store.dead_letters(limit=None)
    finally:
        store.dispose()

    assert (stats.read, stats.forwarded, stats.dead_lettered) == (307, 300, 7)
    docs = read_all(kafka_bootstrap, route.docs_topic, 300)
    parsed = [parse_document(m.value(), 100_000) for m in docs]
    assert sorted(d.id for d in parsed) == sorted(t["id_str"] for t in tweets)
    assert all(m.key().decode() == d.stream for m, d in zip(docs, parsed, strict=True))
    by_id = {t["id_str"]: t for t in tweets}
    assert all(d.stream == by_id[d.id]["user"]["lang"] for d in parsed)
    # one stream's documents share a partition (the workers' requirement)
    assert all(len({m.partition() for m in docs if m.key() == k}) == 1 for k in (b"en", b"de"))

    dead = read_all(kafka_bootstrap, route.dlq_topic, 7)
    assert len(dead) == 7
    reasons = {dict(m.headers())["reason"].decode(): m for m in dead}
    assert any(r.startswith("invalid JSON") for r in reasons)
    assert "not a JSON object but list" in reasons
    assert "missing text field 'full_text'" in reasons
    assert any("bad timestamp 'yesterday'" in r for r in reasons)
    assert "text longer than 100000 bytes" in reasons
    assert any(r.startswith("not UTF-8 (byte") and r.endswith("of the message)") for r in reasons)
    assert "null value (a tombstone), not a document" in reasons
    for msg in dead:  # original bytes, and where they came from
        topic, partition, offset = dead_letter_source(msg)
        assert (
            topic == route.source_topics[0]
            and msg.key().decode() == f"{topic}:{partition}:{offset}"
        )
        source = _read_at(kafka_bootstrap, topic, partition, offset)
        assert msg.value() == (source.value() or b"")
    # the database holds the same dead letters, with their reasons and whole payloads
    assert sorted(
        (r["topic"], r["partition"], r["offset"], r["reason"], r["payload"]) for r in stored
    ) == sorted(
        (*dead_letter_source(m), dict(m.headers())["reason"].decode(), m.value()) for m in dead
    )


def _read_at(bootstrap: str, topic: str, partition: int, offset: int) -> Message:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "peek", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, partition, offset)])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                return msg
        raise AssertionError(f"nothing at {topic}:{partition}:{offset}")
    finally:
        consumer.close()


def test_killed_and_restarted_bridge_delivers_every_record_exactly_once(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """20,000 tweets (1% malformed), half of them waiting and half written over about five
    seconds (the last chunks held back until the kills are done) while the bridge is SIGKILLed
    five times, each a few milliseconds after it has
    committed something new (inside its next transaction, often); a last
    start drains the topic. Read committed, the documents topic holds each good tweet once and
    the dead-letter topic each malformed one once, and each stream's documents are in the order
    the source gave them."""
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    rng = random.Random(11)
    langs = ("en", "de", "fr", "es", "it", "pt")
    plan = [(langs[rng.randrange(len(langs))], rng.random() < 0.01) for _ in range(20_000)]
    records, good, bad = tweet_records(plan)

    backlog = len(records) // 2
    produce(kafka_bootstrap, route.source_topics[0], records[:backlog])

    kills_done = threading.Event()

    def feed() -> None:  # the rest arrives while the bridge is being killed
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
        rest = records[backlog:]
        chunks = [rest[i : i + 500] for i in range(0, len(rest), 500)]
        for n, chunk in enumerate(chunks, start=1):
            for key, value in chunk:
                producer.produce(route.source_topics[0], key=key, value=value)
            assert producer.flush(30) == 0
            # The last chunks wait for the kills (each needs something new committed): on a
            # fast machine the bridge caught up before the fifth kill, which then never landed.
            kills_done.wait(0.25 if len(chunks) - n > 5 else 5.0)

    feeder = threading.Thread(target=feed)
    feeder.start()
    log = tmp_path / "ingest.log"
    kills = 0
    try:
        for _ in range(5):
            proc = spawn(route, log, until_idle=None)
            before = committed(kafka_bootstrap, route.group_id, route.source_topics[0], 3)
            if before == len(records):
                proc.kill()
                proc.wait()
                break
            deadline = time.monotonic() + 120
            while committed(kafka_bootstrap, route.group_id, route.source_topics[0], 3) <= before:
                assert proc.poll() is None, log.read_text()[-2000:]
                assert time.monotonic() < deadline, "the bridge made no progress"
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 0.06))  # a transaction takes about 30 ms
            assert proc.poll() is None, log.read_text()[-2000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    finally:
        kills_done.set()
        feeder.join()
    assert kills == 5, f"only {kills} kills landed while records were still arriving"
    final = spawn(route, log, until_idle=5.0)
    assert final.wait(timeout=300) == 0, log.read_text()[-2000:]
    assert committed(kafka_bootstrap, route.group_id, route.source_topics[0], 3) == len(records)

    docs = read_all(kafka_bootstrap, route.docs_topic, len(good))
    ids = [parse_document(m.value(), 100_000).id for m in docs]
    assert len(ids) == len(set(ids)) == len(good)
    assert set(ids) == {t["id_str"] for t in good}
    for lang in langs:  # per stream, the source's order
        want = [t["id_str"] for t in good if t["user"]["lang"] == lang]
        got = [parse_document(m.value(), 100_000).id for m in docs if m.key() == lang.encode()]
        assert got == want
    dead = read_all(kafka_bootstrap, route.dlq_topic, len(bad))
    assert sorted(m.value() for m in dead) == sorted(bad)
    # the database's dead letters are the topic's, once each (a batch read again after a kill
    # records its dead letters again: the table keeps the first)
    store = Store.open(f"sqlite:///{tmp_path / 'ingest.db'}", create=False)
    try:
        rows = store.dead_letters(limit=None)
    finally:
        store.dispose()
    assert sorted((r["topic"], r["partition"], r["offset"], r["payload"]) for r in rows) == sorted(
        (*dead_letter_source(m), m.value()) for m in dead
    )
    assert "Traceback" not in log.read_text()


def test_a_restart_aborts_the_transaction_its_predecessor_left_open(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """A bridge that died inside a transaction leaves records on the documents topic that no
    read-committed reader may see, and that would hold every such reader back until the
    transaction times out (60 s). The next bridge with the same transactional id aborts it when
    it starts: its own records are readable at once, the dead one's never."""
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    dead = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": transactional_id(route.group_id, 0),
        }
    )
    dead.init_transactions(30)
    dead.begin_transaction()
    for i in range(50):
        dead.produce(route.docs_topic, key=b"en", value=f"half-written {i}".encode())
    assert dead.flush(30) == 0  # on the broker, never committed: the process "dies" here
    tweets = [make_tweet(i, "en") for i in range(100)]
    produce(
        kafka_bootstrap, route.source_topics[0], [(b"en", json.dumps(t).encode()) for t in tweets]
    )

    started = time.monotonic()
    stats = run_ingest(route, TWEETS, StopFlag(), until_idle_s=2.0)
    docs = read_all(kafka_bootstrap, route.docs_topic, len(tweets))
    assert time.monotonic() - started < 30  # not the 60 s transaction timeout
    assert stats.forwarded == len(tweets) == len(docs)
    assert sorted(parse_document(m.value(), 100_000).id for m in docs) == sorted(
        t["id_str"] for t in tweets
    )
    everything = read_all(kafka_bootstrap, route.docs_topic, len(tweets) + 50, committed=False)
    assert sum(m.value().startswith(b"half-written") for m in everything) == 50  # written, aborted


def test_sigterm_commits_the_batch_in_progress_and_exits_cleanly(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    tweets = [make_tweet(i, "en") for i in range(1_000)]
    produce(
        kafka_bootstrap, route.source_topics[0], [(b"en", json.dumps(t).encode()) for t in tweets]
    )
    log = tmp_path / "ingest.log"
    proc = spawn(route, log, until_idle=None)
    deadline = time.monotonic() + 120
    while committed(kafka_bootstrap, route.group_id, route.source_topics[0], 3) < len(tweets):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
    assert "read 1000, forwarded 1000" in log.read_text()
    assert len(read_all(kafka_bootstrap, route.docs_topic, len(tweets))) == len(tweets)


def test_until_idle_counts_from_the_sources_drained_not_from_the_start(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """A bridge joining its group and fetching for the first time is not idle: with an idle
    limit shorter than its start it still forwards the whole backlog before it stops."""
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    tweets = [(b"k", json.dumps(make_tweet(i, "en")).encode()) for i in range(3_000)]
    produce(kafka_bootstrap, route.source_topics[0], tweets)
    started = time.monotonic()
    stats = run_ingest(route, TWEETS, StopFlag(), until_idle_s=0.2, batch_size=100)
    assert stats.forwarded == len(tweets), time.monotonic() - started
    assert len(read_all(kafka_bootstrap, route.docs_topic, len(tweets))) == len(tweets)


def test_bad_arguments_and_missing_topics_are_one_line_errors(
    kafka_bootstrap: str, topic_name: str
) -> None:
    at = ["--bootstrap-servers", kafka_bootstrap]
    cases = [
        (["--from-topic", "a", "--timestamp-field", "t", "--kafka-timestamp"], "not both"),
        (["--from-topic", "same", "--to-topic", "same"], "is the topic the documents go to"),
        (["--from-topic", "bad name!"], "--from-topic"),
        (["--from-topic", f"{topic_name}-absent"], f"no topic '{topic_name}-absent'"),
        (["--from-topic", "a", "--stream", " "], "blank"),
        (["--from-topic", "^tweets-(["], "'^tweets-([' is not a regular expression"),
        (["--from-topic", "^.*docs"], "matches sparsewatch.docs, the topic the documents go to"),
        (["--from-topic", "^sparsewatch"], "matches sparsewatch.docs, the topic the documents"),
        (["--from-topic", "^.*dlq$"], "matches sparsewatch.dlq, the topic the dead letters go"),
        (["--from-topic", "^_"], "matches __consumer_offsets, Kafka's internal topic"),
    ]
    for args, message in cases:
        proc = cli(*at, *args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    proc = cli("--bootstrap-servers", "127.0.0.1:1", "--from-topic", "a", "--connect-timeout", "1")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "cannot reach Kafka" in lines[0]
    route = make_route(kafka_bootstrap, topic_name)
    create(kafka_bootstrap, route.source_topics[0], 1)
    nowhere = "postgresql+psycopg://nobody:secret@127.0.0.1:1/none"
    proc = cli(*at, "--from-topic", route.source_topics[0], SPARSEWATCH_DATABASE_URL=nowhere)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "cannot open database" in lines[0] and "secret" not in lines[0]


def _twitter_time(iso: str) -> str:
    """An ISO-8601 time as a tweet's ``created_at`` (whole seconds, UTC)."""
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%a %b %d %H:%M:%S +0000 %Y")


def test_tweets_bridged_from_an_unkeyed_topic_are_processed_as_the_core_processes_them(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """The user's live setup: tweets in Twitter's JSON on a source topic without keys; the
    bridge keys them by ``user.lang``, and the detector worker stores for
    every one the scores and flags the per-window core computes over the documents as the
    documents topic delivers them."""
    from sparsewatch.replay.synthetic import generate_stream
    from sparsewatch.storage.store import Store

    from sparsewatch.config import load_config
    from sparsewatch.runner import build_worker, run_loops
    from tests.support.pipeline_kafka import (
        assert_same,
        offline_scores,
        pipeline_env,
        stored_scores,
    )

    route = IngestRoute(
        bootstrap=kafka_bootstrap,
        group_id=f"{topic_name}.ingest",
        source_topics=(f"{topic_name}.tweets",),
        docs_topic=f"{topic_name}.docs",
        dlq_topic=f"{topic_name}.dlq",
    )
    create(kafka_bootstrap, route.source_topics[0], 1)  # in order: no document comes late
    streams = [("en", 11), ("de", 12)]
    docs = sorted(
        (
            d
            for lang, seed in streams
            for d in generate_stream(400, kind="tweet", stream=lang, seed=seed)
        ),
        key=lambda d: d["timestamp"],
    )
    tweets = [
        {"id_str": d["id"], "full_text": d["text"], "created_at": _twitter_time(d["timestamp"]),
         "user": {"lang": d["stream"]}}
        for d in docs
    ]  # fmt: skip
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for tweet in tweets:
        producer.produce(route.source_topics[0], value=json.dumps(tweet).encode())
    assert producer.flush(30) == 0

    stats = run_ingest(route, TWEETS, StopFlag(), until_idle_s=3.0)
    assert stats.forwarded == len(tweets) and stats.dead_lettered == 0

    db_url = f"sqlite:///{tmp_path / 'bridge.db'}"
    config = load_config(env=pipeline_env(kafka_bootstrap, topic_name, db_url))
    store = Store.open(db_url)
    try:
        run_loops([build_worker("detector", config, store)], [10.0], install_signals=False)
        stored = stored_scores(store)
    finally:
        store.dispose()
    delivered = [
        parse_document(m.value(), 100_000) for m in read_all(kafka_bootstrap, route.docs_topic, 800)
    ]
    as_sent = [
        {"id": d.id, "text": d.text, "timestamp": d.timestamp_ms, "stream": d.stream}
        for d in delivered
    ]
    assert len(stored) == len(tweets) == len(as_sent)
    assert_same(stored, offline_scores(config, as_sent))


def test_a_hung_offsets_call_is_left_behind_and_a_new_producer_takes_over(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka can block in send_offsets_to_transaction for ever, past its timeout, after a
    broker restart (its issues 5456 and 5511). Made to hang once here, the call is given up
    after its timeout and a grace period; a new producer with the same transactional id fences
    the hung one and aborts its transaction, the batch is read again, and every record still
    arrives exactly once."""
    monkeypatch.setattr(ingest, "_TXN_TIMEOUT_S", 3.0)
    monkeypatch.setattr(ingest, "_HUNG_AFTER_S", 1.0)
    release = threading.Event()
    made: list[Producer] = []

    class HangsOnce(Producer):
        def send_offsets_to_transaction(self, *args: Any) -> None:
            if len(made) == 1 and self is made[0] and not getattr(self, "hung", False):
                self.hung = True
                release.wait()  # as librdkafka does: never returns in time
                raise KafkaException(KafkaError(KafkaError._FENCED, "released", fatal=True))
            super().send_offsets_to_transaction(*args)

    def make(bootstrap: str, **overrides: Any) -> Producer:
        made.append(HangsOnce(producer_config(bootstrap, **overrides)))
        return made[-1]

    monkeypatch.setattr(ingest, "make_producer", make)
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    records, good, bad = tweets_with_bad(2_000)
    produce(kafka_bootstrap, route.source_topics[0], records)
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        bridge = bridge_in_a_thread(route, store, until_idle_s=3.0, batch_size=100)
        with bridge as (_, thread, out):
            thread.join(120)
        release.set()
        assert not thread.is_alive() and "error" not in out, out
        assert len(made) == 2 and out["stats"].aborted == 1
        assert_exactly_once(route, store, good, bad)
    finally:
        release.set()
        store.dispose()


def test_the_bridge_rides_out_a_broker_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker is killed while the bridge is forwarding a backlog and comes back on its port
    more than 10 s later: the bridge carries on by itself, replacing its producer if the client
    hangs (see above; a 10 s call timeout here instead of 60 s), and every record is delivered
    exactly once, documents and dead letters (topic and table) alike.

    Its group membership outlives the outage: with the workers' 10 s session the bridge's
    consumer gave its session up while the coordinator was down and rejoined under a new member
    id, and the static member could then fence itself (a fatal error: the bridge stopped; under
    load it did so every time)."""
    from sparsewatch.kafka_local import LocalKafka

    monkeypatch.setattr(ingest, "_TXN_TIMEOUT_S", 10.0)
    broker = LocalKafka(tmp_path / "broker", port=0)
    bootstrap = broker.up()
    port = int(bootstrap.rsplit(":", 1)[1])
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        route = make_route(bootstrap, f"brk-{time.monotonic_ns()}")
        prepare(route)
        records, good, bad = tweets_with_bad(20_000)
        produce(bootstrap, route.source_topics[0], records)
        # small transactions, so that the backlog lasts until the broker is killed
        source = route.source_topics[0]
        with bridge_in_a_thread(route, store, batch_size=50) as (_, thread, out):
            deadline = time.monotonic() + 120
            while (committed_or_none(bootstrap, route.group_id, source) or 0) < len(records) // 4:
                assert thread.is_alive() and time.monotonic() < deadline, out
                time.sleep(0.05)
            members = _member_ids(bootstrap, route.group_id)
            assert len(members) == 1, members
            broker.kill()  # the broker dies mid-stream ...
            time.sleep(12.0)  # (longer than the workers' 10 s session)
            LocalKafka(tmp_path / "broker", port=port).up()  # ... and comes back on its port
            deadline = time.monotonic() + 240
            while committed_or_none(bootstrap, route.group_id, source) != len(records):
                assert thread.is_alive() and time.monotonic() < deadline, out
                time.sleep(0.5)
            assert _member_ids(bootstrap, route.group_id) == members  # (the same membership)
        assert not thread.is_alive() and "error" not in out, out
        assert_exactly_once(route, store, good, bad)
    finally:
        store.dispose()
        LocalKafka(tmp_path / "broker", port=port).down()


def _member_ids(bootstrap: str, group: str) -> list[str]:
    """The member ids of ``group`` that hold partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(30)
    return sorted(m.member_id for m in description.members if m.assignment.topic_partitions)


def test_a_pattern_source_reads_every_matching_topic_also_one_created_later(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--from-topic '^tweets-.*'``: the topics it matches are read, and one created while the
    bridge runs is read from its first record (metadata refreshed every 2 s here, 10 s by
    default); a topic it does not match is not."""
    monkeypatch.setattr(ingest, "_PATTERN_REFRESH_MS", 2_000)
    route = replace(make_route(kafka_bootstrap, topic_name), source_topics=(f"^{topic_name}-tw-",))
    for name in ("a", "b", "c", "other"):
        create(kafka_bootstrap, f"{topic_name}-{'tw-' if name != 'other' else ''}{name}", 2)
    create(kafka_bootstrap, route.docs_topic, 2)
    create(kafka_bootstrap, route.dlq_topic, 1)

    def tweets(start: int) -> list[tuple[bytes | None, bytes | None]]:
        return [(None, json.dumps(make_tweet(start + i, "en")).encode()) for i in range(300)]

    produce(kafka_bootstrap, f"{topic_name}-tw-a", tweets(0))
    produce(kafka_bootstrap, f"{topic_name}-tw-b", tweets(1000))
    produce(kafka_bootstrap, f"{topic_name}-other", tweets(2000))
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        with bridge_in_a_thread(route, store) as (_, thread, out):
            assert len(read_all(kafka_bootstrap, route.docs_topic, 600)) == 600
            create(kafka_bootstrap, f"{topic_name}-tw-late", 1)
            produce(kafka_bootstrap, f"{topic_name}-tw-late", tweets(3000))
            produce(kafka_bootstrap, f"{topic_name}-tw-c", tweets(4000))
            docs = read_all(kafka_bootstrap, route.docs_topic, 1200)
        assert not thread.is_alive() and "error" not in out, out
    finally:
        store.dispose()
    ids = sorted(int(parse_document(m.value(), 100_000).id) - 10_000 for m in docs)
    want = [start + i for start in (0, 1000, 3000, 4000) for i in range(300)]
    assert ids == want  # each once, none from the topic the pattern does not match


def test_until_idle_stops_a_bridge_whose_pattern_matches_no_topic(
    kafka_bootstrap: str, topic_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No topic matching the pattern: librdkafka assigns nothing and calls no callback, and a
    bridge run with an idle limit waited for ever for its group to join."""
    route = replace(
        make_route(kafka_bootstrap, topic_name), source_topics=(f"^{topic_name}-none-",)
    )
    create(kafka_bootstrap, route.docs_topic, 1)
    create(kafka_bootstrap, route.dlq_topic, 1)
    create(kafka_bootstrap, f"{topic_name}-other", 1)  # a topic it does not match
    result: list[object] = []
    thread = threading.Thread(
        target=lambda: result.append(run_ingest(route, TWEETS, StopFlag(), until_idle_s=1.0)),
        daemon=True,
    )
    with caplog.at_level(logging.WARNING, logger="sparsewatch.consumers.ingest"):
        thread.start()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert result and result[0].read == 0
    assert f"no topic matches ^{topic_name}-none-: nothing to read" in caplog.text


def test_a_record_the_mapping_did_not_foresee_is_dead_lettered_not_a_crash_loop(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception the mapping did not turn into a RecordError (an out-of-range date raised
    OverflowError) ended the bridge; the record was never committed, so every restart died on
    it and nothing after it was forwarded. Now such a record is dead-lettered with the error."""
    real = ingest.map_record

    def fails_on_poison(msg: Message, *args: Any, **kwargs: Any) -> tuple[bytes, bytes]:
        if b"poison" in (msg.value() or b""):
            raise OverflowError("date value out of range")
        return real(msg, *args, **kwargs)

    monkeypatch.setattr(ingest, "map_record", fails_on_poison)
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route, source_partitions=1)
    tweets = [make_tweet(i, "en") for i in range(20)]
    records = [(b"en", json.dumps(t).encode()) for t in tweets]
    records.insert(5, (b"en", json.dumps({**make_tweet(99, "en"), "full_text": "poison"}).encode()))
    produce(kafka_bootstrap, route.source_topics[0], records)
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        stats = run_ingest(
            route,
            TWEETS,
            StopFlag(),
            until_idle_s=3.0,
            record_dead_letters=store.insert_dead_letters,
        )
        stored = store.dead_letters(limit=None)
    finally:
        store.dispose()
    assert (stats.read, stats.forwarded, stats.dead_lettered) == (21, 20, 1)
    docs = read_all(kafka_bootstrap, route.docs_topic, 20)
    assert sorted(parse_document(m.value(), 100_000).id for m in docs) == sorted(
        t["id_str"] for t in tweets
    )
    assert [row["reason"] for row in stored] == [
        "cannot be mapped (OverflowError: date value out of range)"
    ]
    assert stored[0]["offset"] == 5
