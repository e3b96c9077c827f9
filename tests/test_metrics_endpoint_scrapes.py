"""The Prometheus endpoint (``consumers/metrics.py``) as a scraper and the log collector see it.

A client that reset its connection before its request was read (a port check, a scraper giving
up) made socketserver print a 15-line traceback on the worker's stderr, among its JSON log lines.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.support.ports import free_port

# Serves the workers' metrics with the workers' logging until its stdin closes.
_CHILD = """
import sys
from sparsewatch.consumers.metrics import WorkerMetrics, serve_metrics
from sparsewatch.logs import setup_logging
setup_logging("DEBUG")
WorkerMetrics("detector")
stop = serve_metrics(int(sys.argv[1]), "metrics_port", "workers")
print("serving", flush=True)
sys.stdin.read()
stop()
"""


def _reset_connection(port: int) -> None:
    """Connect, send half a request line and close with a TCP reset (SO_LINGER 0)."""
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.sendall(b"GET /metr")
    client.close()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return response.read().decode()


def test_a_reset_scrape_connection_is_one_json_log_line() -> None:
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "serving\n"
        for _ in range(3):
            _reset_connection(port)
        assert "sparsewatch_documents_total" in _scrape(port)  # (after the resets were handled)
    finally:
        _, stderr = child.communicate("", timeout=30)
    assert child.returncode == 0, stderr[-2000:]
    entries = [json.loads(line) for line in stderr.splitlines()]  # every line one JSON object
    resets = [e for e in entries if e["logger"] == "sparsewatch.consumers.metrics"]
    assert len(resets) == 3 and all(e["level"] == "DEBUG" for e in resets), resets
    assert all("Connection reset" in e["message"] for e in resets), resets


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Each series of an exposition once (a duplicate series fails), by name and labels."""
    series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in series, key
            series[key] = sample.value
    return series


def test_concurrent_scrapes_while_counting_are_valid_and_monotonic() -> None:
    """Eight scrapers at once while a thread counts windows: every exposition parses, each
    family's HELP and TYPE come once, no series twice, and no counter goes down."""
    from sparsewatch.consumers.metrics import WorkerMetrics, serve_metrics
    from sparsewatch.consumers.processor import Output

    metrics = WorkerMetrics("review39")
    port = free_port()
    stop = serve_metrics(port, "metrics_port", "workers")
    counting = threading.Event()

    def count() -> None:
        while not counting.is_set():
            metrics.observe([Output(n_documents=3, novel=1, late=1)], [0.2], 1)

    counter = threading.Thread(target=count)
    counter.start()
    scrapes: list[list[str]] = [[] for _ in range(8)]

    def scraper(out: list[str]) -> None:
        out.extend(_scrape(port) for _ in range(10))

    threads = [threading.Thread(target=scraper, args=(out,)) for out in scrapes]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        counting.set()
        counter.join()
        stop()
    documents = ("sparsewatch_documents_total", (("worker", "review39"),))
    for texts in scrapes:
        assert len(texts) == 10
        for text in texts:
            for kind in ("HELP", "TYPE"):
                names = [line.split()[2] for line in text.splitlines() if line[2:6] == kind]
                assert len(names) == len(set(names)), kind
        values = [_samples(text)[documents] for text in texts]
        assert values == sorted(values), values
