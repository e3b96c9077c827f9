"""The demo on a shared broker: its own topics and consumer groups, never the configured group of a
running deployment, and never another demo's. Real broker."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from sparsewatch.config import load_config, topic_name_problem
from sparsewatch.demo import demo_prefix, run_demo


def test_demos_started_in_the_same_second_get_their_own_prefixes() -> None:
    """The prefix was ``demo-<seconds>``: two demos started in the same second shared topics."""
    prefixes = [demo_prefix() for _ in range(200)]
    assert len(set(prefixes)) == len(prefixes)
    assert all(topic_name_problem(f"{p}.scores") is None for p in prefixes)


def test_the_demo_keeps_off_the_configured_consumer_group(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The demo's workers joined ``<group_id>.detector`` / ``.anomaly``: on a shared broker they
    rebalanced the running deployment's groups (and read their topics' offsets)."""
    group = f"prod-{uuid.uuid4().hex[:12]}"
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "SPARSEWATCH_KAFKA_GROUP_ID": group,
            "SPARSEWATCH_DATA_DIR": str(tmp_path),
            "SPARSEWATCH_WINDOWS_SIZE": "2h",
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "3",
        }
    )
    result = run_demo(config, n_documents=600, out_dir=tmp_path / "demo")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    groups = {g.group_id for g in admin.list_consumer_groups(request_timeout=30).result().valid}
    assert not [g for g in groups if g.startswith(group)]
    assert {f"{result.topic_prefix}.detector", f"{result.topic_prefix}.anomaly"} <= groups
    assert result.topic_prefix.startswith("demo-")
    assert config.kafka.group_id == config.kafka.topic_prefix == result.topic_prefix
