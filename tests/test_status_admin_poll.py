"""``sparsewatch status``'s look-up of the ingest bridge's offsets (``ingest_rows``): its
AdminClient was never polled, so its callbacks never ran: librdkafka's lines
(``kafka.client.debug``) stayed in its queue and were lost, and a request that failed said
nothing of why (the wait's TimeoutError has no message: the note read "did not tell the ingest
bridge's offsets: "). Now it is polled (``admin_client``) with an error callback, and the
failure names its cause in one line. Real broker; a closed port."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from sparsewatch.consumers.kafka_client import KafkaConnection
from sparsewatch.storage.store import Store

from sparsewatch.commands_status import ingest_rows
from tests.support.cli import clean_environ
from tests.support.ports import free_port

pytestmark = [pytest.mark.kafka]


def _committed_group(bootstrap: str) -> tuple[str, str]:
    """A new topic of one partition and a group that committed offset 0 on it (as an ingest
    bridge that has read nothing yet)."""
    name = f"admin-poll-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{name}.ingest"})
    try:
        consumer.commit(offsets=[TopicPartition(name, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    return name, f"{name}.ingest"


def test_the_offsets_admin_client_is_polled_its_lines_logged(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With librdkafka's admin debugging on, the lines of the client that asks for the group's
    offsets reach the logger (none did), and the offsets are read."""
    topic, group = _committed_group(kafka_bootstrap)
    connection = KafkaConnection.of(kafka_bootstrap, {"debug": "admin"})
    with caplog.at_level(logging.DEBUG, logger="sparsewatch.rdkafka"):
        rows = ingest_rows(connection, group, 10.0)
    assert [(r["topic"], r["committed_offset"]) for r in rows] == [(topic, 0)]
    lines = [r.getMessage() for r in caplog.records if r.name == "sparsewatch.rdkafka"]
    assert any(line.startswith("LISTCONSUMERGROUPOFFSETS ") for line in lines), lines


def test_offsets_from_a_closed_port_fail_saying_why_in_one_line() -> None:
    """A broker gone since the probe: the failure names the refused connection (it was an empty
    TimeoutError)."""
    port = free_port()
    with pytest.raises(KafkaException) as failure:
        ingest_rows(f"127.0.0.1:{port}", "a-group", 2.0)
    text = str(failure.value)
    assert f"Connect to ipv4#127.0.0.1:{port} failed: Connection refused" in text, text
    assert "Timed out" in text and "\n" not in text, text


def test_status_against_a_closed_port_says_why_in_its_note_only(tmp_path: Path) -> None:
    """``status`` with nothing listening: status 0, the database part, and the broker's absence
    as the note; nothing on stderr."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    Store.open(url).dispose()
    port = free_port()
    command = ["status", "--database-url", url, "--bootstrap-servers", f"127.0.0.1:{port}"]
    proc = subprocess.run(
        [sys.executable, "-m", "sparsewatch", *command, "--kafka-timeout", "2", "--format", "json"],
        env=clean_environ(SPARSEWATCH_DATA_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    note = json.loads(proc.stdout)["kafka"]
    assert note.startswith(f"Kafka at 127.0.0.1:{port} did not answer: "), note
    assert "Connection refused" in note and "\n" not in note, note
