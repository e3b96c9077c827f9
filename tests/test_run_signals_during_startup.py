"""``sparsewatch run`` told to stop (SIGTERM, or Ctrl-C: SIGINT to the whole process group) at
moments other than mid-batch: while the workers are being built, and while a writer process
starts. Real broker, real PostgreSQL (or SQLite)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sparsewatch.consumers.writer import Destination, ProcessWriter, WriteJob
from sparsewatch.storage.store import Store

pytestmark = [pytest.mark.kafka]

# The CLI, with the building of each worker preceded by a signal to this very process: the moment
# where the database is open and the topics are being created, before anything is read.
_SIGNAL_WHILE_BUILDING = """
import os, signal, sys
import sparsewatch.runner as runner
from sparsewatch.cli import main

build_worker = runner.build_worker
stop_signal = getattr(signal, sys.argv.pop(1))

def signalled_build_worker(*args, **kwargs):
    os.kill(os.getpid(), stop_signal)
    return build_worker(*args, **kwargs)

runner.build_worker = signalled_build_worker
main()
"""


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_while_the_workers_are_built_stops_the_run_with_status_0(
    kafka_bootstrap: str, database_url: str, tmp_path: Path, signal_name: str
) -> None:
    """A SIGTERM in the first seconds of ``sparsewatch run`` (imports, database, topics) killed
    it by Python's default (exit status 143, nothing said) and a Ctrl-C printed "aborted"
    (130): the stop handlers came only with the worker threads. Now both stop the start
    cleanly, as they stop the running workers: status 0, no error, nothing stored."""
    prefix = f"sig-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARSEWATCH_")}
    env |= {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
        "SPARSEWATCH_KAFKA_GROUP_ID": prefix,
        "SPARSEWATCH_DATABASE_URL": database_url,
        "SPARSEWATCH_DATA_DIR": str(tmp_path),
    }
    command = [sys.executable, "-c", _SIGNAL_WHILE_BUILDING, signal_name, "run", "all"]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "aborted" not in proc.stderr and "Traceback" not in proc.stderr
    with Store.open(database_url) as store:
        assert store.partition_offsets(f"{prefix}.detector", f"{prefix}.docs") == {}
        assert store.documents(limit=None) == []


def test_a_ctrl_c_while_the_writer_process_starts_leaves_it_running(
    kafka_bootstrap: str, database_url: str, topic_name: str
) -> None:
    """Ctrl-C in a terminal signals the whole process group, the writer process included. A
    writer still starting (importing, before it set SIGINT and SIGTERM aside) died of it with a
    KeyboardInterrupt traceback, and its worker with "the writer process ... is gone" (exit
    status 1) instead of finishing its batch. Now it ignores them from its first instruction
    and performs the job the worker hands it after the stop."""
    Store.open(database_url).dispose()  # (the schema: the writer opens the store as it is)
    destination = Destination(
        kafka_bootstrap, topic_name, f"{topic_name}.docs", None, f"{topic_name}.dlq"
    )
    writer = ProcessWriter(database_url, destination, "detector")
    try:
        child = writer._process.pid
        for sig in (signal.SIGINT, signal.SIGTERM):  # as the terminal, or kill -- -PGID
            os.kill(child, sig)
        time.sleep(0.2)
        committed_at = writer.submit(WriteJob(offsets={0: 42, 1: 7})).result()
    finally:
        writer.close()
    assert committed_at <= time.perf_counter()
    with Store.open(database_url) as store:
        assert store.partition_offsets(topic_name, f"{topic_name}.docs") == {0: 42, 1: 7}
