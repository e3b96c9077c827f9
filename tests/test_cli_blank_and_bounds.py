"""Command-line values that used to pass the option checks and then misbehave: blank names that
silently meant the default or rejected every record, timeouts that overflowed the Kafka client's
milliseconds, filters the database driver could not encode, an ingest bridge writing documents
into the scores or dead-letter topic. Each is now a one-line usage error (status 2), before any
broker or database is contacted."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sparsewatch.cli import cli

UNREACHABLE = ["--bootstrap-servers", "127.0.0.1:9"]


def _run(args: list[str], tmp_path) -> tuple[int, str]:
    env = {
        "SPARSEWATCH_DATA_DIR": str(tmp_path),
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    }
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.output


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "hello", "timestamp": 0}\n', encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["--id-field", ""], "--id-field"),
        (["--id-field", "  "], "--id-field"),
        (["--text-field", "title", "--text-field", ""], "--text-field"),
        (["--timestamp-field", ""], "--timestamp-field"),
        (["--stream-field", " "], "--stream-field"),
        (["--labels-field", ""], "--labels-field"),
        (["--bootstrap-servers", ""], "--bootstrap-servers"),
        (["--errors", ""], "--errors"),
        (["--connect-timeout", "3e6"], "--connect-timeout"),
        (["--partitions", str(2**31)], "--partitions"),
    ],
)
def test_replay_refuses_blank_names_and_overflowing_numbers(tmp_path, corpus, extra, option):
    code, out = _run(["replay", corpus, *extra], tmp_path)
    assert code == 2, out
    assert option in out and "Traceback" not in out


def test_status_refuses_a_kafka_timeout_the_client_cannot_count(tmp_path):
    code, out = _run(["status", *UNREACHABLE, "--kafka-timeout", "1e12"], tmp_path)
    assert code == 2 and "--kafka-timeout" in out


@pytest.mark.parametrize("role", ["scores", "dlq"])
def test_ingest_refuses_to_write_documents_into_the_scores_or_dead_letter_topic(tmp_path, role):
    args = ["ingest", "--from-topic", "tweets", "--to-topic", f"sparsewatch.{role}", *UNREACHABLE]
    code, out = _run(args, tmp_path)
    assert code == 2 and f"--to-topic sparsewatch.{role}" in out, out


@pytest.mark.parametrize("command", ["alerts", "documents"])
def test_grep_that_is_not_utf8_is_a_usage_error(tmp_path, command):
    # A Latin-1 terminal's "é": click keeps the undecodable byte as a surrogate escape.
    db = f"sqlite:///{tmp_path / 'r.db'}"
    code, out = _run([command, "--database-url", db, "--grep", "caf\udce9"], tmp_path)
    assert code == 2 and "not UTF-8" in out, out


def test_kafka_partitions_beyond_a_32_bit_count_is_refused_when_loaded():
    from sparsewatch.config import load_config
    from sparsewatch.errors import SparsewatchError

    with pytest.raises(SparsewatchError, match="partitions"):
        load_config(env={"SPARSEWATCH_KAFKA_PARTITIONS": str(2**31)})
    assert load_config(env={"SPARSEWATCH_KAFKA_PARTITIONS": str(2**31 - 1)}).kafka.partitions
