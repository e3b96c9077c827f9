"""The liveness and readiness probes (``/healthz``, ``/readyz``: ``consumers/metrics.py``) as a
load balancer's health check sends them: not only GET. Real HTTP requests (``http.client``) to a
real endpoint; real broker, real SQLite.

Only GET was routed to the probes; every other method fell through to prometheus_client, which
answers OPTIONS with 200 and anything else with 405. HAProxy's ``option httpchk`` sends OPTIONS
unless told otherwise: a worker that could not reach its broker (``GET /readyz`` 503) looked
ready, and a check by HEAD failed on a healthy one.
"""

from __future__ import annotations

import http.client
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sparsewatch.consumers.health import Health
from sparsewatch.consumers.metrics import serve_metrics

from tests.support.ports import free_port
from tests.support.probed_detector import probe, start_probed_detector, stop, wait_for

pytestmark = [pytest.mark.kafka]

ALLOWED = "GET, HEAD, OPTIONS"


def _request(base: str, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """``method path`` to the endpoint at ``base``: status, headers, body."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def _assert_every_method_says(base: str, path: str, status: int) -> None:
    """GET and OPTIONS answer ``status`` with the probe's JSON, HEAD the same status and headers
    without a body, and another method 405 naming the methods a probe takes."""
    for method in ("GET", "OPTIONS"):
        got, headers, body = _request(base, method, path)
        assert got == status, (method, path, got, body)
        assert headers["Content-Type"] == "application/json", (method, headers)
        assert json.loads(body)["workers"], (method, body)
    got, headers, body = _request(base, "HEAD", path)
    assert (got, body) == (status, b""), ("HEAD", path, got, body)
    assert headers["Content-Type"] == "application/json", headers
    assert int(headers["Content-Length"]) > 0, headers  # (what GET's body takes)
    for method in ("POST", "DELETE"):
        got, headers, _ = _request(base, method, path)
        assert got == 405 and headers["Allow"] == ALLOWED, (method, path, got, headers)


def _wait_for_endpoint(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    wait_for(lambda: probe(base, "/healthz")[0] != 0, "the endpoint", proc, log)


def test_a_worker_that_cannot_reach_its_broker_is_not_ready_to_any_method(
    tmp_path: Path,
) -> None:
    """The reviewer's case: ``run detector`` with its broker's port closed. /readyz is 503 to
    GET, HEAD and OPTIONS alike (OPTIONS said 200, HEAD 405); /healthz 200 (a start is not
    judged) to each of them too."""
    dead = f"127.0.0.1:{free_port()}"
    proc, log, base = start_probed_detector(dead, "probe-methods", tmp_path)
    try:
        _wait_for_endpoint(base, proc, log)
        _assert_every_method_says(base, "/readyz", 503)
        _assert_every_method_says(base, "/healthz", 200)
        stop(proc, log)
    finally:
        proc.kill()


def test_a_ready_worker_is_ready_to_get_head_and_options(
    kafka_bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    """Once the worker consumes, every method a check sends sees 200 on both probes (HEAD was
    405: a check by HEAD failed a healthy worker)."""
    proc, log, base = start_probed_detector(kafka_bootstrap, topic_name, tmp_path)
    try:
        wait_for(lambda: probe(base, "/readyz")[0] == 200, "/readyz 200", proc, log)
        _assert_every_method_says(base, "/readyz", 200)
        _assert_every_method_says(base, "/healthz", 200)
        stop(proc, log)
    finally:
        proc.kill()


def test_a_failed_loop_is_neither_alive_nor_ready_to_any_method() -> None:
    """A loop that ended with an error: both probes 503 to GET, HEAD and OPTIONS, naming the
    failure in the JSON of GET and OPTIONS."""
    health = Health(stall_s=600)
    beat = health.heartbeat("detector")
    beat.started()
    beat.beat()
    port = free_port()
    stop_serving = serve_metrics(port, "metrics_port", "workers", health=health)
    base = f"http://127.0.0.1:{port}"
    try:
        _assert_every_method_says(base, "/readyz", 200)
        beat.finished(RuntimeError("the database vanished"))
        for path in ("/healthz", "/readyz"):
            _assert_every_method_says(base, path, 503)
            _, _, body = _request(base, "OPTIONS", path)
            shown: dict[str, Any] = json.loads(body)["workers"]["detector"]
            assert "the database vanished" in str(shown), shown
    finally:
        stop_serving()
