"""SIGTERM while ``sparsewatch run`` waits at its start for a broker that does not answer
(``sparsewatch/kafka_options.py``'s ``broker_topics``). Real worker; the broker's port closed.

The wait was made of requests each twice as long as the last (0.25 s, 0.5 s, ... 16 s), and a
signal's handler runs only between two of them: a SIGTERM 18 s into the start was obeyed 13 s
later, longer than an orchestrator's usual grace period before it kills the process.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.support.ports import free_port
from tests.support.probed_detector import probe, start_probed_detector, wait_for

# the wait's requests began within about a second of the endpoint answering (the database opened
# meanwhile): 10 s later, a request of 8 s (from 7.75 s to 15.75 s into the wait) was under way
SIGNAL_AFTER_S = 10.0


def test_a_sigterm_while_waiting_for_an_unreachable_broker_stops_the_run_at_once(
    tmp_path: Path,
) -> None:
    """``run detector`` with its broker's port closed, SIGTERM 10 s after its endpoint answers:
    it ends within 3 s (it took up to 6 s more), with status 0 and nothing said of an error."""
    dead = f"127.0.0.1:{free_port()}"
    proc, log, base = start_probed_detector(dead, "start-signal", tmp_path)
    try:
        wait_for(lambda: probe(base, "/readyz")[0] == 503, "the endpoint", proc, log)
        time.sleep(SIGNAL_AFTER_S)
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        status = proc.wait(timeout=60)
        took = time.monotonic() - signalled
    finally:
        proc.kill()
    assert status == 0, log.read_text()[-3000:]
    assert took < 3.0, f"exited {took:.1f} s after SIGTERM"
    assert "cannot reach Kafka" not in log.read_text()
