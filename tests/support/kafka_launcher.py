"""The JVMs of a local broker (``sparsewatch kafka``), found through ``/proc``."""

from __future__ import annotations

import os
from pathlib import Path


def brokers_of(run_dir: Path) -> list[int]:
    """Pids of the JVMs running the broker configured in ``run_dir``."""
    config = os.fsencode(run_dir / "server.properties")
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kafka.Kafka" in args and config in args:
                pids.append(int(entry.name))
    return pids
