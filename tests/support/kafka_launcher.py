"""The JVMs of a local broker (``sparsewatch kafka``), found through ``/proc``: which run, the
one a launching process started, and killing them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
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


def kill_brokers(run_dir: Path) -> None:
    """SIGKILL every JVM running the broker configured in ``run_dir`` (a failed test's)."""
    for pid in brokers_of(run_dir):
        os.kill(pid, signal.SIGKILL)


def broker_running(pid: int) -> bool:
    """Whether ``pid`` is a running broker JVM (a zombie, with no command line, is not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline


def started_broker(launcher: subprocess.Popen, pid_file: Path, seconds: float) -> int:
    """The pid of the broker ``launcher`` starts, once it is in ``pid_file`` (within
    ``seconds``, the launcher running meanwhile)."""
    deadline = time.monotonic() + seconds
    while not pid_file.exists():
        assert launcher.poll() is None and time.monotonic() < deadline, "no broker started"
        time.sleep(0.05)
    return int(pid_file.read_text())


def broker_ended(pid: int, seconds: float = 40) -> bool:
    """Whether the broker JVM ``pid`` has ended within ``seconds``."""
    deadline = time.monotonic() + seconds
    while broker_running(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not broker_running(pid)
