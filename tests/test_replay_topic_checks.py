"""What ``sparsewatch replay`` checks about its topic, against a real broker.

A record too large for the topic's ``max.message.bytes`` was listed in the errors file as source
``<documents>`` with its position among the mapped documents, not its file and line as the README
promises; ``replay --topic <prefix>.scores`` (or the dead-letter or alerts topic) wrote documents
into the results topic, whereas ``ingest --to-topic`` refused it in one line.
"""

from __future__ import annotations

import json

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics

from tests.support.cli import run_cli, run_replay
from tests.support.kafka_topics import consume_values, topic_exists

pytestmark = pytest.mark.kafka

T0 = 1767225600000


def test_a_record_over_the_topics_limit_is_rejected_by_its_file_and_line(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys
) -> None:
    ensure_topics(kafka_bootstrap, {topic_name: 1}, **{"max.message.bytes": "4096"})
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(
        "not json\n"
        + "".join(
            json.dumps({"id": f"a{i}", "text": "short", "timestamp": T0 + i}) + "\n"
            for i in range(3)
        )
    )
    b.write_text("\n\n" + json.dumps({"id": "big", "text": "x " * 3000, "timestamp": T0}) + "\n")
    errors = tmp_path / "errors.jsonl"
    code, out, err = run_replay(
        monkeypatch,
        capsys,
        topic_name,
        kafka_bootstrap,
        str(a),
        str(b),
        "--errors",
        str(errors),
        "--json",
    )
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["read"], summary["produced"], summary["rejected"]) == (5, 3, 2)
    entries = [json.loads(line) for line in errors.read_text().splitlines()]
    assert [(e["source"], e["line"]) for e in entries] == [(str(a), 1), (str(b), 3)]
    assert f"exceeds the limit of topic {topic_name}" in entries[1]["reason"]
    assert entries[1]["raw"].startswith('{"id": "big"')
    assert sorted(v["id"] for v in consume_values(kafka_bootstrap, topic_name)) == [
        "a0",
        "a1",
        "a2",
    ]


def _replay_one_document(monkeypatch, capsys, tmp_path, topic: str, bootstrap: str):
    """``sparsewatch replay`` of a one-document corpus to ``topic``: (exit code, out, err)."""
    corpus = tmp_path / "one.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "t", "timestamp": T0}) + "\n")
    args = ["replay", str(corpus), "--topic", topic, "--bootstrap-servers", bootstrap]
    return run_cli(monkeypatch, capsys, *args)


@pytest.mark.parametrize(
    ("role", "what"), [("scores", "scores"), ("dlq", "dead-letter"), ("alerts", "alerts")]
)
def test_replay_refuses_a_results_topic_in_one_line_and_produces_nothing(
    kafka_bootstrap, topic_name, tmp_path, monkeypatch, capsys, role, what
) -> None:
    prefix = topic_name
    monkeypatch.setenv("SPARSEWATCH_KAFKA_TOPIC_PREFIX", prefix)
    monkeypatch.setenv("SPARSEWATCH_DATA_DIR", str(tmp_path / "data"))
    topic = f"{prefix}.{role}"
    code, out, err = _replay_one_document(monkeypatch, capsys, tmp_path, topic, kafka_bootstrap)
    assert code == 2 and out == ""
    assert err.startswith(f"error: --topic {topic} is the {what} topic, not a documents topic")
    assert err.count("\n") == 1
    assert not topic_exists(kafka_bootstrap, topic)


def test_replay_refuses_kafkas_own_topics(kafka_bootstrap, tmp_path, monkeypatch, capsys) -> None:
    topic = "__consumer_offsets"
    code, out, err = _replay_one_document(monkeypatch, capsys, tmp_path, topic, kafka_bootstrap)
    assert code == 2 and out == ""
    assert err.startswith("error: --topic __consumer_offsets is Kafka's internal topic")


def test_ingest_refuses_the_alerts_topic_as_replay_does(
    kafka_bootstrap, topic_name, monkeypatch, capsys
) -> None:
    """The one check both commands share."""
    monkeypatch.setenv("SPARSEWATCH_KAFKA_TOPIC_PREFIX", topic_name)
    topic = f"{topic_name}.alerts"
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "ingest",
        "--from-topic",
        f"{topic_name}.source",
        "--to-topic",
        topic,
        "--no-database",
        "--until-idle",
        "1",
        "--bootstrap-servers",
        kafka_bootstrap,
    )
    assert code == 2 and out == ""
    assert err.startswith(f"error: --to-topic {topic} is the alerts topic, not a documents topic")
    assert not topic_exists(kafka_bootstrap, topic)
