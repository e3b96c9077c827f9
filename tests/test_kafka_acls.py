"""Clients the broker refuses by its ACLs (a broker of this module's own, a SASL user alice
whose one right a DENY ACL takes): each component stops in one line naming what the broker
refuses, commits nothing, and loses nothing once the operator grants the right.

- The ingest bridge against a documents topic it may not write to: the bridge aborted and read
  the batch again for ever (16 aborted transactions in 30 s, nothing forwarded; first seen with
  a topic's timestamp bound, which this test used first until it proved to refuse the broker's
  own abort markers on a slow, fresh broker, where Kafka 3.9 then leaves the transaction in
  PrepareAbort for good and no restart can start transactions).
- A worker that may not read its topic or join its group: librdkafka said so in one warning,
  then the worker waited without end, also with --until-idle.
- A worker that may not write its scores topic: one line naming the topic."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import KafkaConnection
from sparsewatch.storage.store import Store

from sparsewatch.errors import SparsewatchError
from tests.support.cli import run_process
from tests.support.ingest_kafka import (
    bridge_in_a_thread,
    committed,
    make_route,
    make_tweet,
    produce,
    read_all,
)
from tests.support.sasl_broker import AclKafka, client_properties
from tests.support.secured_runs import client_variables, run_settings, succeeded, write_corpus

pytestmark = pytest.mark.kafka

# a bridge still running by then reads its batch again for ever
_DONE_S = 60.0


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, AclKafka]]:
    """A broker with ACLs of this module's own (its PLAINTEXT address, for administration, and
    itself), stopped at teardown."""
    broker = AclKafka(tmp_path_factory.mktemp("acl-kafka"), port=0)
    plaintext = broker.up()
    try:
        yield plaintext, broker
    finally:
        broker.down()


def _denied(
    resource: ResourceType,
    name: str,
    operation: AclOperation,
    kind: type[AclBinding] = AclBinding,
) -> AclBinding:
    """alice may not do ``operation`` on ``name`` (``kind`` AclBindingFilter: the filter matching
    that ACL). A resource with an ACL is closed to everyone else but the super user."""
    return kind(
        resource,
        name,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        operation,
        AclPermissionType.DENY,
    )


def _deny(admin_bootstrap: str, resource: ResourceType, name: str, operation: AclOperation) -> None:
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})  # alive until the answer is in
    for future in admin.create_acls([_denied(resource, name, operation)]).values():
        future.result(30)


def _grant(
    admin_bootstrap: str, resource: ResourceType, name: str, operation: AclOperation
) -> None:
    """The operator deletes the DENY ACL while the topics are in use."""
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    filters = [_denied(resource, name, operation, AclBindingFilter)]
    for future in admin.delete_acls(filters).values():
        assert future.result(30), "no ACL was deleted"


def _as_alice(broker: AclKafka, tmp_path: Path) -> dict[str, str]:
    """The settings of a run of its own whose clients log in as alice."""
    properties = {name.replace(".", "_"): value for name, value in client_properties().items()}
    settings = run_settings(
        broker.sasl_bootstrap, tmp_path, "acl", **client_variables(**properties)
    )
    # a group of its own: an ACL on one run's group is no other's
    return {**settings, "SPARSEWATCH_KAFKA_GROUP_ID": settings["SPARSEWATCH_KAFKA_TOPIC_PREFIX"]}


def _replayed_as_alice(broker: AclKafka, tmp_path: Path, n: int) -> tuple[dict[str, str], str]:
    """A run of its own (its settings and topic prefix) as alice, ``n`` documents replayed."""
    settings = _as_alice(broker, tmp_path)
    replay = run_process("replay", str(write_corpus(tmp_path, n)), **settings)
    assert f"produced {n}" in succeeded(replay)
    return settings, settings["SPARSEWATCH_KAFKA_TOPIC_PREFIX"]


def _error_line(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("error: "))


def _stored_documents(settings: dict[str, str]) -> int:
    engine = sa.create_engine(f"sqlite:///{Path(settings['SPARSEWATCH_DATA_DIR'])}/sparsewatch.db")
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM documents")).scalar_one()
    finally:
        engine.dispose()


def test_the_ingest_bridge_refused_writing_stops_and_loses_nothing(
    acl_broker: tuple[str, AclKafka], topic_name: str, tmp_path: Path
) -> None:
    admin, broker = acl_broker
    as_alice = KafkaConnection.of(broker.sasl_bootstrap, client_properties())
    route = make_route(as_alice, topic_name)
    ensure_topics(admin, {route.source_topics[0]: 2, route.dlq_topic: 1, route.docs_topic: 2})
    _deny(admin, ResourceType.TOPIC, route.docs_topic, AclOperation.WRITE)
    records = [(b"k", json.dumps(make_tweet(i, "en")).encode()) for i in range(20)]
    produce(admin, route.source_topics[0], records)
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        with bridge_in_a_thread(route, store, until_idle_s=3.0) as (_, bridge, out):
            bridge.join(_DONE_S)
            assert not bridge.is_alive(), f"the bridge is stuck: {out}"
        error = out.get("error")
        assert isinstance(error, SparsewatchError), out
        message = str(error)
        assert message.startswith("ingest stopped: the broker refuses the batch's messages (")
        assert "authoriz" in message.lower() and "\n" not in message
        assert committed(admin, route.group_id, route.source_topics[0], 2) == 0

        # the operator grants the permission: the restarted bridge forwards every record once
        _grant(admin, ResourceType.TOPIC, route.docs_topic, AclOperation.WRITE)
        with bridge_in_a_thread(route, store, until_idle_s=3.0) as (_, bridge, out):
            bridge.join(_DONE_S)
            assert not bridge.is_alive(), f"the bridge is stuck: {out}"
        assert "error" not in out, out
    finally:
        store.dispose()
    forwarded = read_all(admin, route.docs_topic, len(records))
    ids = sorted(json.loads(m.value())["id"] for m in forwarded)
    assert ids == sorted(str(make_tweet(i, "en")["id_str"]) for i in range(20))
    assert committed(admin, route.group_id, route.source_topics[0], 2) == len(records)


@pytest.mark.parametrize(
    ("resource", "says"),
    [
        (ResourceType.GROUP, "Group authorization failed"),
        (ResourceType.TOPIC, "Topic authorization failed"),
    ],
)
def test_a_worker_not_allowed_to_read_stops_in_one_line(
    acl_broker: tuple[str, AclKafka], tmp_path: Path, resource: ResourceType, says: str
) -> None:
    admin, broker = acl_broker
    settings, prefix = _replayed_as_alice(broker, tmp_path, 40)
    name = f"{prefix}.detector" if resource == ResourceType.GROUP else f"{prefix}.docs"
    _deny(admin, resource, name, AclOperation.READ)
    started = time.monotonic()
    run = run_process("run", "detector", "--until-idle", "60", timeout=150, **settings)
    assert run.returncode != 0 and time.monotonic() - started < 50, run.stderr[-2000:]
    line = _error_line(run.stderr)
    assert line.startswith("error: the broker does not allow this client to read ("), line
    assert says in line and f"group {prefix}.detector and on the topics {prefix}.docs" in line


def test_a_worker_not_allowed_to_write_its_scores_stops_and_loses_nothing(
    acl_broker: tuple[str, AclKafka], tmp_path: Path
) -> None:
    admin, broker = acl_broker
    settings, prefix = _replayed_as_alice(broker, tmp_path, 80)
    _deny(admin, ResourceType.TOPIC, f"{prefix}.scores", AclOperation.WRITE)
    run = run_process("run", "detector", "--until-idle", "60", timeout=150, **settings)
    assert run.returncode != 0, run.stderr[-2000:]
    line = _error_line(run.stderr)
    assert f"could not be delivered, the first to {prefix}.scores: " in line, line
    assert "Topic authorization failed" in line and line.count("\n") == 0
    assert _stored_documents(settings) == 0  # nothing of the window was committed

    _grant(admin, ResourceType.TOPIC, f"{prefix}.scores", AclOperation.WRITE)
    succeeded(run_process("run", "detector", "--until-idle", "5", timeout=150, **settings))
    assert _stored_documents(settings) == 80
