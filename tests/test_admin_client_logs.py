"""librdkafka's own lines with ``kafka.client.debug`` set (a librdkafka property the configuration
passes to every client), from every client a command makes, go to the logger
``sparsewatch.rdkafka``: on a worker's stderr, one JSON object per line. Real broker, real SQLite.

The consumers and producers had a ``logger``; the AdminClients (the broker probe, topic
creation, the retention and message size lookups) and ``status``'s consumers had none, so
librdkafka printed their debug lines raw (``%7|...|rdkafka#producer-9| ...``): some 250 of them
among 3 JSON lines in a short ``run detector``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import clean_environ

pytestmark = [pytest.mark.kafka]


def _run(command: list[str], bootstrap: str, prefix: str, tmp_path: Path) -> list[str]:
    """``sparsewatch COMMAND`` (its database in ``tmp_path``) with librdkafka's broker debugging
    on, logging at DEBUG: the lines of its stderr."""
    env = clean_environ(
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        SPARSEWATCH_KAFKA_TOPIC_PREFIX=prefix,
        SPARSEWATCH_KAFKA_GROUP_ID=prefix,
        SPARSEWATCH_DATA_DIR=str(tmp_path),
        SPARSEWATCH_LOG_LEVEL="DEBUG",
        SPARSEWATCH_WRITER="process",
        SPARSEWATCH_KAFKA_CLIENT_DEBUG="broker",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sparsewatch", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr.splitlines()


def _clients(entries: list[dict[str, Any]]) -> set[str]:
    """librdkafka's names of the clients whose lines were logged by this process's threads
    (not by a writer process's: ``<worker>-writer``)."""
    return {
        entry["message"].split(" ", 2)[1]
        for entry in entries
        if entry["logger"] == "sparsewatch.rdkafka" and not entry["thread"].endswith("-writer")
    }


def test_a_worker_logs_every_clients_debug_lines_as_json(
    kafka_bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    """``run detector --until-idle``: its broker probe, topic creation, retention and size
    lookups (AdminClients: producers, to librdkafka) log through the structured logger, as its
    consumer does; its own producer lives in its writer process."""
    lines = _run(["run", "detector", "--until-idle", "1"], kafka_bootstrap, topic_name, tmp_path)
    raw = [line for line in lines if not line.startswith("{")]
    assert not raw, f"{len(raw)} lines not JSON, e.g. {raw[:3]}"
    clients = _clients([json.loads(line) for line in lines])
    admins = {name for name in clients if name.startswith("[rdkafka#producer-")}
    assert len(admins) >= 3, clients
    assert any(name.startswith("[rdkafka#consumer-") for name in clients), clients


def test_status_prints_no_raw_debug_line(
    kafka_bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    """``status`` (a report, which logs nothing below WARNING): its broker probe and offset
    lookups (AdminClients) and the consumers that read the partitions' offsets pass their
    lines to the logger too, instead of printing some 350 raw ones."""
    env = clean_environ(SPARSEWATCH_DATA_DIR=str(tmp_path))
    subprocess.run([sys.executable, "-m", "sparsewatch", "db", "upgrade"], env=env, check=True)
    assert _run(["status"], kafka_bootstrap, topic_name, tmp_path) == []
