"""The local broker launcher: a real broker goes up, serves, goes down; clear errors otherwise."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from sparsewatch.consumers.kafka_client import BatchConsumer, producer_config

from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_local import LocalKafka


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparsewatch", *args], capture_output=True, text=True, check=False
    )


def test_up_serve_down(tmp_path):
    broker = LocalKafka(tmp_path / "k", port=0)
    bootstrap = broker.up()
    try:
        assert broker.status().running
        assert broker.up() == bootstrap  # idempotent: reuses the running broker
        producer = Producer(producer_config(bootstrap))
        producer.produce("launcher-check", value=json.dumps({"ok": 1}).encode())
        assert producer.flush(30) == 0
        with BatchConsumer(bootstrap, "launcher", ["launcher-check"]) as consumer:
            got: list = []
            for _ in range(30):
                got += consumer.poll_batch(timeout=1.0)
                if got:
                    break
        assert [json.loads(m.value()) for m in got] == [{"ok": 1}]
    finally:
        assert broker.down()
    assert not broker.status().running
    assert not broker.down()


def test_a_cluster_id_starting_with_a_dash_formats(tmp_path, monkeypatch):
    """One id in 64 starts with "-": the storage tool took it for an option and formatting failed
    with "argument --cluster-id/-t: expected one argument" (seen in a CI run)."""
    import sparsewatch.kafka_local as kafka_local

    monkeypatch.setattr(kafka_local, "_cluster_id", lambda: "-dashFirstClusterIdAA")
    broker = LocalKafka(tmp_path / "k", port=0)
    try:
        broker.up()
        meta = (tmp_path / "k" / "data" / "meta.properties").read_text()
        assert "cluster.id=-dashFirstClusterIdAA" in meta
    finally:
        broker.down()


def test_missing_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparsewatchError, match="'java' was not found"):
        LocalKafka(tmp_path / "k", port=0).up()


def test_cli_status_and_bad_arguments(tmp_path):
    status = _cli("kafka", "status", "--run-dir", str(tmp_path / "none"))
    assert status.returncode == 1 and "not running" in status.stdout
    bad = _cli("kafka", "up", "--port", "70000")
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr and "70000" in bad.stderr
