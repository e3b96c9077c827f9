"""The Prometheus endpoint on any address (``metrics_address``, ``--metrics-address``) and its
liveness and readiness probes (``/healthz``, ``/readyz``: ``consumers/health.py``), as an
orchestrator and a central Prometheus see them. Real broker, real SQLite.

The endpoint was bound to 127.0.0.1 only, which nothing outside the machine (or the container)
can scrape, and had no probe: a worker stuck behind a stopped writer looked as healthy as one
computing a day's window.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sparsewatch.consumers.health import Health
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.retry import with_backoff
from sparsewatch.replay.producer import replay_documents
from sparsewatch.replay.synthetic import generate_stream

from tests.support.cli import clean_environ
from tests.support.ingest_kafka import (
    make_route,
    prepare,
    reap_bridges,  # noqa: F401 (autouse: kills what spawn started)
    spawn,
)
from tests.support.ports import free_port
from tests.support.probed_detector import get, probe, start_probed_detector, stop, wait_for
from tests.support.worker_stubs import OneStreamProcessor, QuietState, running_on_backlog

pytestmark = [pytest.mark.kafka]


def test_readyz_turns_200_once_the_detector_consumes_on_ipv6(
    kafka_bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    """Served on ``::1`` (an IPv6 server): /readyz says 503 while the worker starts and joins its
    group, then 200; /healthz says 200 throughout; /metrics is the workers' exposition."""
    proc, log, base = start_probed_detector(kafka_bootstrap, topic_name, tmp_path, "::1")
    seen: list[tuple[int, str | None]] = []
    try:

        def ready() -> bool:
            status, body = probe(base, "/readyz")
            if status:
                seen.append((status, body["workers"].get("detector", {}).get("reason")))
                assert probe(base, "/healthz")[0] == 200
            return status == 200

        wait_for(ready, "/readyz 200", proc, log)
        assert seen[0][0] == 503, seen
        assert any(reason and reason.startswith("starting") for _, reason in seen), seen
        status, body = probe(base, "/healthz")
        assert status == 200 and body["workers"]["detector"]["alive"], body
        wait_for(lambda: " assigned [" in log.read_text(), "its partitions", proc, log)
        status, metrics = get(f"{base}/metrics")
        assert status == 200 and b'sparsewatch_documents_total{worker="detector"}' in metrics
        stop(proc, log)
    finally:
        proc.kill()


def _writer_process(pid: int) -> int:
    """The writer process among ``pid``'s children."""
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            if b"writer import serve" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
    raise AssertionError(f"no writer process under {pid}")


def test_a_worker_waiting_on_a_stopped_writer_is_not_alive_until_it_goes_on(
    kafka_bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    """Its writer process stopped (SIGSTOP) while windows are to be committed, the worker waits
    for the transaction for ever: after ``health_stall_s`` /healthz says 503 naming it and what
    it waits for, and /readyz 503 too; once the writer goes on (SIGCONT), both are 200 again."""
    ensure_topics(kafka_bootstrap, {f"{topic_name}.docs": 2})
    proc, log, base = start_probed_detector(
        kafka_bootstrap,
        topic_name,
        tmp_path,
        SPARSEWATCH_HEALTH_STALL_S="2",
        SPARSEWATCH_WRITER="process",
    )
    writer = None
    try:
        wait_for(lambda: probe(base, "/readyz")[0] == 200, "/readyz 200", proc, log)
        writer = _writer_process(proc.pid)
        os.kill(writer, signal.SIGSTOP)
        docs = generate_stream(600, kind="tweet", seed=3)  # (several hours: windows close)
        assert replay_documents(docs, kafka_bootstrap, f"{topic_name}.docs").produced == 600
        wait_for(lambda: probe(base, "/healthz")[0] == 503, "/healthz 503", proc, log)
        status, body = probe(base, "/healthz")
        detector = body["workers"]["detector"]
        assert status == 503 and body["status"] == "not alive", body
        assert detector["state"] == "writing" and not detector["alive"], body
        assert detector["seconds_since_progress"] > 2 and "no progress" in detector["problem"]
        status, body = probe(base, "/readyz")
        assert status == 503 and "no progress" in body["workers"]["detector"]["reason"], body
        os.kill(writer, signal.SIGCONT)
        wait_for(lambda: probe(base, "/healthz")[0] == 200, "/healthz 200 again", proc, log)
        wait_for(lambda: probe(base, "/readyz")[0] == 200, "/readyz 200 again", proc, log)
        stop(proc, log)
    finally:
        if writer is not None:
            with contextlib.suppress(ProcessLookupError):  # (gone with the worker)
                os.kill(writer, signal.SIGCONT)
        proc.kill()


class _SlowState(QuietState):
    """Every message closes a window that takes 3 s to compute."""

    def add(self, item: Any, partition: int, offset: int, now: float) -> list[Any]:
        time.sleep(3.0)
        return []


class _SlowProcessor(OneStreamProcessor):
    name = "slow-health"

    def new_state(self, stream: str, checkpoint: Any | None) -> _SlowState:
        return _SlowState()


def test_a_long_computation_under_the_keepalive_is_alive(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A window longer than ``health_stall_s`` is no stall while the consumer's keep-alive
    helper keeps the worker in its group: the worker computes, it is not stuck."""
    health = Health(stall_s=1.0)
    heartbeat = health.heartbeat("slow")
    computing: list[dict[str, Any]] = []
    keepalive = {"session.timeout.ms": 6000, "max.poll.interval.ms": 6000}  # helper after 1.5 s
    with running_on_backlog(
        _SlowProcessor(),
        kafka_bootstrap,
        tmp_path / "slow.db",
        3,
        poll_batch=1,
        consumer_overrides=keepalive,
        health=heartbeat,
    ):
        end = time.monotonic() + 30
        while len(computing) < 5 and time.monotonic() < end:
            alive, body = health.liveness()
            assert alive, body
            shown = body["workers"]["slow"]
            if shown["state"] == "computing" and shown["seconds_since_progress"] > 1.5:
                computing.append(shown)
            time.sleep(0.2)
    assert len(computing) == 5, "never seen computing for longer than health_stall_s"


def test_an_outage_waited_out_with_backoff_is_alive_but_not_ready(tmp_path: Path) -> None:
    """A database that cannot be opened (its folder missing), retried with backoff: each wait
    between attempts, longer than ``health_stall_s``, is the loop's progress (a restart would
    not bring the database back), and the loop is not ready until the call succeeds."""
    health = Health(stall_s=1.0)
    beat = health.heartbeat("w")
    beat.started()
    beat.beat()
    folder = tmp_path / "later"
    engine = sa.create_engine(f"sqlite:///{folder / 'sw.db'}")
    attempts: list[int] = []
    probes: list[tuple[tuple[bool, dict[str, Any]], tuple[bool, dict[str, Any]]]] = []
    done = threading.Event()

    def read() -> int:
        attempts.append(1)
        if len(attempts) == 2:
            folder.mkdir()  # the outage ends
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT 1")).scalar_one())

    def sample() -> None:
        while not done.is_set():
            probes.append((health.liveness(), health.readiness()))
            time.sleep(0.1)

    prober = threading.Thread(target=sample)
    prober.start()
    try:
        with beat.phase("database", "reading resume offsets"):
            waits = beat.retry_stop(threading.Event(), "reading resume offsets")
            assert with_backoff(read, "reading resume offsets", first_delay_s=1.5, stop=waits) == 1
    finally:
        done.set()
        prober.join()
        engine.dispose()
    assert len(attempts) == 2
    assert all(alive for (alive, _), _ in probes), [body for (_, body), _ in probes]
    reasons = [body["workers"]["w"]["reason"] for _, (_, body) in probes]
    assert "retrying: reading resume offsets" in reasons, reasons
    assert health.readiness()[0], health.readiness()


def _non_loopback_ipv4() -> str:
    """An IPv4 address of this machine other than loopback (``hostname -I``), else 127.0.0.1."""
    try:
        found = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    except OSError:
        found = []
    for text in found:
        address = ipaddress.ip_address(text)
        if address.version == 4 and not address.is_loopback:
            return text
    return "127.0.0.1"


def test_the_bridge_serves_metrics_and_probes_on_every_interface(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SPARSEWATCH_METRICS_ADDRESS=0.0.0.0``: the bridge's endpoint answers on the machine's
    own address, and says it is alive and, once it has joined its group, ready."""
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    monkeypatch.setenv("SPARSEWATCH_METRICS_ADDRESS", "0.0.0.0")
    port = free_port()
    log = tmp_path / "ingest.log"
    proc = spawn(route, log, until_idle=None, extra=("--metrics-port", str(port)))
    base = f"http://{_non_loopback_ipv4()}:{port}"
    wait_for(lambda: probe(base, "/readyz")[0] == 200, "/readyz 200", proc, log)
    status, body = probe(base, "/healthz")
    assert status == 200 and body["workers"]["ingest"]["alive"], body
    status, metrics = get(f"{base}/metrics")
    assert status == 200 and b'sparsewatch_consumer_lag{worker="ingest"}' in metrics
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]


@pytest.mark.parametrize(
    ("command", "settings", "expected"),
    [
        (
            ["run", "detector", "--metrics-address", "no-such-host.invalid"],
            {},
            "cannot serve metrics on no-such-host.invalid:{port} (metrics_address, "
            "SPARSEWATCH_METRICS_ADDRESS, --metrics-address): cannot resolve",
        ),
        (
            ["run", "detector"],
            {"SPARSEWATCH_METRICS_ADDRESS": "203.0.113.7"},  # (TEST-NET-3: no machine's)
            "cannot serve metrics on 203.0.113.7:{port} (metrics_address, "
            "SPARSEWATCH_METRICS_ADDRESS, --metrics-address): Cannot assign requested address",
        ),
        (
            ["run", "detector"],
            {"SPARSEWATCH_METRICS_ADDRESS": "fe80::1"},  # link-local without its scope: EINVAL
            "cannot serve metrics on [fe80::1]:{port} (metrics_address, "
            "SPARSEWATCH_METRICS_ADDRESS, --metrics-address): Invalid argument",
        ),
        (
            ["run", "detector"],
            {"SPARSEWATCH_METRICS_ADDRESS": "[::1]"},  # (shown once bracketed, not as [[::1]])
            "cannot serve metrics on [::1]:{port} (metrics_address, ",
        ),
        (
            ["run", "detector"],
            {"SPARSEWATCH_METRICS_ADDRESS": " "},
            "'metrics_address' (SPARSEWATCH_METRICS_ADDRESS) must be an IP address or host name",
        ),
        (
            ["run", "detector", "--metrics-address", ""],
            {},
            "Invalid value for '--metrics-address': cannot be blank",
        ),
        (
            ["ingest", "--from-topic", "t", "--no-database"],
            {"SPARSEWATCH_METRICS_ADDRESS": "no-such-host.invalid"},
            "cannot serve metrics on no-such-host.invalid:{port} (metrics_address, "
            "SPARSEWATCH_METRICS_ADDRESS): cannot resolve",
        ),
    ],
)
def test_a_bad_address_is_a_one_line_error_naming_the_setting(
    kafka_bootstrap: str,
    tmp_path: Path,
    command: list[str],
    settings: dict[str, str],
    expected: str,
) -> None:
    port = free_port()
    env = clean_environ(
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        SPARSEWATCH_DATA_DIR=str(tmp_path),
        **settings,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sparsewatch", *command, "--metrics-port", str(port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("error: ") and expected.format(port=port) in lines[0], lines[0]
