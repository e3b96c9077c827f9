"""What the tests against secured test brokers (SASL, TLS) share: the settings of a run of its
own, client properties as ``SPARSEWATCH_KAFKA_CLIENT_*`` variables or in a configuration file,
a corpus to replay, and a command's output once it succeeded."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from sparsewatch.replay.synthetic import generate_stream

CLIENT_VARIABLE = "SPARSEWATCH_KAFKA_CLIENT_"


def run_settings(bootstrap: str, tmp_path: Path, prefix: str, **extra: str) -> dict[str, str]:
    """A run of its own (topics ``<prefix>-<random>.*``, a data folder with its SQLite file):
    small models and windows that close quickly; ``extra`` over them."""
    return {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": f"{prefix}-{uuid.uuid4().hex[:8]}",
        "SPARSEWATCH_KAFKA_PARTITIONS": "2",
        "SPARSEWATCH_DATA_DIR": str(tmp_path / "data"),
        "SPARSEWATCH_DATABASE_URL": "",
        "SPARSEWATCH_LOG_LEVEL": "INFO",
        "SPARSEWATCH_WINDOWS_SIZE": "3h",
        "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "2",
        "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "50",
        "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "20",
        **extra,
    }


def client_variables(**properties: str | Path) -> dict[str, str]:
    """``properties`` (``ssl_ca_location=...``: periods as underscores) as
    ``SPARSEWATCH_KAFKA_CLIENT_*`` variables."""
    return {CLIENT_VARIABLE + name.upper(): str(value) for name, value in properties.items()}


def client_config_file(tmp_path: Path, properties: dict[str, str]) -> dict[str, str]:
    """``properties`` (librdkafka names) in a TOML file's ``[kafka.client]``, as
    ``SPARSEWATCH_CONFIG``."""
    lines = [f'"{name}" = "{value}"' for name, value in properties.items()]
    path = tmp_path / "sparsewatch.toml"
    path.write_text("[kafka.client]\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return {"SPARSEWATCH_CONFIG": str(path)}


def write_corpus(tmp_path: Path, n: int) -> Path:
    """``n`` generated tweets of stream ``alpha`` as a JSONL file to replay."""
    path = tmp_path / "corpus.jsonl"
    docs = generate_stream(n, kind="tweet", stream="alpha", seed=5)
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


def succeeded(proc: subprocess.CompletedProcess[str]) -> str:
    """The standard output of a command that must have succeeded (else its stderr's end)."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout
