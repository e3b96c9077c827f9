"""A compacted documents or scores topic is refused in one line, before anything is produced.

Log compaction keeps only the newest message of each key, and documents and scores are keyed by
stream: replay reported every document produced while the broker kept one per stream, and the
workers read what was left. Replay, the ingest bridge and the workers refuse such a topic at
start, naming it and its ``cleanup.policy``. Real broker.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics, refuse_compacted_topics

from sparsewatch.errors import SparsewatchError
from tests.support.cli import clean_environ, run_process
from tests.support.kafka_topics import consume_messages

pytestmark = pytest.mark.kafka


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "docs.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"id": f"d{i}", "text": f"words {i}", "timestamp": f"2024-01-01T00:{i:02d}:00Z"}
            )
            + "\n"
            for i in range(5)
        ),
        encoding="utf-8",
    )
    return path


def _refused(result, topic: str, policy: str) -> None:
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"topic {topic} is compacted (cleanup.policy={policy})" in result.stderr


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_replay_refuses_a_compacted_topic(
    kafka_bootstrap: str, tmp_path: Path, policy: str
) -> None:
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, {topic: 1}, **{"cleanup.policy": policy})
    result = run_process(
        "replay", str(_corpus(tmp_path)), "--topic", topic, "--bootstrap-servers", kafka_bootstrap
    )
    _refused(result, topic, policy)
    assert consume_messages(kafka_bootstrap, topic, timeout=5) == []


def test_the_check_passes_deleting_and_missing_topics(kafka_bootstrap: str) -> None:
    kept = f"kept-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, {kept: 1}, **{"cleanup.policy": "delete"})
    refuse_compacted_topics(kafka_bootstrap, (kept, f"missing-{uuid.uuid4().hex[:8]}", None))
    compacted = f"compacted-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, {compacted: 1}, **{"cleanup.policy": "compact"})
    with pytest.raises(SparsewatchError, match=f"topic {compacted} is compacted"):
        refuse_compacted_topics(kafka_bootstrap, (kept, compacted))


@pytest.mark.parametrize("compacted", ["docs", "scores"])
def test_the_workers_and_the_bridge_refuse_a_compacted_topic(
    kafka_bootstrap: str, tmp_path: Path, compacted: str
) -> None:
    """The detector (its documents or scores topic compacted), the anomaly worker (its scores
    topic) and the ingest bridge (its documents topic) stop at start in one line."""
    prefix = f"cmp-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, {f"{prefix}.{compacted}": 2}, **{"cleanup.policy": "compact"})
    env = clean_environ(
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        SPARSEWATCH_KAFKA_TOPIC_PREFIX=prefix,
        SPARSEWATCH_KAFKA_GROUP_ID=prefix,
        SPARSEWATCH_DATABASE_URL=f"sqlite:///{tmp_path / 'r.db'}",
    )
    roles = ["detector", "anomaly"] if compacted == "scores" else ["detector"]
    for role in roles:
        result = run_process("run", role, "--until-idle", "1", timeout=120, **env)
        _refused(result, f"{prefix}.{compacted}", "compact")
    if compacted == "docs":
        ensure_topics(kafka_bootstrap, {f"{prefix}.source": 1})
        result = run_process(
            "ingest", "--from-topic", f"{prefix}.source", "--until-idle", "1", timeout=120, **env
        )
        _refused(result, f"{prefix}.docs", "compact")
