"""The ingest bridge's Prometheus metrics, against a real broker (``sparsewatch ingest
--metrics-port``): records forwarded and dead-lettered count what committed transactions carried,
the source lag rises with a backlog and falls back to zero once it is forwarded, the endpoint
serves them while the bridge runs, and a port it cannot bind is a one-line error."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
import urllib.request
from pathlib import Path

from prometheus_client import REGISTRY
from sparsewatch.consumers.ingest import run_ingest
from sparsewatch.consumers.metrics import IngestMetrics
from sparsewatch.consumers.retry import StopFlag

from tests.support.ingest_kafka import (
    TWEETS,
    cli,
    make_route,
    make_tweet,
    prepare,
    produce,
    reap_bridges,  # noqa: F401 (autouse: kills what spawn started)
    spawn,
)
from tests.support.ports import free_port


def _records(n_good: int, n_bad: int) -> list[tuple[bytes | None, bytes | None]]:
    """``n_good`` tweets over two streams with ``n_bad`` records that are not JSON among them."""
    records: list[tuple[bytes | None, bytes | None]] = [
        (None, json.dumps(make_tweet(i, "en" if i % 2 else "de")).encode()) for i in range(n_good)
    ]
    for j in range(n_bad):
        records.insert((j * 37) % len(records), (None, b"{not json " + str(j).encode()))
    return records


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


class _LagLog(IngestMetrics):
    """The bridge's metrics, also remembering every lag it reported."""

    def __init__(self) -> None:
        super().__init__()
        self.lags: list[int] = []

    def set_lag(self, lag: dict[tuple[str, int], int | None]) -> None:
        super().set_lag(lag)
        self.lags.append(sum(n for n in lag.values() if n is not None))


def test_committed_records_and_the_source_lag_are_counted(
    kafka_bootstrap: str, topic_name: str
) -> None:
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    n_good, n_bad = 12_000, 300
    produce(kafka_bootstrap, route.source_topics[0], _records(n_good, n_bad))
    names = {
        "forwarded": ("sparsewatch_ingest_records_total", {"outcome": "forwarded"}),
        "dead": ("sparsewatch_ingest_records_total", {"outcome": "dead_lettered"}),
        "dlq": ("sparsewatch_dead_letters_total", {"worker": "ingest"}),
        "committed": ("sparsewatch_ingest_transactions_total", {"result": "committed"}),
        "batches": ("sparsewatch_ingest_batch_seconds_count", {}),
    }
    before = {key: _sample(*name) for key, name in names.items()}
    metrics = _LagLog()
    # Small transactions make the backlog last several lag reports (one a second).
    stats = run_ingest(route, TWEETS, StopFlag(), until_idle_s=3.0, batch_size=100, metrics=metrics)
    delta = {key: _sample(*name) - before[key] for key, name in names.items()}
    assert (stats.forwarded, stats.dead_lettered) == (n_good, n_bad)
    assert delta["forwarded"] == n_good and delta["dead"] == n_bad and delta["dlq"] == n_bad
    assert delta["committed"] == stats.transactions == delta["batches"]
    assert stats.transactions >= (n_good + n_bad) / 100
    # A backlog is reported while it lasts, never more than was written, and none once drained
    # (the bridge idled 3 s after draining: several reports came after the last record).
    assert 0 < max(metrics.lags) <= n_good + n_bad, metrics.lags
    assert metrics.lags[-1] == 0 and _sample("sparsewatch_consumer_lag", {"worker": "ingest"}) == 0


def _scrape(port: int) -> dict[str, float]:
    """The endpoint's samples, by name with labels as written (``name{label="v"}``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_]+(?:\{[^}]*\})?) (\S+)", line)
        if match:
            samples[match[1]] = float(match[2])
    return samples


def test_the_bridge_serves_its_metrics_while_it_runs(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    produce(kafka_bootstrap, route.source_topics[0], _records(500, 20))
    port = free_port()
    log = tmp_path / "ingest.log"
    proc = spawn(route, log, until_idle=None, extra=("--metrics-port", str(port)))
    forwarded = 'sparsewatch_ingest_records_total{outcome="forwarded"}'
    dead = 'sparsewatch_ingest_records_total{outcome="dead_lettered"}'
    lag = 'sparsewatch_consumer_lag{worker="ingest"}'
    samples: dict[str, float] = {}
    deadline = time.monotonic() + 120
    try:
        while not (samples.get(forwarded) == 500 and samples.get(lag) == 0):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.5)
            try:
                samples = _scrape(port)
            except OSError:  # not serving yet
                continue
        assert samples[dead] == 20
        assert samples['sparsewatch_dead_letters_total{worker="ingest"}'] == 20
        assert samples['sparsewatch_ingest_transactions_total{result="committed"}'] >= 1
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
        # the bridge's own families and the process's, none of the workers' (empty) ones
        assert "sparsewatch_window_latency" not in text and "sparsewatch_documents" not in text
        assert "process_resident_memory_bytes" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]


def test_a_port_it_cannot_bind_is_a_one_line_error(kafka_bootstrap: str, topic_name: str) -> None:
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = cli(
            "--bootstrap-servers", kafka_bootstrap,
            "--from-topic", route.source_topics[0],
            "--metrics-port", str(port),
            "--no-database",
        )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port} (--metrics-port)" in lines[0]
