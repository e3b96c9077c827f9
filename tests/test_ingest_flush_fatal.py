"""The bridge (consumers/ingest.py) closing a producer that hit a fatal Kafka error, against a
real broker: the Kafka client raises the error again from the final flush, which must neither
replace the one-line error that ended the bridge nor escape as a raw KafkaException when the
bridge ended normally; nothing is lost or repeated, as a restarted bridge shows."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from sparsewatch.consumers import ingest
from sparsewatch.consumers.ingest import IngestRoute, run_ingest
from sparsewatch.consumers.kafka_client import producer_config
from sparsewatch.consumers.messages import parse_document
from sparsewatch.consumers.retry import StopFlag

from sparsewatch.errors import SparsewatchError
from tests.support.ingest_kafka import (
    TWEETS,
    committed,
    fence,
    make_route,
    prepare,
    produce,
    read_all,
    reap_bridges,  # noqa: F401 (autouse: kills the bridges spawn started)
    spawn,
    tweets,
)

FENCED = "error: ingest stopped by a fatal Kafka error: "


def _assert_delivered_once(route: IngestRoute, n: int) -> None:
    """Every one of the ``n`` source tweets is on the documents topic once (read committed),
    and the bridge's group has committed all of them."""
    docs = read_all(route.bootstrap, route.docs_topic, n)
    ids = [parse_document(m.value(), 100_000).id for m in docs]
    assert sorted(ids) == sorted(str(10_000 + i) for i in range(n))
    assert committed(route.bootstrap, route.group_id, route.source_topics[0], 1) == n


def test_a_fenced_bridge_reports_its_one_line_error_and_a_restart_delivers_the_rest(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """``sparsewatch ingest`` fenced by a newer producer with its transactional id (a second
    bridge of its instance) stops at its next transaction with the documented one-line error,
    status 2; the fatal error its final flush raises again is only logged. Before, that flush's
    KafkaException replaced the error (``error: KafkaException: ...``, status 1). A restarted
    bridge forwards the batch that failed: every tweet arrives once."""
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route, source_partitions=1)
    produce(kafka_bootstrap, route.source_topics[0], tweets(0, 200))
    log = tmp_path / "ingest.log"
    proc = spawn(route, log, until_idle=None)
    deadline = time.monotonic() + 120
    while committed(kafka_bootstrap, route.group_id, route.source_topics[0], 1) < 200:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.1)
    fencer = fence(route)
    produce(kafka_bootstrap, route.source_topics[0], tweets(200, 300))
    assert proc.wait(timeout=120) == 2, log.read_text()[-3000:]
    output = log.read_text()
    lines = output.strip().splitlines()
    assert lines[-1].startswith(FENCED) and "fenced" in lines[-1], output[-3000:]
    assert [line for line in lines if line.startswith("error:")] == lines[-1:]
    assert "Traceback" not in output
    assert "closing the Kafka clients after an error: producer: " in output  # (logged)
    fencer.flush(10)

    restarted = spawn(route, tmp_path / "restarted.log", until_idle=3.0)
    assert restarted.wait(timeout=120) == 0, (tmp_path / "restarted.log").read_text()[-2000:]
    _assert_delivered_once(route, 500)


def test_a_fatal_error_only_the_final_flush_reports_is_a_one_line_error(
    kafka_bootstrap: str, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bridge that ended normally (drained) whose producer is fenced with a message of a
    transaction pending when it closes (the client raises the fatal error from that flush, as
    it does after a transaction that timed out during an outage): a SparsewatchError naming the
    producer, not a raw KafkaException. The committed batches stand, the pending message is
    never seen, and a restarted bridge has nothing left to forward."""
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route, source_partitions=1)

    class FencedWhenClosing(Producer):
        def flush(self, *args: Any) -> int:
            fence(route)
            self.begin_transaction()
            self.produce(route.docs_topic, key=b"en", value=b"never committed")
            return super().flush(*args)

    def make(bootstrap: str, **overrides: Any) -> Producer:
        return FencedWhenClosing(producer_config(bootstrap, **overrides))

    monkeypatch.setattr(ingest, "make_producer", make)
    produce(kafka_bootstrap, route.source_topics[0], tweets(0, 300))
    with pytest.raises(SparsewatchError, match=r"while closing its producer: .*fenced"):
        run_ingest(route, TWEETS, StopFlag(), until_idle_s=2.0, batch_size=100)
    monkeypatch.undo()
    assert run_ingest(route, TWEETS, StopFlag(), until_idle_s=2.0).read == 0
    _assert_delivered_once(route, 300)
