"""An idle writer reports its broker's failures as they happen (``consumers/writer.py``).

librdkafka serves a producer's errors and log lines only when it is polled, and a writer polled
its producer only inside a job: a broker that went down while no window was written (a quiet
stream) was reported only once it was back and the next job polled, in one burst. An idle writer
now polls its producer every second, on its own thread (thread writer) or in its process."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from sparsewatch.consumers.writer import Destination, make_writer
from sparsewatch.storage.store import Store

from sparsewatch.kafka_local import free_ports

REFUSED = "Connection refused"


def _seen(kind: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> bool:
    if kind == "thread":
        return any(REFUSED in r.getMessage() for r in caplog.records)
    return REFUSED in capfd.readouterr().err  # (the writer process logs to the inherited stderr)


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_an_idle_writer_logs_a_broker_that_is_down_without_a_job(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO)
    bootstrap = f"127.0.0.1:{free_ports(1)[0]}"  # no broker listens there
    store = Store.open(f"sqlite:///{tmp_path / 'w.db'}")
    writer = make_writer(kind, store, Destination(bootstrap, "g", "x.docs", None, "x.dlq"), "t")
    try:
        deadline = time.monotonic() + 15
        seen = False
        while not seen and time.monotonic() < deadline:
            time.sleep(0.5)
            seen = _seen(kind, caplog, capfd)
        assert seen, "the idle writer's producer did not report the refused connection"
    finally:
        writer.close()
        store.dispose()
