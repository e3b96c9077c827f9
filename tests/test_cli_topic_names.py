"""Topic names Kafka would refuse, and replay options that do nothing alone: usage errors before
any connection, instead of "cannot reach Kafka" after the connect timeout or a silent no-op."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparsewatch.cli import cli
from sparsewatch.config import MAX_TOPIC_CHARS, load_config, topic_name_problem
from sparsewatch.errors import SparsewatchError


@pytest.mark.parametrize("name", ["sparsewatch.docs", "a", "A-b_c.9", "...", "x" * MAX_TOPIC_CHARS])
def test_legal_topic_names(name: str) -> None:
    assert topic_name_problem(name) is None


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a b", "docs!", "tópico", "a/b", "x" * (MAX_TOPIC_CHARS + 1)]
)
def test_illegal_topic_names(name: str) -> None:
    assert topic_name_problem(name)


@pytest.mark.parametrize("prefix", ["bad topic", "a:b", "x" * (MAX_TOPIC_CHARS - 6)])
def test_a_prefix_kafka_would_refuse_is_a_configuration_error(prefix: str) -> None:
    """The longest topic of a prefix is ``<prefix>.scores``: every topic must be legal."""
    with pytest.raises(SparsewatchError, match="SPARSEWATCH_KAFKA_TOPIC_PREFIX"):
        load_config(env={"SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix})


def test_the_longest_legal_prefix_is_accepted() -> None:
    prefix = "x" * (MAX_TOPIC_CHARS - len(".scores"))
    config = load_config(env={"SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix})
    assert topic_name_problem(config.kafka.topic("scores")) is None


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "docs.jsonl"
    doc = {"id": "a", "text": "hello", "timestamp": "2020-01-01T00:00:00Z"}
    path.write_text(json.dumps(doc) + "\n")
    return path


def _replay(tmp_path: Path, *args: str):
    # a port nothing listens on: reaching the broker would be a different error, later
    env = {
        "SPARSEWATCH_DATA_DIR": str(tmp_path),
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    }
    return CliRunner().invoke(
        cli, ["replay", str(_corpus(tmp_path)), "--connect-timeout", "1", *args], env=env
    )


@pytest.mark.parametrize(
    ("topic", "reason"),
    [("a b", "only ASCII letters"), ("..", "cannot be '.' or '..'"), ("x" * 250, "at most 249")],
)
def test_replay_refuses_an_illegal_topic_name(tmp_path: Path, topic: str, reason: str) -> None:
    result = _replay(tmp_path, "--topic", topic)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--topic'" in result.output and reason in result.output
    assert "cannot reach Kafka" not in result.output


def test_replay_refuses_max_wait_without_speedup(tmp_path: Path) -> None:
    """``--max-wait`` caps the pauses of ``--speedup``; alone it was silently ignored."""
    result = _replay(tmp_path, "--max-wait", "3")
    assert result.exit_code == 2, result.output
    assert "--max-wait caps the pauses of --speedup" in result.output


def test_replay_with_a_legal_topic_gets_as_far_as_the_broker(tmp_path: Path) -> None:
    """The checks refuse only what they should: a legal name and --max-wait with --speedup reach
    the (here unreachable) broker."""
    result = _replay(tmp_path, "--topic", "ok.topic-1", "--speedup", "10", "--max-wait", "3")
    assert isinstance(result.exception, SparsewatchError)
    assert str(result.exception).startswith("cannot reach Kafka at 127.0.0.1:1")
