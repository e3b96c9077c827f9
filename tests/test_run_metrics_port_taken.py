"""``sparsewatch run`` with a metrics port it cannot bind: one line naming the setting. Real
broker, real SQLite."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("given_by", ["variable", "option"])
def test_a_taken_metrics_port_is_a_one_line_error_naming_the_setting(
    kafka_bootstrap: str, tmp_path: Path, topic_name: str, given_by: str
) -> None:
    """It was ``error: OSError: [Errno 98] Address already in use``: no setting, no port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARSEWATCH_")}
    env |= {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": topic_name,
        "SPARSEWATCH_KAFKA_GROUP_ID": topic_name,
        "SPARSEWATCH_DATA_DIR": str(tmp_path),
    }
    cmd = [sys.executable, "-m", "sparsewatch", "run", "detector", "--until-idle", "1"]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        if given_by == "variable":
            env["SPARSEWATCH_METRICS_PORT"] = str(port)
        else:
            cmd += ["--metrics-port", str(port)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert f"127.0.0.1:{port}" in lines[0]
    assert "metrics_port" in lines[0] and "SPARSEWATCH_METRICS_PORT" in lines[0]
    assert "--metrics-port" in lines[0]
    assert "Address already in use" in lines[0]
