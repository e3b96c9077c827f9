"""``sparsewatch ingest`` with a ``^pattern`` that matches no topic yet warns once; its
diagnostics on stderr are JSON log lines like every other line the bridge writes (the warning
was a plain-text line printed before logging was set up, among the JSON lines a log collector
reads one object per line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from tests.support.ingest_kafka import create, make_route


def test_a_pattern_matching_no_topic_warns_in_a_json_log_line(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    route = replace(
        make_route(kafka_bootstrap, topic_name), source_topics=(f"^{topic_name}-none-",)
    )
    create(kafka_bootstrap, route.docs_topic, 1)
    args = [
        sys.executable, "-m", "sparsewatch", "ingest", "--no-database",
        "--bootstrap-servers", route.bootstrap, "--from-topic", route.source_topics[0],
        "--to-topic", route.docs_topic, "--group", route.group_id, "--until-idle", "1",
        "--id-field", "id_str", "--text-field", "full_text",
    ]  # fmt: skip
    env_prefix = route.dlq_topic.removesuffix(".dlq")
    done = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SPARSEWATCH_KAFKA_TOPIC_PREFIX": env_prefix},
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    warnings = [r for r in records if f"no topic matches ^{topic_name}-none- yet" in r["message"]]
    assert len(warnings) == 1 and warnings[0]["level"] == "WARNING"
