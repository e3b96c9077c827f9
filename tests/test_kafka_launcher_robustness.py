"""The local broker launcher under the conditions operations meet: an interrupted download, a stale
pid file, a folder name outside ASCII, a port it cannot bind, an interrupted start, two launches
at once, and bootstrap addresses without a port. Real Maven, real JVMs, no mocks."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparsewatch.cli import cli
from sparsewatch.commands_kafka import _first_port
from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_local import KAFKA_VERSION, SCALA_VERSION, LocalKafka, fetch_broker_jars
from tests.support.kafka_launcher import broker_ended, brokers_of, kill_brokers, started_broker
from tests.support.threads import outcomes_in_threads


def test_a_truncated_jar_of_an_interrupted_fetch_is_fetched_again(tmp_path: Path) -> None:
    """Maven does not overwrite a jar newer than the local repository's copy: the truncated jar
    of an interrupted copy stayed, the cache was marked complete, and the broker could not load
    its classes."""
    libs = tmp_path / "cache" / f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}" / "libs"
    libs.mkdir(parents=True)
    (libs / f"kafka-clients-{KAFKA_VERSION}.jar").write_bytes(b"PK\x03\x04" + b"\0" * 996)
    assert fetch_broker_jars(tmp_path / "cache") == libs
    jars = sorted(libs.glob("*.jar"))
    assert libs / f"kafka-clients-{KAFKA_VERSION}.jar" in jars
    assert all(zipfile.is_zipfile(jar) for jar in jars), [j.name for j in jars]


def test_concurrent_fetches_share_one_complete_cache(tmp_path: Path) -> None:
    results = outcomes_in_threads(lambda: fetch_broker_jars(tmp_path / "cache"), 2)
    libs = tmp_path / "cache" / f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}" / "libs"
    assert results == [libs, libs]
    assert all(zipfile.is_zipfile(jar) for jar in libs.glob("*.jar"))


def test_a_stale_pid_file_naming_another_process_is_not_the_broker(tmp_path: Path) -> None:
    """After a crash or a reboot the pid file's number may belong to any process: ``status``
    reported it as the running broker and ``kafka down`` killed it."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        run_dir = tmp_path / "k"
        run_dir.mkdir()
        (run_dir / "kafka.pid").write_text(str(other.pid))
        broker = LocalKafka(run_dir, port=0)
        assert not broker.status().running
        assert broker.down() is False
        time.sleep(0.5)
        assert other.poll() is None, "down() killed a process that was not its broker"
    finally:
        other.kill()
        other.wait()


def test_a_run_folder_named_outside_ascii_keeps_its_data_inside(tmp_path: Path) -> None:
    """The broker reads server.properties as ISO-8859-1: a UTF-8 'é' became 'Ã©', so the log
    directory went to another folder beside the run folder."""
    run_dir = tmp_path / "café" / "k"
    broker = LocalKafka(run_dir, port=0)
    try:
        broker.up()
        assert (run_dir / "data" / "meta.properties").is_file()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["café"]
    finally:
        broker.down()
        kill_brokers(run_dir)


def test_a_broker_that_cannot_bind_its_port_says_why(tmp_path: Path) -> None:
    """A port held by a socket that does not listen passes the 'in use' check; the broker then
    failed to bind and the error quoted the log's last lines, all stack frames."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        broker = LocalKafka(tmp_path / "k", port=port)
        try:
            with pytest.raises(SparsewatchError) as err:
                broker.up(timeout=60)
        finally:
            kill_brokers(tmp_path / "k")
    message = str(err.value)
    assert "exited" in message and f"127.0.0.1:{port}" in message
    assert "Address already in use" in message
    said = message.split("broker log:", 1)[1]
    assert ".java:" not in said and ".scala:" not in said  # no stack frames
    assert not broker.status().running and not brokers_of(tmp_path / "k")


def test_an_interrupted_start_leaves_no_broker_behind(tmp_path: Path) -> None:
    """The broker runs in its own session, so Ctrl-C reaches only the launcher: interrupted
    while waiting for the broker to answer, it left the JVM running."""
    run_dir = tmp_path / "k"
    # Python leaves SIGINT ignored when it starts with it ignored (a background job's children,
    # as under a CI script): the launcher takes Ctrl-C's default, as in a terminal
    code = "import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    code += "from sparsewatch.kafka_local import LocalKafka\nLocalKafka(sys.argv[1], port=0).up()"
    launcher = subprocess.Popen(
        [sys.executable, "-c", code, str(run_dir)], stderr=subprocess.DEVNULL
    )
    try:
        pid = started_broker(launcher, run_dir / "kafka.pid", 120)
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(60) != 0  # interrupted, not finished
        assert broker_ended(pid), "the broker outlived its interrupted launcher"
    finally:
        launcher.kill()
        kill_brokers(run_dir)


def test_concurrent_launches_from_one_folder_share_one_broker(tmp_path: Path) -> None:
    """Two launches both found no broker, both formatted the storage (one failed) and could
    both start a JVM on the same log directory."""
    run_dir = tmp_path / "k"
    try:
        results = outcomes_in_threads(lambda: LocalKafka(run_dir, port=0).up(timeout=60), 2)
        assert all(isinstance(r, str) for r in results), results
        assert results[0] == results[1]
        assert brokers_of(run_dir) == [LocalKafka(run_dir).status().pid]
    finally:
        LocalKafka(run_dir).down()
        kill_brokers(run_dir)


@pytest.mark.parametrize(
    ("bootstrap", "port"),
    [
        ("localhost", 9092),
        ("broker-1:19092,broker-2:19093", 19092),
        ("[::1]:19094", 19094),
        ("[::1]", 9092),
        ("PLAINTEXT://127.0.0.1:19095", 19095),
    ],
)
def test_the_client_port_of_a_bootstrap_address(bootstrap: str, port: int) -> None:
    assert _first_port(bootstrap) == port


def test_kafka_commands_take_a_bootstrap_address_without_a_port(tmp_path: Path) -> None:
    """``localhost`` (the clients' 9092) stopped ``kafka up|down|status`` with 'ValueError:
    invalid literal for int()'; a port out of range with an OverflowError."""
    run = ["kafka", "status", "--run-dir", str(tmp_path / "none")]
    env = {"SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": "localhost"}
    result = CliRunner().invoke(cli, run, env=env)
    assert result.exit_code == 1 and "not running" in result.output, result.exception
    env = {"SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": "localhost:99999"}
    result = CliRunner().invoke(cli, run, env=env)
    assert isinstance(result.exception, SparsewatchError)
    assert "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS" in str(result.exception)
    assert "'99999' is not a port" in str(result.exception)
