"""A client the broker refuses stops the commands at once; one it merely waits for does not.

Against a real broker with SASL and TLS listeners (tests/support/tls_broker.py): a wrong
password or a broker certificate of an untrusted CA ends ``replay`` and ``run`` in one line
within seconds (they waited for their whole timeout, 15 s and 30 s, as librdkafka reports the
refusal only to the error callback); a broker that does not answer is still waited for, and one
that answers slowly still read; a set of properties librdkafka refuses is said so in one natural
line; an AdminClient waiting for a broker that refuses connections backs off as the consumers
and producers do.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from sparsewatch.consumers.kafka_client import KafkaConnection, admin_config

from sparsewatch.config import load_config
from sparsewatch.errors import SparsewatchError
from sparsewatch.kafka_options import broker_topics
from tests.support.cli import run_process
from tests.support.ports import free_port
from tests.support.secured_runs import client_variables, write_corpus
from tests.support.tls_broker import TlsKafka

WRONG = "not-the-password-4e0b"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafka]:
    """A broker of this module's own with its SASL and TLS listeners, stopped at teardown."""
    kafka = TlsKafka(tmp_path_factory.mktemp("fast-failures-kafka"), port=0)
    kafka.up()
    try:
        yield kafka
    finally:
        kafka.down()


# scenario -> (listener, the client's properties, what the one line must say); the CA file is
# filled in by _refused
_REFUSALS = {
    "wrong-password": (
        "SASL",
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanisms": "PLAIN",
            "sasl_username": "alice",
            "sasl_password": WRONG,
        },
        "SASL authentication error: Authentication failed",
    ),
    "untrusted-ca": (
        "SSL",
        {"security_protocol": "SSL", "ssl_ca_location": "other_ca"},
        "certificate verify failed: the broker's certificate could not be verified",
    ),
}


def _refused(broker: TlsKafka, tmp_path: Path, scenario: str) -> tuple[dict[str, str], str]:
    """The settings of a run of its own in ``scenario`` (:data:`_REFUSALS`), and what its one
    line must say."""
    listener, properties, says = _REFUSALS[scenario]
    bootstrap = broker.sasl_bootstrap if listener == "SASL" else broker.bootstrap(listener)
    if "ssl_ca_location" in properties:
        properties = {**properties, "ssl_ca_location": str(broker.pki.other_ca)}
    settings = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": f"fast-{uuid.uuid4().hex[:8]}",
        "SPARSEWATCH_DATA_DIR": str(tmp_path / "data"),
        "SPARSEWATCH_DATABASE_URL": "",
        **client_variables(**properties),
    }
    return settings, says


@pytest.mark.parametrize("scenario", list(_REFUSALS))
@pytest.mark.parametrize(
    "args",
    [("replay", "{corpus}"), ("run", "detector", "--until-idle", "5")],
    ids=["replay", "run"],
)
def test_a_refused_client_stops_the_command_at_once(
    broker: TlsKafka, tmp_path: Path, scenario: str, args: tuple[str, ...]
) -> None:
    """With their default timeouts (replay 15 s, run 30 s), the one line of a refusal comes
    within seconds: the commands waited for their whole timeout first."""
    settings, says = _refused(broker, tmp_path, scenario)
    argv = [a.format(corpus=write_corpus(tmp_path, 10)) for a in args]
    started = time.monotonic()
    proc = run_process(*argv, timeout=120, **settings)
    elapsed = time.monotonic() - started
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    bootstrap = settings["SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS"]
    assert lines[0].startswith(f"error: cannot reach Kafka at {bootstrap}: ")
    assert says in lines[0]
    assert WRONG not in proc.stderr + proc.stdout
    assert elapsed < 10, f"{elapsed:.1f} s"


def test_a_broker_that_does_not_answer_is_waited_for_its_whole_timeout(tmp_path: Path) -> None:
    """Nothing listens: replay says so in one line once its --connect-timeout has passed, not
    before (only a refusal stops the wait early)."""
    bootstrap = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    proc = run_process(
        "replay", str(write_corpus(tmp_path, 10)), "--connect-timeout", "4",
        timeout=60, SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        SPARSEWATCH_DATA_DIR=str(tmp_path / "data"),
    )  # fmt: skip
    elapsed = time.monotonic() - started
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"error: cannot reach Kafka at {bootstrap}: ")
    assert "Broker transport failure" in lines[0]
    assert 4 <= elapsed < 14, f"{elapsed:.1f} s"
    started = time.monotonic()
    with pytest.raises(SparsewatchError, match="Broker transport failure"):
        broker_topics(bootstrap, 2.0)
    assert 2.0 <= time.monotonic() - started < 3.0


class _SlowProxy:
    """A TCP proxy to ``upstream`` that holds each chunk of the broker's answers ``delay_s``
    before passing it on: a broker slow to answer (a large or distant cluster)."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._delay_s = delay_s
        self._server = socket.create_server(("127.0.0.1", 0))
        self.bootstrap = f"127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            broker = socket.create_connection(self._upstream)
            threading.Thread(target=self._pipe, args=(client, broker, 0.0), daemon=True).start()
            threading.Thread(
                target=self._pipe, args=(broker, client, self._delay_s), daemon=True
            ).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket, delay_s: float) -> None:
        try:
            while chunk := source.recv(65536):
                time.sleep(delay_s)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            source.close()
            sink.close()

    def close(self) -> None:
        self._server.close()


def test_a_broker_slow_to_answer_is_still_read(broker: TlsKafka) -> None:
    """Each answer 0.7 s late, longer than the first slices of the wait: the topics are still
    listed, well within the timeout."""
    proxy = _SlowProxy(broker.status().bootstrap, delay_s=0.7)
    try:
        started = time.monotonic()
        assert isinstance(broker_topics(proxy.bootstrap, 15.0), set)
        assert time.monotonic() - started < 10
    finally:
        proxy.close()


def test_a_set_librdkafka_refuses_is_said_in_a_natural_line(broker: TlsKafka) -> None:
    """A wrong ``ssl.key.password``: the line read "...: client librdkafka refused them: ..."."""
    pki = broker.pki
    env = client_variables(
        security_protocol="SSL",
        ssl_ca_location=pki.ca,
        ssl_certificate_location=pki.client,
        ssl_key_location=pki.client_key,
        ssl_key_password="wrong-keypw-77a1",
    )
    with pytest.raises(SparsewatchError) as exc:
        load_config(env=env)
    message = str(exc.value)
    assert message.startswith(
        "kafka.client (file and SPARSEWATCH_KAFKA_CLIENT_* variables): librdkafka refused them: "
    ), message
    assert "ssl.key.location failed" in message
    assert "wrong-keypw-77a1" not in message


def _connection_failures(bootstrap: str, seconds: float) -> int:
    """How many times an AdminClient made with :func:`admin_config` failed to connect to
    ``bootstrap`` (nothing listening) while it waited ``seconds`` for the cluster's topics."""
    failures: list[KafkaError] = []
    admin = AdminClient({**admin_config(bootstrap), "error_cb": failures.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=seconds)
    admin.poll(0)  # serves the error callback
    return sum(err.code() == KafkaError._TRANSPORT for err in failures)


def test_an_admin_client_backs_off_between_connection_attempts() -> None:
    """librdkafka's default backoff (100 ms) made an AdminClient try 20 times a second (about 40
    failures in 2 s); with the consumers' and producers' backoff, a few. A backoff set in
    [kafka.client] still wins."""
    bootstrap = f"127.0.0.1:{free_port()}"
    assert _connection_failures(bootstrap, 2.0) <= 8
    eager = KafkaConnection.of(bootstrap, {"reconnect.backoff.ms": "100"})
    assert admin_config(eager)["reconnect.backoff.ms"] == "100"
    assert _connection_failures(eager, 2.0) >= 15
