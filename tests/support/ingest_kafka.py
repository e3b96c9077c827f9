"""``sparsewatch ingest`` against a real broker: tweets in Twitter's own JSON and their topics, the
bridge run on a thread or as a process, and what it delivered and committed.

A module that calls :func:`spawn` imports the autouse fixture :func:`reap_bridges`, which kills the
bridges a test started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from sparsewatch.consumers.field_mapping import FieldMapping
from sparsewatch.consumers.ingest import IngestRoute, run_ingest, transactional_id
from sparsewatch.consumers.messages import parse_document
from sparsewatch.consumers.retry import StopFlag
from sparsewatch.storage.store import Store

from tests.support.cli import run_process

TWEETS = FieldMapping(id="id_str", text=("full_text",), timestamp="created_at", stream="user.lang")
# the id, text and timestamp fields of TWEETS as command-line options
TWEET_FIELDS = (
    "--id-field", "id_str", "--text-field", "full_text", "--timestamp-field", "created_at",
)  # fmt: skip


def make_tweet(i: int, lang: str) -> dict:
    minute, second = divmod(i % 3600, 60)
    return {
        "id_str": f"{10_000 + i}",
        "full_text": f"tweet {i} about the harbour fire #news",
        "created_at": f"Wed Oct 10 20:{minute:02d}:{second:02d} +0000 2018",
        "user": {"lang": lang, "screen_name": f"user{i}"},
        "retweet_count": i % 7,
    }


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
        producer.poll(0)
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, expected: int, committed: bool = True) -> list[Message]:
    """Every message of ``topic`` (read committed, or everything written), waiting up to 60 s
    for ``expected`` of them and then 2 s more for any surplus."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    consumer.subscribe([topic])
    messages: list[Message] = []
    deadline = time.monotonic() + 60
    quiet_until = None
    try:
        while time.monotonic() < (quiet_until or deadline):
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is None:
                    messages.append(msg)
            if len(messages) >= expected and quiet_until is None:
                quiet_until = time.monotonic() + 2.0
    finally:
        consumer.close()
    return messages


def make_route(bootstrap: str, topic_name: str) -> IngestRoute:
    return IngestRoute(
        bootstrap=bootstrap,
        group_id=f"{topic_name}-ingest",
        source_topics=(f"{topic_name}-src",),
        docs_topic=f"{topic_name}-docs",
        dlq_topic=f"{topic_name}.dlq",  # <prefix>.dlq for the CLI with prefix topic_name
    )


def prepare(route: IngestRoute, source_partitions: int = 3) -> None:
    create(route.bootstrap, route.source_topics[0], source_partitions)
    create(route.bootstrap, route.docs_topic, 4)
    create(route.bootstrap, route.dlq_topic, 1)


def dead_letter_source(msg: Message) -> tuple[str, int, int]:
    """A dead letter's source coordinates, from its ``source`` header."""
    topic, partition, offset = dict(msg.headers())["source"].decode().rsplit(":", 2)
    return topic, int(partition), int(offset)


_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


def _committed_once(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    # read_uncommitted: the offsets committed so far, without waiting for a transaction's
    # pending ones (read_committed asks for stable offsets and times out while a killed
    # bridge's open transaction holds some, until the broker aborts it after 60-70 s)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_uncommitted"}
    )
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
        return sum(max(tp.offset, 0) for tp in offsets)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """Records the bridge's group has committed (its transactions' offsets), over all partitions.
    Asked again for up to 30 s while the group's coordinator is moving or loading (a fresh
    broker answered the first question of a test NOT_COORDINATOR)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return _committed_once(bootstrap, group, topic, partitions)
        except KafkaException as exc:
            if exc.args[0].code() not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


_SPAWNED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def reap_bridges() -> Iterator[None]:
    """Bridges a test spawned are killed when it ends, also when it fails (one left running kept
    a dead broker's address busy with retries for the rest of the session)."""
    yield
    while _SPAWNED:
        proc = _SPAWNED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def spawn(
    route: IngestRoute,
    log: Path,
    until_idle: float | None,
    extra: tuple[str, ...] = (),
    database_url: str | None = None,
) -> subprocess.Popen:
    """``sparsewatch ingest`` for ``route`` writing to ``log``; its dead letters go to
    ``database_url`` (default: ``ingest.db`` beside the log)."""
    args = [
        sys.executable, "-m", "sparsewatch", "ingest",
        "--bootstrap-servers", route.bootstrap,
        "--from-topic", route.source_topics[0],
        "--to-topic", route.docs_topic,
        "--group", route.group_id,
        *TWEET_FIELDS, "--stream-field", "user.lang",
    ]  # fmt: skip
    if until_idle is not None:
        args += ["--until-idle", str(until_idle)]
    args += extra
    env = {
        **os.environ,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": route.dlq_topic.removesuffix(".dlq"),
        "SPARSEWATCH_DATABASE_URL": database_url or f"sqlite:///{log.parent / 'ingest.db'}",
    }
    proc = subprocess.Popen(args, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    _SPAWNED.append(proc)
    return proc


def cli(*args: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """``sparsewatch ingest ARGS`` in a child process (:func:`tests.support.cli.run_process`)."""
    return run_process("ingest", *args, **env_vars)


def tweet_records(
    plan: list[tuple[str, bool]], key: bytes | None = None
) -> tuple[list[tuple[bytes, bytes]], list[dict], list[bytes]]:
    """Record ``i`` of ``plan`` (language, malformed): tweet ``i`` in that language, or the bytes
    ``broken i``, keyed by ``key`` (None: the language). The records, the good tweets and the
    malformed records' bytes."""
    records, good, bad = [], [], []
    for i, (lang, broken) in enumerate(plan):
        if broken:
            value = f"broken {i}".encode()
            bad.append(value)
        else:
            tweet = make_tweet(i, lang)
            value = json.dumps(tweet).encode()
            good.append(tweet)
        records.append((key or lang.encode(), value))
    return records, good, bad


def tweets_with_bad(n: int) -> tuple[list[tuple[bytes, bytes]], list[str], list[bytes]]:
    """``n`` records over three streams, one in a hundred malformed: the records, the good
    ones' ids and the bad ones' bytes."""
    plan = [(("en", "de", "fr")[i % 3], i % 100 == 37) for i in range(n)]
    records, good, bad = tweet_records(plan, key=b"k")
    return records, [tweet["id_str"] for tweet in good], bad


def assert_exactly_once(
    route: IngestRoute, store: Store, good: list[str], bad: list[bytes]
) -> None:
    docs = read_all(route.bootstrap, route.docs_topic, len(good))
    ids = [parse_document(m.value(), 100_000).id for m in docs]
    assert len(ids) == len(set(ids)) == len(good) and set(ids) == set(good)
    dead = read_all(route.bootstrap, route.dlq_topic, len(bad))
    assert sorted(m.value() for m in dead) == sorted(bad)
    assert sorted(r["payload"] for r in store.dead_letters(limit=None)) == sorted(bad)


@contextmanager
def bridge_in_a_thread(
    route: IngestRoute, store: Store, **kwargs: Any
) -> Iterator[tuple[StopFlag, threading.Thread, dict[str, Any]]]:
    """run_ingest on a thread (dead letters into ``store``): its stop flag, the thread, and
    the dict that gets its stats or its error; stopped and joined when the block ends, also
    when a test fails in it."""
    stop, out = StopFlag(), {}

    def run() -> None:
        try:
            out["stats"] = run_ingest(
                route, TWEETS, stop, record_dead_letters=store.insert_dead_letters, **kwargs
            )
        except Exception as exc:  # reported by the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield stop, thread, out
    finally:
        stop.request()
        thread.join(90)


def committed_or_none(bootstrap: str, group: str, topic: str) -> int | None:
    """:func:`committed` over 3 partitions, or None while the broker cannot say (its group
    coordinator still loading after a restart)."""
    try:
        return _committed_once(bootstrap, group, topic, 3)
    except KafkaException:
        return None


def tweets(start: int, n: int) -> list[tuple[bytes | None, bytes | None]]:
    return [(b"en", json.dumps(make_tweet(i, "en")).encode()) for i in range(start, start + n)]


def fence(route: IngestRoute) -> Producer:
    """A newer producer with the bridge's transactional id: the bridge's own is fenced (its
    next transaction fails with a fatal error)."""
    fencer = Producer(
        {
            "bootstrap.servers": route.bootstrap,
            "transactional.id": transactional_id(route.group_id, route.instance),
        }
    )
    fencer.init_transactions(30)
    return fencer
