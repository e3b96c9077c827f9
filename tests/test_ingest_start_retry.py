"""The bridge (consumers/ingest.py) starting while its broker cannot start transactions yet: a
broker that has just started (its transaction coordinator still loading: NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, timeouts) is waited for, for a bounded time, and a stop ends the
wait cleanly; and a fatal error of its producer (fenced) names the likely cause, a second bridge
of its instance. Against real brokers: the shared one, and one of the test's own that it
restarts and freezes (SIGSTOP) while the bridge starts."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sparsewatch.consumers import ingest
from sparsewatch.consumers.ingest import IngestRoute, run_ingest, transactional_id
from sparsewatch.consumers.retry import StopFlag
from sparsewatch.storage.store import Store

from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_local import LocalKafka
from tests.support.ingest_kafka import (
    TWEETS,
    assert_exactly_once,
    bridge_in_a_thread,
    committed,
    fence,
    make_route,
    prepare,
    produce,
    tweets,
    tweets_with_bad,
)

RETRYING = "starting Kafka transactions ("


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _unused_route() -> IngestRoute:
    """A route to a port nothing listens on: every ``init_transactions`` times out."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return make_route(f"127.0.0.1:{port}", f"nobroker-{time.monotonic_ns()}")


def _restart_frozen(broker_dir: Path, port: int) -> tuple[threading.Thread, int]:
    """Kill the broker of ``broker_dir`` and start it again on ``port``, frozen (SIGSTOP) as
    soon as it listens, before its transaction coordinator has loaded: the thread that starts
    it (it finishes once the broker is resumed) and the broker's pid."""
    LocalKafka(broker_dir, port=port).kill()
    deadline = time.monotonic() + 30
    while _listening(port):  # (the killed JVM may hold its socket a little longer)
        assert time.monotonic() < deadline, f"port {port} still listened on"
        time.sleep(0.1)
    starting = threading.Thread(target=LocalKafka(broker_dir, port=port).up, daemon=True)
    starting.start()
    deadline = time.monotonic() + 90
    while not _listening(port):
        assert starting.is_alive() and time.monotonic() < deadline, "the broker did not start"
        time.sleep(0.01)
    pid = LocalKafka(broker_dir, port=port).status().pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    return starting, pid


def test_a_bridge_started_with_its_broker_waits_for_the_transaction_coordinator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The bridge starts against a broker that has just been restarted and is frozen before
    its transaction coordinator has loaded (as a loaded machine stalls a starting JVM): its
    ``init_transactions`` times out (3 s here, 60 s in production), and then, once the broker
    runs, finds no coordinator or one still loading. The bridge retries, and delivers every
    record exactly once. Before, the first retriable error ended it ("cannot start Kafka
    transactions"), which made tests/test_ingest_abort_retry.py fail now and then."""
    monkeypatch.setattr(ingest, "_TXN_TIMEOUT_S", 3.0)
    broker_dir = tmp_path / "broker"
    port = int(LocalKafka(broker_dir, port=0).up().rsplit(":", 1)[1])
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    pid = None
    try:
        route = make_route(f"127.0.0.1:{port}", f"start-{time.monotonic_ns()}")
        prepare(route, source_partitions=1)
        records, good, bad = tweets_with_bad(3_000)
        produce(route.bootstrap, route.source_topics[0], records)
        starting, pid = _restart_frozen(broker_dir, port)
        with (
            caplog.at_level(logging.WARNING, logger="sparsewatch.consumers.ingest"),
            bridge_in_a_thread(route, store, until_idle_s=3.0, batch_size=200) as (_, bridge, out),
        ):
            time.sleep(7.0)  # two of its init_transactions timeouts
            assert bridge.is_alive(), out
            os.kill(pid, signal.SIGCONT)
            starting.join(90)
            bridge.join(120)
            assert not bridge.is_alive() and "error" not in out, out
        assert RETRYING in caplog.text
        assert out["stats"].read == len(records) and out["stats"].aborted == 0
        assert_exactly_once(route, store, good, bad)
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        store.dispose()
        LocalKafka(broker_dir, port=port).kill()


def test_a_stop_while_the_bridge_waits_at_start_ends_it_cleanly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ctrl-C or SIGTERM while the bridge waits for the broker to start its transactions: it
    returns having read nothing, without an error, within a call's timeout. (Before, the first
    timeout ended it with "cannot start Kafka transactions".)"""
    monkeypatch.setattr(ingest, "_TXN_TIMEOUT_S", 1.0)
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    try:
        with bridge_in_a_thread(_unused_route(), store) as (stop, bridge, out):
            time.sleep(2.5)
            assert bridge.is_alive(), out
            stop.request()
            bridge.join(5.0)
            assert not bridge.is_alive() and "error" not in out, out
        assert out["stats"].read == 0 and out["stats"].transactions == 0
    finally:
        store.dispose()


def test_a_start_that_outlasts_its_bound_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker that never answers: the bridge gives up after its bound (120 s in production)
    with a one-line SparsewatchError saying how long it retried."""
    monkeypatch.setattr(ingest, "_TXN_TIMEOUT_S", 1.0)
    monkeypatch.setattr(ingest, "_START_RETRY_S", 2.5, raising=False)  # (new)
    route = _unused_route()
    started = time.monotonic()
    with pytest.raises(SparsewatchError) as raised:
        run_ingest(route, TWEETS, StopFlag())
    message = str(raised.value)
    tid = transactional_id(route.group_id, route.instance)
    assert message.startswith(f"cannot start Kafka transactions ({tid}; retried for ")
    assert "\n" not in message
    assert 2.5 <= time.monotonic() - started < 15.0


def test_a_fenced_producer_names_a_second_bridge_of_its_instance(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """A newer producer with the bridge's transactional id (a second bridge started with the
    same --instance) fences the bridge's producer: the one-line error says so, as the
    consumer's own fatal error does."""
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route, source_partitions=1)
    produce(kafka_bootstrap, route.source_topics[0], tweets(0, 100))
    store = Store.open(f"sqlite:///{tmp_path / 'dead.db'}")
    fencer: Any = None
    try:
        with bridge_in_a_thread(route, store) as (_, bridge, out):
            deadline = time.monotonic() + 120
            while committed(kafka_bootstrap, route.group_id, route.source_topics[0], 1) < 100:
                assert bridge.is_alive() and time.monotonic() < deadline, out
                time.sleep(0.1)
            fencer = fence(route)
            produce(kafka_bootstrap, route.source_topics[0], tweets(100, 100))
            bridge.join(120)
            assert not bridge.is_alive(), out
        error = out.get("error")
        assert isinstance(error, SparsewatchError), out
        tid = transactional_id(route.group_id, route.instance)
        assert str(error).startswith("ingest stopped by a fatal Kafka error: ")
        assert str(error).endswith(
            f" (two bridges of instance {tid}? give each its own --instance)"
        )
        assert "fenced" in str(error) and "\n" not in str(error)
    finally:
        if fencer is not None:
            fencer.flush(10)
        store.dispose()
