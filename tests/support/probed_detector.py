"""A ``sparsewatch run detector`` subprocess with its Prometheus endpoint, and the HTTP probes the
health tests read it with (as an orchestrator and a central Prometheus would)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.cli import clean_environ
from tests.support.ports import free_port

# (no proxy from the environment: the endpoint is this machine's, also on its own address)
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str) -> tuple[int, bytes]:
    """The status and body of a GET of ``url``; status 0 while nothing answers."""
    try:
        with _OPENER.open(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def probe(base: str, path: str) -> tuple[int, dict[str, Any]]:
    """A probe's status and JSON body (empty while nothing answers)."""
    status, body = get(base + path)
    return status, json.loads(body) if status else {}


def wait_for(condition: Callable[[], bool], what: str, proc: subprocess.Popen, log: Path) -> None:
    """Poll ``condition`` for up to 60 s; fail with the log's tail if ``proc`` ends first."""
    end = time.monotonic() + 60
    while not condition():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < end, f"timed out waiting for {what}: {log.read_text()[-3000:]}"
        time.sleep(0.05)


def start_detector(
    bootstrap: str, prefix: str, tmp_path: Path, *args: str, **settings: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """``sparsewatch run detector ARGS`` on ``prefix``'s topics (1-hour windows), SQLite in
    ``tmp_path``; its log is the returned file."""
    env = clean_environ(
        SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        SPARSEWATCH_KAFKA_TOPIC_PREFIX=prefix,
        SPARSEWATCH_KAFKA_GROUP_ID=prefix,
        SPARSEWATCH_KAFKA_PARTITIONS="2",
        SPARSEWATCH_DATA_DIR=str(tmp_path),
        SPARSEWATCH_WINDOWS_SIZE="1h",
        **settings,
    )
    log = tmp_path / "run.log"
    with log.open("ab") as err:
        cmd = [sys.executable, "-m", "sparsewatch", "run", "detector", *args]
        return subprocess.Popen(cmd, env=env, stderr=err), log


def start_probed_detector(
    bootstrap: str, prefix: str, tmp_path: Path, address: str = "127.0.0.1", **settings: str
) -> tuple[subprocess.Popen[bytes], Path, str]:
    """:func:`start_detector` serving its endpoint on ``address`` and a free port; also returns
    the endpoint's base URL."""
    port = free_port()
    args = ["--metrics-port", str(port)]
    if address != "127.0.0.1":
        args += ["--metrics-address", address]
    proc, log = start_detector(bootstrap, prefix, tmp_path, *args, **settings)
    host = f"[{address}]" if ":" in address else address
    return proc, log, f"http://{host}:{port}"


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM, and the worker ends cleanly within a minute."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
