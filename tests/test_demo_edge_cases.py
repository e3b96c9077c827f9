"""The demo as a first-time user meets it: interrupted while its workers run, two demos sharing the
local broker (each with its own ``--out``), a demo killed outright, and no broker anywhere. Real
broker, real JVMs, real SQLite, no mocks."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparsewatch.config import load_config
from sparsewatch.demo import run_demo
from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_local import LocalKafka
from tests.support.cli import clean_environ
from tests.support.demo import demo_config
from tests.support.kafka_launcher import brokers_of, kill_brokers

DEMO = [sys.executable, "-m", "sparsewatch", "demo"]
NO_BROKER = "127.0.0.1:1"  # nothing answers there: the demo starts the local broker


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a demo with its data under ``data_dir`` (no SPARSEWATCH_* leaks in)."""
    return clean_environ(**{"SPARSEWATCH_DATA_DIR": str(data_dir), **extra})


def _demo(env: dict[str, str], documents: int, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*DEMO, "--documents", str(documents), "--top", "1", "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(condition, what: str, process: subprocess.Popen[str], seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, f"the demo ended before {what}: {process.communicate()}"
        assert time.monotonic() < deadline, f"no {what} within {seconds:.0f}s"
        time.sleep(0.1)


def _stored_documents(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return int(conn.execute("select count(*) from documents").fetchone()[0])
    except sqlite3.Error:  # not there yet
        return 0


def _stop_all(run_dir: Path, *demos: subprocess.Popen[str]) -> None:
    for demo in demos:
        demo.kill()
        demo.communicate()
    kill_brokers(run_dir)


def test_sigterm_while_the_workers_run_aborts_the_demo(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The workers stopped after their batch, then the demo printed what was stored so far as its
    results ("960 documents stored" of 6000) and ended with status 0."""
    env = _env(tmp_path, SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap)
    demo = _demo(env, 6000, tmp_path / "demo")
    try:
        _wait_for(lambda: _stored_documents(tmp_path / "demo" / "demo.db") > 0, "window", demo)
        demo.send_signal(signal.SIGTERM)
        out, err = demo.communicate(timeout=60)
    finally:
        demo.kill()
    assert demo.returncode == 130, (out, err)
    assert err.strip().splitlines()[-1] == "aborted"
    assert "documents stored" not in out and "== top" not in out


# The demo with a SIGTERM sent to itself once the replay has handed over its 1000th document.
SIGTERM_DURING_THE_REPLAY = """
import os, signal, sys
import sparsewatch.demo as demo
replay = demo.replay_documents
def replay_then_sigterm(*args, **kwargs):
    def progress(summary):
        if summary.read == 1000:
            os.kill(os.getpid(), signal.SIGTERM)
    return replay(*args, progress=progress, **kwargs)
demo.replay_documents = replay_then_sigterm
sys.argv = ["sparsewatch", "demo", "--documents", "6000", "--out", sys.argv[1]]
from sparsewatch.cli import main
main()
"""


def test_sigterm_while_the_stream_is_replayed_aborts_the_demo(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """It said "error: only 1000 of 6000 documents produced" with status 2, as if the broker had
    refused them."""
    env = _env(tmp_path, SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap)
    done = subprocess.run(
        [sys.executable, "-c", SIGTERM_DURING_THE_REPLAY, str(tmp_path / "demo")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 130, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines()[-1] == "aborted"


def test_a_demo_ending_leaves_the_local_broker_to_a_demo_still_running(tmp_path: Path) -> None:
    """Two demos (each its own --out, as the README says) shared the local broker, and the one
    that started it stopped it when it ended: the other then waited for the broker for ever. The
    last demo to end stops it now."""
    env = _env(tmp_path, SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=NO_BROKER)
    run_dir = tmp_path / "kafka"
    first = _demo({**env, "SPARSEWATCH_ANOMALY_ENABLED": "false"}, 500, tmp_path / "a")
    second = None
    try:
        _wait_for(lambda: LocalKafka(run_dir).status().running, "broker", first)
        second = _demo(env, 4000, tmp_path / "b")
        out, err = first.communicate(timeout=90)
        assert first.returncode == 0, err
        assert second.poll() is None, "the second demo ended first: no overlap to test"
        assert LocalKafka(run_dir).status().running, "the first demo stopped the broker in use"
        out, err = second.communicate(timeout=90)
        assert second.returncode == 0, err
        assert "4000 documents stored" in out
        assert not brokers_of(run_dir), "the last demo left the broker a demo started"
    finally:
        _stop_all(run_dir, first, *([second] if second else []))


def test_the_broker_of_a_demo_killed_outright_is_stopped_by_the_next_demo(
    tmp_path: Path,
) -> None:
    """A demo killed with SIGKILL (or a closed terminal's SIGHUP) leaves its broker running (it
    runs in a session of its own); the next demo reused it and left it running, as every later
    one did."""
    env = _env(tmp_path, SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=NO_BROKER)
    run_dir = tmp_path / "kafka"
    killed = _demo(env, 4000, tmp_path / "demo")
    try:
        _wait_for(lambda: (tmp_path / "demo" / "demo.db").exists(), "database", killed)
        killed.kill()
        killed.communicate()
        assert LocalKafka(run_dir).status().running
        config = demo_config(NO_BROKER, tmp_path, SPARSEWATCH_ANOMALY_ENABLED="false")
        result = run_demo(config, n_documents=500, out_dir=tmp_path / "demo")
        assert result.plot.is_file()
        assert not LocalKafka(run_dir).status().running
        assert not brokers_of(run_dir)
    finally:
        _stop_all(run_dir, killed)


def test_no_broker_anywhere_names_the_configured_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the configured broker down and no Java, the demo said only "'java' was not found on
    PATH": a user who had configured a broker was not told that it did not answer."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": NO_BROKER,
            "SPARSEWATCH_DATA_DIR": str(tmp_path),
        }
    )
    with pytest.raises(SparsewatchError) as err:
        run_demo(config, n_documents=500, out_dir=tmp_path / "demo")
    message = str(err.value)
    assert message.startswith(f"no Kafka broker answered at {NO_BROKER}")
    assert "'java' was not found on PATH" in message and "\n" not in message


def test_a_demo_with_no_document_scored_still_draws_its_plot(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A detector warming up on more documents than the demo has scores none: the plot then
    failed ("TypeError: ufunc 'invert' not supported") after the whole run."""
    config = demo_config(
        kafka_bootstrap,
        tmp_path,
        SPARSEWATCH_ANOMALY_ENABLED="false",
        SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS="1000",
    )
    result = run_demo(config, n_documents=500, out_dir=tmp_path / "demo")
    assert result.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with sqlite3.connect(result.database_url.removeprefix("sqlite:///")) as conn:
        scored = conn.execute("select count(novelty_score), count(*) from documents").fetchone()
    assert scored == (0, 500)


def test_a_demo_too_short_for_the_anomaly_worker_says_why_it_has_no_anomaly_alert(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Under about 1,100 documents the demo printed "top anomaly alerts (0 in total)" and
    nothing else: the anomaly worker fits on its first anomaly.reference_documents first."""
    from click.testing import CliRunner

    from sparsewatch.cli import cli

    env = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "SPARSEWATCH_DATA_DIR": str(tmp_path),
        "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "5000",
    }
    result = CliRunner().invoke(cli, ["demo", "--documents", "600", "--top", "1"], env=env)
    assert result.exit_code == 0, result.output
    section = result.output.split("== top anomaly alerts (0 in total)\n", 1)[1]
    assert section.startswith("  (none: the anomaly worker fits DL-OCSVM on its first 5000 ")
