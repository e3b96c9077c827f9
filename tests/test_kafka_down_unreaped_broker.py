"""``sparsewatch kafka down`` when the process that launched the broker is still running and does
not reap it (a program using :class:`LocalKafka` as a library, the test fixtures, a container
whose init reaps nothing): the stopped broker stays a zombie, which a signal still reaches, and
``down`` waited for it to go for ever. Real Maven, real JVM."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from sparsewatch.kafka_local import LocalKafka

LAUNCHER = """
import sys, time
from pathlib import Path
from sparsewatch.kafka_local import LocalKafka
print(LocalKafka(Path(sys.argv[1]), port=0).up(), flush=True)
time.sleep(300)  # alive, and never waits for its child
"""


def test_down_stops_a_broker_whose_launcher_does_not_reap_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "broker"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert launcher.stdout is not None and launcher.stdout.readline().strip()
        broker = LocalKafka(run_dir, port=0)
        assert broker.status().running
        results: list[bool] = []
        stopping = threading.Thread(target=lambda: results.append(broker.down(timeout=5)))
        stopping.daemon = True
        stopping.start()
        stopping.join(30)
        assert not stopping.is_alive(), "down() still waits for the stopped broker"
        assert results == [True]
        assert not broker.status().running
    finally:
        launcher.kill()
        launcher.wait()
        LocalKafka(run_dir, port=0).down(timeout=5)
