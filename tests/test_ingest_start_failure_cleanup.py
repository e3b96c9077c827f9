"""A start of the ingest bridge that fails leaves no Kafka client behind, on a real broker.

Before, a start check that failed after the transactional producer was made (a compacted
documents topic, a consumer that could not be made, transactions the broker refused) raised with
the producer still open: its librdkafka threads and connections lived on for as long as the
error was held (the traceback keeps the frames that held it). Each client's threads are
librdkafka's own (named ``rdk:...``), so a client left open is seen in ``/proc/self/task`` while
the error is still in hand; one closed has ended them (librdkafka joins them on close)."""

from __future__ import annotations

import json
import socket
import uuid
import warnings
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from sparsewatch.consumers import ingest
from sparsewatch.consumers.ingest import IngestRoute, run_ingest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.kafka_client import KafkaConnection
from sparsewatch.consumers.retry import StopFlag

from sparsewatch.errors import SparsewatchError
from tests.support.cli import clean_environ, run_process
from tests.support.ingest_kafka import TWEETS, create, make_route, prepare

pytestmark = pytest.mark.kafka

_TASKS = Path("/proc/self/task")


def _librdkafka_threads() -> Counter[str]:
    """The names of this process's librdkafka threads (``rdk:main``, ``rdk:broker1``, ...)."""
    names: Counter[str] = Counter()
    for task in _TASKS.iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if name.startswith("rdk:"):
            names[name] += 1
    return names


@pytest.fixture(autouse=True)
def _threads_visible() -> None:
    """Skip where threads are not listed in /proc (not Linux)."""
    if not _TASKS.is_dir():
        pytest.skip("no /proc/self/task: threads cannot be listed here")


def _left_open(before: Counter[str]) -> Counter[str]:
    """The librdkafka threads there are now beyond ``before`` (clients made since, still open)."""
    return _librdkafka_threads() - before


def test_a_compacted_documents_topic_closes_the_producer(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """The documents topic compacted: the one-line error, and the producer made before the check
    (its transactions initialised) is closed while the error is still held."""
    route = make_route(kafka_bootstrap, topic_name)
    create(kafka_bootstrap, route.source_topics[0], 1)
    create(kafka_bootstrap, route.dlq_topic, 1)
    ensure_topics(kafka_bootstrap, {route.docs_topic: 1}, **{"cleanup.policy": "compact"})
    before = _librdkafka_threads()
    with pytest.raises(SparsewatchError, match=f"topic {route.docs_topic} is compacted") as refused:
        run_ingest(route, TWEETS, StopFlag())
    left = _left_open(before)  # (the error still held: ``refused``)
    assert not left, f"{sorted(left.elements())} left open by: {refused.value}"


def test_a_consumer_that_cannot_be_made_closes_both_producers(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """A documents topic of smaller messages than the producer's (a second producer is made for
    its limit, fencing the first) and a source the consumer refuses to subscribe to (a pattern
    librdkafka cannot compile): the error goes on, and neither producer, nor the consumer, is
    left open."""
    route = make_route(kafka_bootstrap, topic_name)
    route = IngestRoute(
        bootstrap=route.bootstrap,
        group_id=route.group_id,
        source_topics=(f"^{topic_name}-src-(",),
        docs_topic=route.docs_topic,
        dlq_topic=route.dlq_topic,
    )
    create(kafka_bootstrap, route.dlq_topic, 1)
    ensure_topics(kafka_bootstrap, {route.docs_topic: 1}, **{"max.message.bytes": "200000"})
    before = _librdkafka_threads()
    with pytest.raises(KafkaException, match="Failed to set subscription") as refused:
        run_ingest(route, TWEETS, StopFlag())
    left = _left_open(before)  # (the error still held: ``refused``)
    assert not left, f"{sorted(left.elements())} left open by: {refused.value}"


def test_transactions_the_broker_refuses_close_the_producer(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """A transaction timeout over the broker's maximum (15 minutes): ``init_transactions`` fails
    at once, a fatal error, which closing the producer raises again; the one-line error goes on,
    the producer closed."""
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route, source_partitions=1)
    route = IngestRoute(
        bootstrap=KafkaConnection(kafka_bootstrap, producer={"transaction.timeout.ms": "3600000"}),
        group_id=route.group_id,
        source_topics=route.source_topics,
        docs_topic=route.docs_topic,
        dlq_topic=route.dlq_topic,
    )
    before = _librdkafka_threads()
    with pytest.raises(SparsewatchError, match="cannot start Kafka transactions") as refused:
        run_ingest(route, TWEETS, StopFlag())
    left = _left_open(before)  # (the error still held: ``refused``)
    assert not left, f"{sorted(left.elements())} left open by: {refused.value}"


def test_a_start_given_up_closes_the_producer_without_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No broker answers (a port nothing listens on): the start gives up after its bound
    (shortened here) with its one-line error, the producer closed, and no warning (closing a
    producer whose ``init_transactions`` is still in progress warns that it could not abort a
    transaction)."""
    monkeypatch.setattr(ingest, "_TXN_TIMEOUT_S", 1.0)
    monkeypatch.setattr(ingest, "_START_RETRY_S", 2.5)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    route = make_route(f"127.0.0.1:{port}", f"nobroker-{uuid.uuid4().hex[:8]}")
    before = _librdkafka_threads()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        with pytest.raises(SparsewatchError, match="cannot start Kafka transactions") as refused:
            run_ingest(route, TWEETS, StopFlag())
    left = _left_open(before)  # (the error still held: ``refused``)
    assert not left, f"{sorted(left.elements())} left open by: {refused.value}"
    assert [str(w.message) for w in warned] == []


def test_the_command_still_ends_with_its_one_line_error(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``sparsewatch ingest`` refused its transactions by the broker: stderr ends with the
    one-line error; before it come only librdkafka's own lines on the fatal error, served as the
    producer closes (as they are when a fatal error ends the bridge later), no warning from
    closing it."""
    prefix = f"isf-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, {f"{prefix}.source": 1})
    env = clean_environ(
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        SPARSEWATCH_KAFKA_TOPIC_PREFIX=prefix,
        SPARSEWATCH_KAFKA_GROUP_ID=prefix,
        SPARSEWATCH_DATABASE_URL=f"sqlite:///{tmp_path / 'r.db'}",
        SPARSEWATCH_KAFKA_CLIENT_TRANSACTION_TIMEOUT_MS="3600000",
    )
    result = run_process(
        "ingest", "--from-topic", f"{prefix}.source", "--until-idle", "1", timeout=120, **env
    )
    assert result.returncode != 0
    *logged, error = result.stderr.splitlines()
    assert error.startswith("error: cannot start Kafka transactions"), result.stderr
    assert {json.loads(line)["logger"] for line in logged} <= {"sparsewatch.rdkafka"}
