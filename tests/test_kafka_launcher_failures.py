"""The local broker launcher as an operator meets it: a jar gone from a complete cache, a storage
format that fails, and a port another program holds. Real Maven (offline from its local
repository once it holds the artifacts), real JVMs, no mocks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_local import KAFKA_VERSION, LocalKafka, fetch_broker_jars
from tests.support.kafka_launcher import brokers_of

CLIENTS = f"kafka-clients-{KAFKA_VERSION}.jar"
KAFKA_UP = [sys.executable, "-m", "sparsewatch", "kafka", "up"]


def test_a_jar_deleted_from_a_complete_cache_is_fetched_again(tmp_path: Path) -> None:
    """Only the broker's own jar was checked for: with another jar gone (a cache cleaner, a
    partial copy of the cache) every start failed with "Unable to initialize main class
    kafka.tools.StorageTool | Caused by: java.lang.NoClassDefFoundError", naming no jar."""
    libs = fetch_broker_jars(tmp_path / "cache")
    jars = sorted(jar.name for jar in libs.glob("*.jar"))
    (libs / CLIENTS).unlink()
    assert fetch_broker_jars(tmp_path / "cache") == libs
    assert sorted(jar.name for jar in libs.glob("*.jar")) == jars
    assert zipfile.is_zipfile(libs / CLIENTS)


def test_a_failed_storage_format_is_one_line_naming_the_jars(tmp_path: Path) -> None:
    """A cache marked complete by an earlier version (its marker lists no jars) with a jar gone:
    the storage tool's two lines of JVM error were the message, and named no folder."""
    libs = fetch_broker_jars(tmp_path / "cache")
    (libs.parent / ".complete").write_text(KAFKA_VERSION, encoding="utf-8")
    (libs / CLIENTS).unlink()
    broker = LocalKafka(tmp_path / "k", port=0, cache_dir=tmp_path / "cache")
    with pytest.raises(SparsewatchError) as err:
        broker.up(timeout=30)
    message = str(err.value)
    assert message.startswith("formatting Kafka storage failed: ")
    assert "NoClassDefFoundError" in message and str(libs) in message
    assert "\n" not in message
    assert not brokers_of(tmp_path / "k")


def test_a_port_in_use_names_the_setting_sparsewatch_reads(tmp_path: Path) -> None:
    """The error pointed at KAFKA_BOOTSTRAP_SERVERS, which only the test fixtures and scripts
    read: set for ``sparsewatch``, it changed nothing."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARSEWATCH_")}
        proc = subprocess.run(
            [*KAFKA_UP, "--port", str(port), "--run-dir", str(tmp_path / "k")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: port {port} on 127.0.0.1 is already in use; choose another with --port or point "
        "kafka.bootstrap_servers (SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS) at the broker that owns it"
    ]
