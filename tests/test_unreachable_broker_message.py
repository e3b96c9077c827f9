"""``sparsewatch run`` against a broker it cannot reach names the cause in its one error line: a
bootstrap host that does not resolve, a refused connection. It said only
``cannot reach Kafka at HOST: KafkaError{code=_TRANSPORT,...,str="Failed to get metadata: Local:
Broker transport failure"}``, as its start-up probe runs with librdkafka's own logging off. The
wait is still the whole timeout, unresolvable host or not (a broker's name may resolve only once
it is up). No broker needed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.support.cli import clean_environ

# ``sparsewatch ARGS`` with the start-up probe's timeout (30 s) set by the first argument
_MAIN = (
    "import sys; import sparsewatch.runner as runner; "
    "runner._CONNECT_TIMEOUT_S = float(sys.argv.pop(1)); "
    "from sparsewatch.cli import main; main()"
)
_TIMEOUT_S = 3.0


def test_the_error_line_names_why_no_broker_answered(tmp_path: Path) -> None:
    cases = {
        "nosuchhost.invalid:9092": (
            "nosuchhost.invalid:9092/bootstrap: Failed to resolve 'nosuchhost.invalid:9092'"
        ),
        "127.0.0.1:1": "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection "
        "refused",
    }
    started = time.monotonic()
    procs = {
        bootstrap: subprocess.Popen(
            [sys.executable, "-c", _MAIN, str(_TIMEOUT_S), "run", "detector"],
            env=clean_environ(
                SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=bootstrap,
                SPARSEWATCH_DATA_DIR=str(tmp_path / str(n)),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, bootstrap in enumerate(cases)
    }
    for bootstrap, proc in procs.items():
        _, err = proc.communicate(timeout=60)
        lines = err.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, err[-3000:]
        assert lines[0].startswith(f"error: cannot reach Kafka at {bootstrap}: {cases[bootstrap]}")
        assert lines[0].endswith("(Failed to get metadata: Local: Broker transport failure)")
    assert time.monotonic() - started >= _TIMEOUT_S  # not given up early
