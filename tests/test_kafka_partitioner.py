"""The partitioner of sparsewatch's producers: a stream's messages share one partition.

The workers read a stream from one partition and send its messages on any other to the dead
letters, so every producer of a documents topic must hash the key (the stream id) the same way.
sparsewatch's producers use librdkafka's ``consistent_random`` (CRC32) unless
``kafka.client.partitioner`` names another hashing one; the Java clients (and Kafka Connect) hash
with murmur2, which ``murmur2_random`` matches. ``random`` is refused at load. Real broker.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import KafkaConnection, make_producer

from sparsewatch.config import load_config
from sparsewatch.errors import SparsewatchError
from tests.support.cli import run_process
from tests.support.kafka_topics import consume_messages

PARTITIONS = 6
KEYS = [f"stream-{i}".encode() for i in range(40)]


def java_murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's Java producer gives a non-null ``key``: ``Utils.murmur2`` (seed
    0x9747b28c), made positive by masking the sign bit, modulo ``partitions``."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    h = (0x9747B28C ^ len(key)) & mask
    whole = len(key) // 4 * 4
    for i in range(0, whole, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = key[whole:]
    if len(rest) == 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if rest:
        h ^= rest[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def _partitions_of_keys(bootstrap: str, topic: str) -> dict[bytes, set[int]]:
    found: dict[bytes, set[int]] = {}
    for msg in consume_messages(bootstrap, topic):
        found.setdefault(msg.key(), set()).add(msg.partition())
    return found


def test_a_partitioner_that_does_not_hash_the_key_is_refused_at_load() -> None:
    with pytest.raises(SparsewatchError) as caught:
        load_config(env={"SPARSEWATCH_KAFKA_CLIENT_PARTITIONER": "random"})
    message = str(caught.value)
    assert message.startswith("environment variable SPARSEWATCH_KAFKA_CLIENT_PARTITIONER: ")
    assert "'partitioner' = 'random' must hash the key" in message and "\n" not in message
    chosen = load_config(env={"SPARSEWATCH_KAFKA_CLIENT_PARTITIONER": "murmur2_random"})
    assert chosen.kafka.client == {"partitioner": "murmur2_random"}


@pytest.mark.kafka
def test_keys_land_where_the_chosen_hash_puts_them(kafka_bootstrap: str, topic_name: str) -> None:
    """Each key on one partition: CRC32's by default, the Java clients' with murmur2_random."""
    for name, connection, expected in (
        ("default", kafka_bootstrap, lambda k: zlib.crc32(k) % PARTITIONS),
        (
            "murmur2",
            KafkaConnection.of(kafka_bootstrap, {"partitioner": "murmur2_random"}),
            lambda k: java_murmur2_partition(k, PARTITIONS),
        ),
    ):
        topic = f"{topic_name}-{name}"
        ensure_topics(kafka_bootstrap, {topic: PARTITIONS})
        producer = make_producer(connection)
        for _ in range(3):
            for key in KEYS:
                producer.produce(topic, key=key, value=b"{}")
        assert producer.flush(30) == 0
        found = _partitions_of_keys(kafka_bootstrap, topic)
        assert found == {key: {expected(key)} for key in KEYS}, name
    assert len({java_murmur2_partition(k, PARTITIONS) for k in KEYS}) == PARTITIONS
    assert any(zlib.crc32(k) % PARTITIONS != java_murmur2_partition(k, PARTITIONS) for k in KEYS)


@pytest.mark.kafka
def test_replay_takes_the_partitioner_of_its_configuration(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """``sparsewatch replay`` with ``SPARSEWATCH_KAFKA_CLIENT_PARTITIONER=murmur2_random`` puts
    each stream where a Java producer of the same topic would; with ``random`` it stops in one
    line before producing anything."""
    ensure_topics(kafka_bootstrap, {topic_name: PARTITIONS})
    streams = [f"s{i}" for i in range(12)]
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"{stream}-{j}",
                    "text": f"words {j}",
                    "timestamp": f"2024-01-01T00:{j:02d}:00Z",
                    "stream": stream,
                }
            )
            + "\n"
            for j in range(3)
            for stream in streams
        ),
        encoding="utf-8",
    )
    args = ("replay", str(corpus), "--topic", topic_name, "--bootstrap-servers", kafka_bootstrap)
    refused = run_process(*args, SPARSEWATCH_KAFKA_CLIENT_PARTITIONER="random")
    assert refused.returncode != 0
    assert refused.stderr.count("\n") == 1 and "must hash the key" in refused.stderr
    done = run_process(*args, SPARSEWATCH_KAFKA_CLIENT_PARTITIONER="murmur2_random")
    assert done.returncode == 0, done.stderr
    found = _partitions_of_keys(kafka_bootstrap, topic_name)
    assert found == {s.encode(): {java_murmur2_partition(s.encode(), PARTITIONS)} for s in streams}
