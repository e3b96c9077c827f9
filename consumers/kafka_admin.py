"""Kafka administration through one-shot admin requests: topics (created when missing, their
retention read) and consumer groups (their members counted, the group deleted)."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from sparsewatch.errors import SparsewatchError


def ensure_topics(
    bootstrap: str, partitions: dict[str, int], timeout: float = 30.0, **topic_config: str
) -> None:
    """Create the missing topics of ``partitions`` (name -> partition count); existing ones stay."""
    # librdkafka's own logging off: an unreachable broker is the caller's one error, not a
    # "connection refused" line per attempt until the timeout
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
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
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        configs = admin.describe_configs([resource], request_timeout=timeout)[resource]
        entry = configs.result(timeout).get("retention.ms")
    except (KafkaException, TimeoutError):
        return None
    return None if entry is None or entry.value is None else int(entry.value)


class NonEmptyGroupError(SparsewatchError):
    """The broker refused to delete a consumer group that has members."""


def consumer_group_members(bootstrap: str, group: str, timeout: float) -> int | None:
    """How many members ``group`` has on the broker; ``None`` when the broker has no such group.
    KafkaException (or TimeoutError) when the broker does not answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
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
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.delete_consumer_groups([group], request_timeout=timeout)[group].result(timeout + 1.0)
    except KafkaException as exc:
        code = exc.args[0].code()
        if code == KafkaError.GROUP_ID_NOT_FOUND:
            return False
        if code == KafkaError.NON_EMPTY_GROUP:
            raise NonEmptyGroupError(f"consumer group {group!r} has members") from None
        raise
    return True
