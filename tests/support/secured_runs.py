"""What the tests against secured test brokers (SASL, TLS) share: the settings of a run of its
own, and client properties as ``SPARSEWATCH_KAFKA_CLIENT_*`` variables."""

from __future__ import annotations

import uuid
from pathlib import Path

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
