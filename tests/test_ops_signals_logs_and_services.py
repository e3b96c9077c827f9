"""Operations around the workers: signal handlers, log lines, the debug switch, the demo's broker
on SIGTERM and afterwards, and scripts/services.sh's failures. Real broker, real PostgreSQL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparsewatch.config import load_config
from sparsewatch.demo import run_demo
from sparsewatch.kafka_local import LocalKafka
from sparsewatch.runner import run_loops
from tests.support.cli import clean_environ
from tests.support.kafka_launcher import broker_ended, broker_running, started_broker
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_run_loops_gives_the_signal_handlers_back() -> None:
    """They stayed on 'stop the workers' after the workers had returned: Ctrl-C did nothing for
    the rest of the process (the demo's plot and broker shutdown, a test session)."""
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    run_loops([], [])
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_debug_off_in_words_keeps_errors_to_one_line(tmp_path: Path) -> None:
    """SPARSEWATCH_DEBUG=false (or no, off) printed the traceback: only "" and "0" were off."""
    cmd = [sys.executable, "-m", "sparsewatch", "run", "detector"]
    bad = {"SPARSEWATCH_DETECTOR_INITIAL_ATOMS": "0", "SPARSEWATCH_DATA_DIR": str(tmp_path)}
    for value, traceback in (("false", False), ("off", False), ("1", True), ("yes", True)):
        env = clean_environ(**bad, SPARSEWATCH_DEBUG=value)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0
        assert ("Traceback" in proc.stderr) is traceback, (value, proc.stderr[-2000:])
        if not traceback:
            assert proc.stderr.strip().splitlines() == [
                "error: 'detector.initial_atoms' (SPARSEWATCH_DETECTOR_INITIAL_ATOMS) "
                "must be >= 1, got 0"
            ]


def test_worker_log_lines_are_json_whatever_the_message() -> None:
    """The log format was a %-template: a quote or a newline in a message (a database error
    quotes its host) made the line invalid JSON, and a logged traceback came on lines of its
    own."""
    code = """
import logging
from sparsewatch.logs import setup_logging
setup_logging("INFO")
log = logging.getLogger("sparsewatch.check")
log.info('connection to server at "127.0.0.1", port 1 failed\\nsecond line')
try:
    1 / 0
except ZeroDivisionError:
    log.exception("worker failed")
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    entries = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [e["message"] for e in entries] == [
        'connection to server at "127.0.0.1", port 1 failed\nsecond line',
        "worker failed",
    ]
    assert entries[0]["level"] == "INFO" and entries[0]["logger"] == "sparsewatch.check"
    assert "ZeroDivisionError" in entries[1]["traceback"]


def test_the_kafka_clients_own_log_lines_are_json_too() -> None:
    """librdkafka wrote its errors straight to stderr (``%3|1795576352.629|FAIL|...``) between
    the workers' JSON lines."""
    code = """
import time
from sparsewatch.logs import setup_logging
from sparsewatch.consumers.kafka_client import BatchConsumer
setup_logging("INFO")
consumer = BatchConsumer("127.0.0.1:1", "g", ["t"])
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    consumer.poll_batch(10, timeout=0.5)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    entries = [json.loads(line) for line in proc.stderr.splitlines()]
    library = [e for e in entries if e["logger"] == "sparsewatch.rdkafka"]
    assert library and "Connection refused" in library[0]["message"], proc.stderr
    assert all(e["time"].endswith("+00:00") for e in entries)  # ISO 8601, UTC


def test_sigterm_during_the_demo_stops_its_broker(tmp_path: Path) -> None:
    """SIGTERM ended the demo at once (Python's default), and the broker it had started, in a
    session of its own, kept running."""
    env = clean_environ(
        SPARSEWATCH_DATA_DIR=str(tmp_path),
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1",  # none there: the demo starts its own
    )
    demo = subprocess.Popen(
        [sys.executable, "-m", "sparsewatch", "demo", "--documents", "500"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid_file = tmp_path / "kafka" / "kafka.pid"
    pid = None
    try:
        pid = started_broker(demo, pid_file, 180)
        demo.send_signal(signal.SIGTERM)
        _, err = demo.communicate(timeout=90)
        assert demo.returncode == 130 and err.strip().splitlines()[-1] == "aborted", err
        assert broker_ended(pid), "the demo's broker outlived it"
    finally:
        demo.kill()
        if pid is not None and broker_running(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_demo_leaves_running_a_broker_it_did_not_start(tmp_path: Path) -> None:
    """With no broker at the configured address, the demo reused the one running from
    DATA_DIR/kafka (``sparsewatch kafka up --port 0``) and stopped it when done."""
    theirs = LocalKafka(tmp_path / "kafka", port=0)
    bootstrap = theirs.up()
    try:
        config = load_config(
            env={
                "SPARSEWATCH_DATA_DIR": str(tmp_path),
                "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
                "SPARSEWATCH_ANOMALY_ENABLED": "false",
                "SPARSEWATCH_WINDOWS_SIZE": "2h",
                "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "3",
            }
        )
        result = run_demo(config, n_documents=500, out_dir=tmp_path / "demo")
        assert config.kafka.bootstrap_servers == bootstrap  # the demo used it
        assert result.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert theirs.status().running, "the demo stopped a broker it had not started"
    finally:
        theirs.down()


# -- scripts/services.sh -------------------------------------------------------------------------


def _services(services_dir: Path, port: int, steps: str) -> subprocess.CompletedProcess[str]:
    """Run ``steps`` in bash after sourcing scripts/services.sh (not under ``set -e``, as a
    developer's shell runs them)."""
    env = clean_environ(SW_SERVICES_DIR=str(services_dir), SW_PG_PORT=str(port))
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    return subprocess.run(
        ["bash", "-c", f"source scripts/services.sh\n{steps}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def services_dirs() -> Iterator[list[Path]]:
    """Fresh folders under /tmp (which the postgres user can reach when run as root)."""
    dirs: list[Path] = []
    yield dirs
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def _new_dir(dirs: list[Path]) -> Path:
    d = Path(tempfile.mkdtemp(prefix="sw-ops-audit-", dir="/tmp"))
    dirs.append(d)
    return d


def test_postgres_up_fails_when_its_port_is_taken(services_dirs: list[Path]) -> None:
    """The second cluster did not start (its port taken), yet postgres_up returned 0: its
    connection check reached the first cluster, and the tests ran against that one."""
    port = free_port()
    first, second = _new_dir(services_dirs), _new_dir(services_dirs)
    try:
        assert _services(first, port, "postgres_up").returncode == 0
        proc = _services(second, port, 'postgres_up; echo "rc=$?"')
        assert proc.stdout.strip().splitlines()[-1] != "rc=0", proc.stdout + proc.stderr
        assert f"did not start on port {port}" in proc.stderr
    finally:
        _services(second, port, "postgres_down")
        _services(first, port, "postgres_down")


def test_postgres_up_and_down_repeat(services_dirs: list[Path]) -> None:
    port = free_port()
    folder = _new_dir(services_dirs)
    try:
        proc = _services(folder, port, "postgres_up && postgres_up && postgres_down && postgres_up")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.count("is up") == 3 and "error" not in proc.stderr
    finally:
        _services(folder, port, "postgres_down")


def test_kafka_up_fails_when_the_broker_does_not_start(services_dirs: list[Path]) -> None:
    """kafka_up printed "== Kafka is up at " (an empty address) and returned 0."""
    not_a_folder = _new_dir(services_dirs) / "file"
    not_a_folder.write_text("")
    proc = _services(not_a_folder, free_port(), 'kafka_up; echo "rc=$?"')
    assert proc.stdout.strip().splitlines()[-1] != "rc=0", proc.stdout + proc.stderr
    assert "Kafka is up" not in proc.stdout
