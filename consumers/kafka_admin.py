"""Kafka administration through one-shot admin requests: topics (created when missing, their
retention and message size limits read) and consumer groups (their members counted, the group
deleted)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from sparsewatch.consumers.field_mapping import (
    MAX_MESSAGE_BYTES,
    PRODUCER_LIMIT,
    RECORD_OVERHEAD_BYTES,
    MessageLimit,
)
from sparsewatch.consumers.kafka_client import admin_config

from sparsewatch.errors import SparsewatchError

log = logging.getLogger(__name__)

BATCH_OVERHEAD_BYTES = 61
"""The header of a record batch (Kafka's v2 format), which a topic's ``max.message.bytes``
counts: the broker applies it to whole batches. Measured (librdkafka 2.16, Kafka 3.9): the largest
value with a 1-byte key that a topic of 20,000 bytes takes is 19,927 bytes, the limit less this
header, the record's own framing (11 bytes) and the key, compressed or not (librdkafka sends a
batch that compression does not shrink as it is)."""

PRODUCER_BATCH_BYTES = 1_000_000
"""librdkafka's default ``batch.size``: the most bytes of messages it puts in one batch."""

MIN_DEAD_LETTER_TOPIC_BYTES = 4096
"""The smallest ``max.message.bytes`` a dead-letter topic may have: room for a dead letter's
source coordinates (key and header), its reason and the start of the refused record."""

_HEADER_FRAMING_BYTES = 10  # a header's two length varints, at most


def _framed_bytes(key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> int:
    """A message's size as the producer measures it (and as :class:`MessageLimit` counts it):
    key, value, headers and their framing."""
    header_bytes = sum(len(name) + len(v) + _HEADER_FRAMING_BYTES for name, v in headers)
    return RECORD_OVERHEAD_BYTES + len(key) + len(value) + header_bytes


@contextmanager
def admin_client(bootstrap: str, **settings: Any) -> Iterator[AdminClient]:
    """An AdminClient for the block (:func:`admin_config`, and ``settings``), polled when the
    block ends: an AdminClient hands librdkafka's lines to its logger only when polled (they
    wait in its queue meanwhile), and a one-shot request's client was never polled, so the lines
    ``kafka.client.debug`` asks for were lost (or, without a logger, printed raw)."""
    admin = AdminClient({**admin_config(bootstrap), **settings})
    try:
        yield admin
    finally:
        admin.poll(0)


@dataclass(frozen=True)
class TopicLimits:
    """The message size limits of the topics a producer writes to: each topic's
    ``max.message.bytes`` (:meth:`read`); a topic not in it takes what the producer sends.

    The broker applies that limit to a whole record batch, and refuses a larger one: every
    message in it fails (a transaction of the ingest bridge is aborted, and read again for
    ever), and librdkafka never splits such a batch (measured: 2,000 messages of 300 bytes sent
    to a topic of 20,000 bytes, every one refused). A producer made with
    :meth:`producer_settings` batches at most the smallest limit (``batch.size``, which
    librdkafka applies to a batch with its header); a larger message goes alone, and must fit
    :meth:`message_limit` (or be cut: :meth:`fit`)."""

    max_message_bytes: dict[str, int] = field(default_factory=dict)
    cleanup_policies: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, bootstrap: str, topics: Iterable[str], timeout: float = 5.0) -> TopicLimits:
        """The limits of ``topics`` as the broker applies them (a topic's own
        ``max.message.bytes``, else the broker's default), and their ``cleanup.policy``. A topic
        the broker says nothing of is left out (the producer's limit then applies): one it does
        not have quietly (created later, it takes the broker's default), one it does not
        describe (unreachable within ``timeout``, not allowed) with a warning."""
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in dict.fromkeys(topics)]
        with admin_client(bootstrap) as admin:
            answers = admin.describe_configs(resources, request_timeout=timeout)
            found = {r.name: _topic_config(r, f, timeout) for r, f in answers.items()}
        return cls(
            {
                name: int(c["max.message.bytes"])
                for name, c in found.items()
                if c.get("max.message.bytes")
            },
            {name: c["cleanup.policy"] for name, c in found.items() if c.get("cleanup.policy")},
        )

    def check_not_compacted(self, topic: str) -> None:
        """A one-line SparsewatchError when ``topic`` is compacted: its ``cleanup.policy`` holds
        ``compact``, so the broker keeps only the newest message of each key, and the documents
        and scores topics are keyed by stream (replay reported every document produced, and the
        worker read one per stream). A topic the broker did not describe passes."""
        policy = self.cleanup_policies.get(topic, "")
        if "compact" in policy.split(","):
            raise SparsewatchError(
                f"topic {topic} is compacted (cleanup.policy={policy}): the broker keeps only "
                "the newest message of each key, and its messages are keyed by stream, so "
                "messages not yet read would be deleted; give it cleanup.policy=delete"
            )

    def message_limit(self, topic: str) -> MessageLimit:
        """The largest message ``topic`` takes (alone in its batch), measured as the producer
        measures one: the producer's own limit, or the topic's ``max.message.bytes`` less
        :data:`BATCH_OVERHEAD_BYTES` when that is smaller."""
        limit = self.max_message_bytes.get(topic)
        if limit is None or limit - BATCH_OVERHEAD_BYTES >= MAX_MESSAGE_BYTES:
            return PRODUCER_LIMIT
        max_bytes = limit - BATCH_OVERHEAD_BYTES
        return MessageLimit(
            max_bytes,
            f"the limit of topic {topic}, {max_bytes} bytes (its max.message.bytes, {limit}, "
            f"less {BATCH_OVERHEAD_BYTES} bytes of record batch framing)",
        )

    def producer_settings(self) -> dict[str, int]:
        """librdkafka settings whose batches every topic takes: ``batch.size`` at most the
        smallest limit; none when every topic takes librdkafka's default batches."""
        smallest = min(self.max_message_bytes.values(), default=PRODUCER_BATCH_BYTES)
        return {"batch.size": smallest} if smallest < PRODUCER_BATCH_BYTES else {}

    def check_dead_letter_topic(self, topic: str) -> None:
        """A one-line SparsewatchError when the dead-letter ``topic`` is too small for dead
        letters (below :data:`MIN_DEAD_LETTER_TOPIC_BYTES`)."""
        limit = self.max_message_bytes.get(topic, MIN_DEAD_LETTER_TOPIC_BYTES)
        if limit < MIN_DEAD_LETTER_TOPIC_BYTES:
            raise SparsewatchError(
                f"the dead-letter topic {topic} takes messages of at most {limit} bytes "
                f"(max.message.bytes): too small for a dead letter's source, reason and refused "
                f"record; give it at least {MIN_DEAD_LETTER_TOPIC_BYTES}"
            )

    def value_room(self, topic: str, key: bytes, headers: list[tuple[str, bytes]]) -> int:
        """The most value bytes a message of ``topic`` with ``key`` and ``headers`` may carry:
        :meth:`message_limit` less the rest of the message (negative when even an empty value
        does not fit)."""
        return self.message_limit(topic).max_bytes - _framed_bytes(key, b"", headers)

    def fit(
        self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]
    ) -> tuple[bytes, list[tuple[str, bytes]]]:
        """A dead letter's ``value`` and ``headers`` for ``topic``: as they are when the message
        fits :meth:`message_limit`, else the value cut to fit, with a ``truncated_from_bytes``
        header (unless one already gives the original size); a ``reason`` header is cut too when
        even an empty value leaves no room (a dead-letter topic of
        :data:`MIN_DEAD_LETTER_TOPIC_BYTES` leaves room for reasons of about 3,300 bytes)."""
        if len(value) <= self.value_room(topic, key, headers):
            return value, headers
        if all(name != "truncated_from_bytes" for name, _ in headers):
            headers = [*headers, ("truncated_from_bytes", str(len(value)).encode())]
        room = self.value_room(topic, key, headers)
        if room < 0:
            headers = [(n, v[: max(len(v) + room, 0)] if n == "reason" else v) for n, v in headers]
        return value[: max(room, 0)], headers


def _topic_config(resource: ConfigResource, answer: Future, timeout: float) -> dict[str, str]:
    """The ``max.message.bytes`` and ``cleanup.policy`` of the topic ``resource`` in the broker's
    ``answer`` (those it gives a value); none when the broker does not have the topic, and (with
    a warning) when it did not say."""
    try:
        entries = answer.result(timeout + 1.0)
    except (KafkaException, TimeoutError) as exc:
        if not (isinstance(exc, KafkaException) and _unknown_topic(exc)):
            log.warning(
                "the message size limit of topic %s is unknown (%s): assuming %d bytes",
                resource.name,
                exc,
                MAX_MESSAGE_BYTES,
            )
        return {}
    wanted = ("max.message.bytes", "cleanup.policy")
    return {
        name: str(entries[name].value)
        for name in wanted
        if name in entries and entries[name].value is not None
    }


def _unknown_topic(exc: KafkaException) -> bool:
    """Whether the broker answered that it has no such topic."""
    return exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def ensure_topics(
    bootstrap: str, partitions: dict[str, int], timeout: float = 30.0, **topic_config: str
) -> None:
    """Create the missing topics of ``partitions`` (name -> partition count); existing ones stay."""
    # librdkafka's own logging off: an unreachable broker is the caller's one error, not a
    # "connection refused" line per attempt until the timeout
    with admin_client(bootstrap) as admin:
        existing = set(admin.list_topics(timeout=timeout).topics)
        wanted = [
            NewTopic(name, num_partitions=n, replication_factor=1, config=dict(topic_config))
            for name, n in partitions.items()
            if name not in existing
        ]
        if not wanted:
            return
        for name, future in admin.create_topics(wanted, operation_timeout=timeout).items():
            try:
                future.result(timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise RuntimeError(f"could not create topic {name}: {exc}") from exc


def topic_retention_ms(bootstrap: str, topic: str, timeout: float = 10.0) -> int | None:
    """The topic's ``retention.ms`` (-1: kept for ever); ``None`` when the broker does not say
    (unreachable, no such topic, not allowed)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        with admin_client(bootstrap) as admin:
            configs = admin.describe_configs([resource], request_timeout=timeout)[resource]
            entry = configs.result(timeout).get("retention.ms")
    except (KafkaException, TimeoutError):
        return None
    return None if entry is None or entry.value is None else int(entry.value)


def refuse_compacted_topics(
    bootstrap: str, topics: Iterable[str | None], timeout: float = 10.0
) -> None:
    """:meth:`TopicLimits.check_not_compacted` for each of ``topics`` (``None``s left out), read
    from the broker now; a topic it does not have or describe passes."""
    names = [t for t in dict.fromkeys(topics) if t]
    if names:
        limits = TopicLimits.read(bootstrap, names, timeout)
        for name in names:
            limits.check_not_compacted(name)


def topic_id(bootstrap: str, topic: str, timeout: float = 10.0) -> str | None:
    """The topic's id (base64), new each time a topic of that name is created; ``None`` when the
    broker does not say (unreachable, no such topic, not allowed, no ids)."""
    try:
        with admin_client(bootstrap) as admin:
            answer = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)
            found = answer[topic].result(timeout + 1.0)
    except (KafkaException, TimeoutError):
        return None
    return str(found.topic_id) if found.topic_id is not None else None


class NonEmptyGroupError(SparsewatchError):
    """The broker refused to delete a consumer group that has members."""


def consumer_group_members(bootstrap: str, group: str, timeout: float) -> int | None:
    """How many members ``group`` has on the broker; ``None`` when the broker has no such group.
    KafkaException (or TimeoutError) when the broker does not answer."""
    with admin_client(bootstrap) as admin:
        found = admin.describe_consumer_groups([group], request_timeout=timeout)[group]
        description = found.result(timeout + 1.0)  # the request times out first
    if description.state == ConsumerGroupState.DEAD:
        return None
    return len(description.members)


def delete_consumer_group(bootstrap: str, group: str, timeout: float) -> bool:
    """Delete ``group`` (its committed offsets) on the broker: ``True`` when deleted, ``False``
    when the broker has no such group. The broker deletes only a group without members
    (checked and deleted in one request): :class:`NonEmptyGroupError` otherwise.
    KafkaException when the broker does not answer."""
    try:
        with admin_client(bootstrap) as admin:
            deleted = admin.delete_consumer_groups([group], request_timeout=timeout)[group]
            deleted.result(timeout + 1.0)
    except KafkaException as exc:
        code = exc.args[0].code()
        if code == KafkaError.GROUP_ID_NOT_FOUND:
            return False
        if code == KafkaError.NON_EMPTY_GROUP:
            raise NonEmptyGroupError(f"consumer group {group!r} has members") from None
        raise
    return True
