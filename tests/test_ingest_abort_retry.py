"""The bridge (consumers/ingest.py) aborting a transaction while the broker is down: the abort
times out, and a new producer takes over once the broker is back instead of the bridge dying; a
stop requested meanwhile ends it cleanly (against a real broker, hung, killed and restarted)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from sparsewatch.consumers import ingest
from sparsewatch.consumers.ingest import IngestRoute
from sparsewatch.consumers.kafka_client import producer_config
from sparsewatch.consumers.retry import StopFlag
from sparsewatch.storage.store import Store

from sparsewatch.kafka_local import LocalKafka
from tests.support.ingest_kafka import (
    assert_exactly_once,
    bridge_in_a_thread,
    committed_or_none,
    make_route,
    prepare,
    produce,
    tweets_with_bad,
)

RECORDS = 20_000
HANG_AFTER = RECORDS // 4  # documents produced before the broker hangs
TAKE_OVER = "aborting the transaction timed out (the broker is down); a new producer takes over"


@contextmanager
def _broker_hung_mid_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[IngestRoute, Callable[[], None]]]:
    """A broker of this test's own and a route on it. Once the bridge's producer has produced
    :data:`HANG_AFTER` documents, in the middle of a transaction (its first messages delivered,
    so that their partitions are in the transaction), the broker hangs (SIGSTOP: its connections
    stay open, nothing is answered), and the rest of the transaction's messages are sent to it.
    Transactional calls time out after 2 s (60 s in production), a request and a transaction's
    messages after 5 s (``transaction.timeout.ms``; 60 s by default): the messages fail while
    the broker does not answer, which leaves an abortable transaction to abort. Yields the route
    and the broker's crash and restart (SIGKILL, then started again on its port)."""
    broker = LocalKafka(tmp_path / "broker", port=0)
    port = int(broker.up().rsplit(":", 1)[1])
    produced = [0]

    class HangsTheBroker(Producer):
        def produce(self, *args: Any, **kwargs: Any) -> None:
            produced[0] += 1
            if produced[0] == HANG_AFTER:
                assert self.flush(10) == 0
                os.kill(broker.status().pid, signal.SIGSTOP)
            super().produce(*args, **kwargs)

    def make(bootstrap: str, **overrides: Any) -> Producer:
        overrides["transaction.timeout.ms"] = 5_000
        return HangsTheBroker(producer_config(bootstrap, **overrides))

    monkeypatch.setattr(ingest, "_TXN_TIMEOUT_S", 2.0)
    # (a call to the hung broker waits for its 5 s request timeout, past the 2 s call timeout:
    # not taken for the client's hang, which a new producer would take over as well)
    monkeypatch.setattr(ingest, "_HUNG_AFTER_S", 30.0)
    monkeypatch.setattr(ingest, "make_producer", make)
    try:
        route = make_route(f"127.0.0.1:{port}", f"abort-{time.monotonic_ns()}")
        prepare(route, source_partitions=1)
        yield route, lambda: _restart(tmp_path / "broker", port)
    finally:
        broker.kill()  # (SIGKILL: also when it is stopped)
        LocalKafka(tmp_path / "broker", port=port).down()


@contextmanager
def _broker_hung_at_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[IngestRoute, Callable[[], None]]]:
    """As :func:`_broker_hung_mid_transaction`, but the broker hangs as the bridge's first
    transaction commits, every message of it delivered: only its end (EndTxn) waits, and the
    client calls a commit that times out retriable, for as long as the broker does not answer."""
    broker = LocalKafka(tmp_path / "broker", port=0)
    port = int(broker.up().rsplit(":", 1)[1])
    hung = [False]

    class HangsTheBroker(Producer):
        def commit_transaction(self, *args: Any) -> None:
            if not hung[0]:
                hung[0] = True
                assert self.flush(10) == 0
                os.kill(broker.status().pid, signal.SIGSTOP)
            super().commit_transaction(*args)

    def make(bootstrap: str, **overrides: Any) -> Producer:
        return HangsTheBroker(producer_config(bootstrap, **overrides))

    monkeypatch.setattr(ingest, "_TXN_TIMEOUT_S", 2.0)
    monkeypatch.setattr(ingest, "make_producer", make)
    try:
        route = make_route(f"127.0.0.1:{port}", f"commit-{time.monotonic_ns()}")
        prepare(route, source_partitions=1)
        yield route, lambda: _restart(tmp_path / "broker", port)
    finally:
        broker.kill()
        LocalKafka(tmp_path / "broker", port=port).down()


def _restart(folder: Path, port: int) -> None:
    """The broker of ``folder`` killed (SIGKILL: also when it is stopped) and started again on
    ``port``."""
    LocalKafka(folder, port=port).kill()
    # (kill() may return while the stopped JVM still holds its listening socket: a restart on
    # the port then failed now and then with "already in use")
    deadline = time.monotonic() + 30
    while _listening(port):
        assert time.monotonic() < deadline, f"port {port} still listened on"
        time.sleep(0.1)
    LocalKafka(folder, port=port).up()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait_committed(route: IngestRoute, thread: threading.Thread, out: dict[str, Any]) -> None:
    """Until the bridge (alive meanwhile) has committed every source record."""
    deadline = time.monotonic() + 240
    while committed_or_none(route.bootstrap, route.group_id, route.source_topics[0]) != RECORDS:
        assert thread.is_alive() and time.monotonic() < deadline, out
        time.sleep(0.2)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """The bridge's dead letters: a SQLite file of this test's."""
    with Store.open(f"sqlite:///{tmp_path / 'dead.db'}") as store:
        yield store


@contextmanager
def _bridge_at_take_over(
    route: IngestRoute, store: Store, caplog: pytest.LogCaptureFixture
) -> Iterator[tuple[StopFlag, threading.Thread, dict[str, Any]]]:
    """The bridge (batches of 50) on a thread, as :func:`bridge_in_a_thread` yields it, once its
    producer's abort has timed out and a new producer takes over (alive meanwhile)."""
    with (
        caplog.at_level(logging.WARNING, logger="sparsewatch.consumers.ingest"),
        bridge_in_a_thread(route, store, batch_size=50) as (stop, thread, out),
    ):
        deadline = time.monotonic() + 120
        while TAKE_OVER not in caplog.text:
            assert thread.is_alive() and time.monotonic() < deadline, out
            time.sleep(0.1)
        yield stop, thread, out


def test_an_abort_timing_out_during_a_broker_outage_leaves_it_to_a_new_producer(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    store: Store,
) -> None:
    """The broker hangs in the middle of a transaction, then crashes and comes back. The
    transaction's messages time out, it must be aborted, and the abort times out while the
    broker does not answer: a new producer takes over once the broker is back (aborting the
    transaction), the batch is read again, and every record is delivered exactly once.

    Before, the abort's timeout escaped as a KafkaException and the bridge died during the
    outage; an abort retried until the broker was back was fenced by then (the coordinator had
    aborted the transaction for its timeout), a fatal error that ended the bridge as well."""
    records, good, bad = tweets_with_bad(RECORDS)
    with _broker_hung_mid_transaction(tmp_path, monkeypatch) as (route, restart):
        produce(route.bootstrap, route.source_topics[0], records)
        with _bridge_at_take_over(route, store, caplog) as (_, thread, out):
            time.sleep(6.0)  # (the new producer waits for the broker: 3 of its timeouts)
            assert thread.is_alive(), out
            restart()
            _wait_committed(route, thread, out)
        assert not thread.is_alive() and "error" not in out, out
        assert out["stats"].aborted == 1
        assert_exactly_once(route, store, good, bad)


def test_a_stop_while_an_abort_waits_for_the_broker_ends_the_bridge_cleanly(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    store: Store,
) -> None:
    """Stopped while the producer taking over from one whose abort timed out waits for the
    broker, the bridge returns without an error (the next start's producer aborts the
    transaction left open); a bridge started once the broker is back delivers every record
    exactly once. (Before, the abort's timeout ended the bridge with a KafkaException.)"""
    records, good, bad = tweets_with_bad(RECORDS)
    with _broker_hung_mid_transaction(tmp_path, monkeypatch) as (route, restart):
        produce(route.bootstrap, route.source_topics[0], records)
        with _bridge_at_take_over(route, store, caplog) as (stop, thread, out):
            stop.request()
            thread.join(90)
        assert not thread.is_alive() and "error" not in out, out
        restart()
        with bridge_in_a_thread(route, store, batch_size=500) as (_, thread, out):
            _wait_committed(route, thread, out)
        assert "error" not in out, out
        assert_exactly_once(route, store, good, bad)


def test_a_stop_while_a_commit_waits_for_the_broker_ends_the_bridge(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    store: Store,
) -> None:
    """The broker hangs as a transaction commits (its messages all delivered): the commit is
    retried while the broker does not answer, and a stop requested meanwhile ends the bridge at
    the next attempt, the transaction left open; once the broker is back, a bridge started again
    aborts it and delivers every record exactly once. (Before, the commit was retried until the
    broker came back, whatever the stop: a SIGTERM during an outage did not end the bridge.)"""
    records, good, bad = tweets_with_bad(2_000)
    with _broker_hung_at_commit(tmp_path, monkeypatch) as (route, restart):
        produce(route.bootstrap, route.source_topics[0], records)
        with (
            caplog.at_level(logging.WARNING, logger="sparsewatch.consumers.ingest"),
            bridge_in_a_thread(route, store, batch_size=500) as (stop, thread, out),
        ):
            deadline = time.monotonic() + 60
            while "committing the transaction" not in caplog.text:
                assert thread.is_alive() and time.monotonic() < deadline, out
                time.sleep(0.1)
            stop.request()
            thread.join(30)
            assert not thread.is_alive(), "the stop did not end the commit's retries"
        assert "error" not in out, out
        assert "the transaction is left open" in caplog.text
        restart()
        with bridge_in_a_thread(route, store, batch_size=500) as (_, thread, out):
            deadline = time.monotonic() + 240
            while committed_or_none(route.bootstrap, route.group_id, route.source_topics[0]) != len(
                records
            ):
                assert thread.is_alive() and time.monotonic() < deadline, out
                time.sleep(0.2)
        assert "error" not in out, out
        assert_exactly_once(route, store, good, bad)
