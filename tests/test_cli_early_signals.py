"""SIGTERM and Ctrl-C in the first instants of a ``sparsewatch`` process, before its command's
modules are imported. Real processes, real broker, real SQLite.

``sparsewatch run`` set its stop handlers only after some 0.5-1 s of imports (SQLAlchemy,
confluent-kafka, NumPy): a SIGTERM meanwhile killed it by Python's default (exit status 143,
nothing said), a Ctrl-C printed a KeyboardInterrupt traceback. The CLI now records both from its
entry point (``sparsewatch.cli.EarlySignals``): ``run`` then stops cleanly with status 0 before
starting anything; every other command gets Python's handling back before it runs.

(A signal before the interpreter runs any of sparsewatch's code, in its first ~50 ms, is beyond
any handler: the tests signal once the process catches SIGTERM, and check that this is before the
heavy imports, the process frozen meanwhile.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sparsewatch.storage.store import Store

from tests.support.cli import clean_environ

pytestmark = [pytest.mark.kafka]

# Shared objects that `run`'s modules load, absent while only the CLI's entry point has run.
HEAVY = ("confluent_kafka", "librdkafka", "numpy", "sqlalchemy")


def _caught(pid: int) -> int:
    """The mask of the signals ``pid`` catches (``SigCgt``), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    line = next(x for x in status.splitlines() if x.startswith("SigCgt:"))
    return int(line.split()[1], 16)


def _catches(pid: int, sig: signal.Signals) -> bool:
    return bool(_caught(pid) & (1 << (sig - 1)))


def _spawn(*args: str, **settings: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sparsewatch", *args],
        env=clean_environ(**settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_settings(bootstrap: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    return {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
        "SPARSEWATCH_KAFKA_GROUP_ID": prefix,
        "SPARSEWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'results.db'}",
        "SPARSEWATCH_DATA_DIR": str(tmp_path),
    }


def _first_catch(proc: subprocess.Popen[str]) -> tuple[float, list[str]]:
    """Wait for ``proc`` to catch SIGTERM, and freeze it (SIGSTOP) at once: when that was, and the
    heavy shared objects it had loaded by then."""
    deadline = time.monotonic() + 60
    while not _catches(proc.pid, signal.SIGTERM):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the process never caught SIGTERM"
        time.sleep(0.0005)
    os.kill(proc.pid, signal.SIGSTOP)
    at = time.monotonic()
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    return at, sorted({name for name in HEAVY if name in maps})


def _signal_frozen(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    """``sig`` to the frozen ``proc`` (pending until it runs again), then let it run."""
    os.kill(proc.pid, sig)
    os.kill(proc.pid, signal.SIGCONT)


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, err


def _assert_stopped_before_the_start(code: int, err: str, url: str, prefix: str) -> None:
    assert code == 0, err
    assert "Traceback" not in err and "aborted" not in err and "error" not in err.lower(), err
    assert "no worker ran" in err, err
    with Store.open(url) as store:
        assert store.partition_offsets(f"{prefix}.detector", f"{prefix}.docs") == {}
        assert store.documents(limit=None) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_at_the_first_instant_run_catches_it_stops_it_cleanly(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, sig: signal.Signals
) -> None:
    """The run catches SIGTERM before importing its command's modules (it did only after them),
    and a signal at that first instant stops it with status 0 and one log line."""
    settings = _run_settings(kafka_bootstrap, topic_name, tmp_path)
    proc = _spawn("run", "all", **settings)
    try:
        _, loaded = _first_catch(proc)
        _signal_frozen(proc, sig)
    finally:
        code, err = _finish(proc)
    assert loaded == [], f"SIGTERM was caught only once {loaded} were loaded"
    _assert_stopped_before_the_start(code, err, settings["SPARSEWATCH_DATABASE_URL"], topic_name)
    assert f"{sig.name} before the start: no worker ran" in err
    assert len(err.splitlines()) == 1, err


@pytest.mark.parametrize("delay_s", [0.0, 0.1, 0.25, 0.45])
def test_a_sigterm_during_runs_imports_stops_it_cleanly(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, delay_s: float
) -> None:
    """SIGTERM ``delay_s`` after the process can catch it: during the imports, the configuration,
    the metrics endpoint or the workers' building. Status 0, "no worker ran", nothing stored."""
    settings = _run_settings(kafka_bootstrap, topic_name, tmp_path)
    proc = _spawn("run", "all", **settings)
    try:
        _first_catch(proc)
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(delay_s)
        proc.send_signal(signal.SIGTERM)
    finally:
        code, err = _finish(proc)
    _assert_stopped_before_the_start(code, err, settings["SPARSEWATCH_DATABASE_URL"], topic_name)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_other_commands_keep_pythons_handling_of_an_early_signal(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Any other command gets Python's handlers back before it runs, a signal recorded meanwhile
    then delivered to them: SIGTERM ends it by the signal, as it did; Ctrl-C is click's "aborted"
    (status 130), where a KeyboardInterrupt traceback was printed during the imports."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    Store.open(url).dispose()
    proc = _spawn("status", "--no-kafka", "--database-url", url)
    try:
        _first_catch(proc)
        _signal_frozen(proc, sig)
    finally:
        code, err = _finish(proc)
    assert "Traceback" not in err, err
    if sig == signal.SIGTERM:
        assert (code, err) == (-signal.SIGTERM, "")
    else:
        assert (code, err.split()) == (130, ["aborted"])
