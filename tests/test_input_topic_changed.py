"""A stream's checkpoint records the input topic it was taken reading (name and Kafka topic id):
a worker refuses, with a one-line error naming the way out, to restore it from another topic,
against a real broker and SQLite. Restored over a topic deleted and created again, or over the
topic of another prefix under the same group, a stream took the new topic's messages below its
old offsets for messages read before and dropped them silently (count windows: every one)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sparsewatch.consumers.kafka_admin import ensure_topics
from sparsewatch.consumers.worker import InputTopicChangedError
from sparsewatch.replay.producer import replay_documents
from sparsewatch.storage.store import Store

from sparsewatch.config import Config, load_config
from sparsewatch.runner import build_worker, run_loops
from tests.support.kafka_topics import create_after_deletion, delete_topic
from tests.support.pipeline_kafka import FIXED_DICTIONARY, pipeline_env, stored_scores, streams

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _config(bootstrap: str, prefix: str, url: str, group: str) -> Config:
    env = pipeline_env(
        bootstrap,
        prefix,
        url,
        SPARSEWATCH_KAFKA_GROUP_ID=group,
        SPARSEWATCH_ANOMALY_ENABLED="false",
        SPARSEWATCH_WINDOWS_COUNT="50",
        **FIXED_DICTIONARY,
    )
    return load_config(env=env)


def _detect(config: Config, docs: list[dict]) -> None:
    """``docs`` and end-of-stream markers through the detector until drained."""
    topic = config.kafka.topic("docs")
    ensure_topics(config.kafka.bootstrap_servers, {topic: 2})
    sent = replay_documents(docs, config.kafka.bootstrap_servers, topic, end_of_stream=True)
    assert sent.produced == len(docs)
    with Store.open(config.resolved_database_url) as store:
        run_loops([build_worker("detector", config, store)], [2.0], install_signals=False)


def _stored_ids(url: str) -> set[str]:
    with Store.open(url) as store:
        return {doc_id for _, doc_id in stored_scores(store)}


def _renamed(docs: list[dict], tag: str) -> list[dict]:
    return [{**d, "id": f"{tag}-{d['id']}"} for d in docs]


def test_a_topic_deleted_and_created_again_is_refused_until_the_group_is_forgotten(
    kafka_bootstrap, tmp_path: Path
):
    url = f"sqlite:///{tmp_path / 'recreated.db'}"
    name = f"recreated-{uuid.uuid4().hex[:8]}"
    config = _config(kafka_bootstrap, name, url, name)
    first = streams(150)
    _detect(config, first)
    assert len(_stored_ids(url)) == len(first)
    delete_topic(kafka_bootstrap, config.kafka.topic("docs"))
    create_after_deletion(kafka_bootstrap, config.kafka.topic("docs"), 2)
    second = _renamed(streams(150), "new")
    with pytest.raises(InputTopicChangedError) as refused:
        _detect(config, second)
    message = str(refused.value)
    assert "deleted and created again" in message
    assert f"sparsewatch db forget-group {name}.detector" in message
    assert "\n" not in message
    assert len(_stored_ids(url)) == len(first)  # nothing of the new topic taken as read before
    with Store.open(url) as store:
        store.forget_group(f"{name}.detector")
    with Store.open(url) as store:
        run_loops([build_worker("detector", config, store)], [2.0], install_signals=False)
    assert _stored_ids(url) == {d["id"] for d in first + second}


def test_the_checkpoint_of_another_prefixs_topic_is_refused(kafka_bootstrap, tmp_path: Path):
    """The same group and database over a new topic prefix whose streams have the old names: a
    restored stream took every new message below its old offsets as read before."""
    url = f"sqlite:///{tmp_path / 'prefixes.db'}"
    group = f"prefixes-{uuid.uuid4().hex[:8]}"
    old = _config(kafka_bootstrap, f"{group}-old", url, group)
    _detect(old, streams(150))
    new = _config(kafka_bootstrap, f"{group}-new", url, group)
    with pytest.raises(InputTopicChangedError, match=f"was taken reading topic '{group}-old.docs'"):
        _detect(new, _renamed(streams(150), "new"))
    assert len(_stored_ids(url)) == 300
