"""The demo's configuration in a test: a short demo's few windows, closed soon."""

from __future__ import annotations

from pathlib import Path

from sparsewatch.config import Config, load_config


def demo_config(bootstrap: str, data_dir: Path, **settings: str) -> Config:
    """The broker at ``bootstrap``, the data under ``data_dir``, windows of two hours closed
    after 3 s of quiet, and ``settings`` (``SPARSEWATCH_*`` variables) over these."""
    return load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SPARSEWATCH_DATA_DIR": str(data_dir),
            "SPARSEWATCH_WINDOWS_SIZE": "2h",
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "3",
            **settings,
        }
    )
