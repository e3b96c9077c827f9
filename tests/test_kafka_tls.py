"""``[kafka.client]`` against TLS listeners: SSL, SASL_SSL and mutual TLS.

Against a real broker whose listeners present a certificate of a throw-away CA for 127.0.0.1
(tests/support/tls_broker.py): replay and the workers store every document over SSL and over
SASL_SSL (PLAIN), replay and status work with a client certificate whose key is encrypted; a
certificate the client cannot trust (another CA's, one for another name), a client certificate
the broker refuses (none) and TLS to a PLAINTEXT listener end ``replay`` and ``run`` in one line
naming the TLS problem, in bounded time, and are ``status``'s note; ``sasl.password`` and
``ssl.key.password`` appear in no output.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from tests.support.cli import run_process
from tests.support.sasl_broker import USERS
from tests.support.secured_runs import (
    client_config_file,
    client_variables,
    run_settings,
    succeeded,
    write_corpus,
)
from tests.support.tls_broker import CLIENT_KEY_PASSWORD, TlsKafka

PASSWORD = USERS["alice"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsKafka]:
    """A broker of this module's own with its TLS listeners, stopped at teardown."""
    kafka = TlsKafka(tmp_path_factory.mktemp("tls-kafka"), port=0)
    kafka.up()
    try:
        yield kafka
    finally:
        kafka.down()


def _settings(bootstrap: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    """:func:`run_settings` of this module's runs."""
    return run_settings(bootstrap, tmp_path, "tls", **extra)


def _config_file(tmp_path: Path, **properties: str | Path) -> dict[str, str]:
    """``properties`` (as for :func:`client_variables`) in a TOML file's ``[kafka.client]``, as
    SPARSEWATCH_CONFIG."""
    named = {name.replace("_", "."): str(value) for name, value in properties.items()}
    return client_config_file(tmp_path, named)


def _stored_documents(settings: dict[str, str]) -> int:
    """The documents the workers stored in the run's database."""
    with Store.open(load_config(env=settings).resolved_database_url) as store:
        return sum(stream["documents"] for stream in store.status()["streams"])


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_replay_and_the_workers_store_every_document_over_tls(
    broker: TlsKafka, tmp_path: Path, protocol: str
) -> None:
    """Every client (replay, the topic administration, the workers' consumers and producers,
    the writer process's producer, status) verifies the broker's certificate with the CA of
    ``ssl.ca.location``; SASL_SSL with the password in a variable, the rest in the file, as
    README's Confluent Cloud example."""
    secured = {"security_protocol": protocol, "ssl_ca_location": broker.pki.ca}
    if protocol == "SSL":
        client = client_variables(**secured)
    else:
        login = {"sasl_mechanisms": "PLAIN", "sasl_username": "alice"}
        client = {
            **_config_file(tmp_path, **secured, **login),
            **client_variables(sasl_password=PASSWORD),
        }
    settings = _settings(broker.bootstrap(protocol), tmp_path, **client)
    replay = run_process("replay", str(write_corpus(tmp_path, 120)), timeout=120, **settings)
    assert "produced 120" in succeeded(replay)
    run = run_process("run", "all", "--until-idle", "6", timeout=300, **settings)
    succeeded(run)
    status = run_process("status", "--format", "json", timeout=60, **settings)
    assert json.loads(succeeded(status))["kafka"] == "ok"
    assert _stored_documents(settings) == 120
    for proc in (replay, run, status):
        assert PASSWORD not in proc.stdout + proc.stderr


def test_mutual_tls_with_an_encrypted_client_key(broker: TlsKafka, tmp_path: Path) -> None:
    """The listener requiring a client certificate takes the one of ``ssl.certificate.location``
    (its key encrypted: ``ssl.key.password``, from a variable); a wrong key password is refused
    at load in one line; the password appears in no output."""
    pki = broker.pki
    paths = {
        "security_protocol": "SSL",
        "ssl_ca_location": pki.ca,
        "ssl_certificate_location": pki.client,
        "ssl_key_location": pki.client_key,
    }
    settings = _settings(
        broker.bootstrap("MTLS"),
        tmp_path,
        **_config_file(tmp_path, **paths),
        **client_variables(ssl_key_password=CLIENT_KEY_PASSWORD),
    )
    replay = run_process("replay", str(write_corpus(tmp_path, 30)), timeout=120, **settings)
    assert "produced 30" in succeeded(replay)
    succeeded(run_process("db", "upgrade", timeout=60, **settings))
    status = run_process("status", "--format", "json", timeout=60, **settings)
    shown = json.loads(succeeded(status))
    assert shown["kafka"] == "ok"
    docs = settings["SPARSEWATCH_KAFKA_TOPIC_PREFIX"] + ".docs"
    assert sum(row["end_offset"] for row in shown["offsets"] if row["topic"] == docs) == 30
    wrong = "wrong-keypw-0c4d"
    refused = run_process(
        "status", timeout=60, **{**settings, **client_variables(ssl_key_password=wrong)}
    )  # fmt: skip
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-3000:]
    assert "ssl.key.location" in lines[0]
    for proc in (replay, status, refused):
        output = proc.stdout + proc.stderr
        assert CLIENT_KEY_PASSWORD not in output and wrong not in output


# scenario -> (listener, the client's properties, what the one line must say); the CA files and
# the plaintext address are filled in by _failing
_FAILURES = {
    "untrusted-ca": (
        "SSL",
        {"ssl_ca_location": "other_ca"},
        "certificate verify failed: the broker's certificate could not be verified: check that "
        "it is signed by a CA of ssl.ca.location",
    ),
    "another-name": (
        "WRONGNAME",
        {"ssl_ca_location": "ca"},
        "certificate verify failed: the broker's certificate could not be verified: check that "
        "it is signed by a CA of ssl.ca.location (or of the system's store when that is unset), "
        "valid now, and issued for 127.0.0.1",
    ),
    "no-client-certificate": (
        "MTLS",
        {"ssl_ca_location": "ca"},
        "alert bad certificate: SSL alert number 42: the broker refused the client certificate, "
        "or its absence (ssl.certificate.location, ssl.key.location)",
    ),
    "plaintext-listener": (
        "PLAINTEXT",
        {"ssl_ca_location": "ca"},
        "SSL handshake failed: Disconnected: SSL connection closed by peer: connecting to a "
        "PLAINTEXT broker listener?",
    ),
}


def _failing(broker: TlsKafka, tmp_path: Path, scenario: str) -> tuple[dict[str, str], str]:
    """The settings of ``scenario`` (:data:`_FAILURES`) and what its one line must say."""
    listener, properties, says = _FAILURES[scenario]
    bootstrap = broker.status().bootstrap if listener == "PLAINTEXT" else broker.bootstrap(listener)
    files = {name: getattr(broker.pki, value) for name, value in properties.items()}
    client = client_variables(security_protocol="SSL", **files)
    return _settings(bootstrap, tmp_path, **client), says


@pytest.mark.parametrize(
    ("scenario", "args"),
    [
        *[(scenario, ("replay", "{corpus}", "--connect-timeout", "5")) for scenario in _FAILURES],
        ("another-name", ("run", "detector", "--until-idle", "5")),
    ],
    ids=[*(f"replay-{scenario}" for scenario in _FAILURES), "run-another-name"],
)
def test_a_tls_failure_is_one_line_naming_it_in_bounded_time(
    broker: TlsKafka, tmp_path: Path, scenario: str, args: tuple[str, ...]
) -> None:
    """librdkafka reported a certificate for another name as one of an untrusted CA ("verify
    that ssl.ca.location is correctly configured"), and a client certificate the broker refused
    or TLS to a PLAINTEXT listener as a transport failure, which the commands reported as
    "Broker transport failure" alone."""
    settings, says = _failing(broker, tmp_path, scenario)
    argv = [a.format(corpus=write_corpus(tmp_path, 10)) for a in args]
    started = time.monotonic()
    proc = run_process(*argv, timeout=120, **settings)
    assert time.monotonic() - started < 60
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    bootstrap = settings["SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS"]
    assert lines[0].startswith(f"error: cannot reach Kafka at {bootstrap}: ssl://{bootstrap}/")
    assert says in lines[0]


@pytest.mark.parametrize("scenario", list(_FAILURES))
def test_status_with_a_tls_failure_says_why_in_its_note(
    broker: TlsKafka, tmp_path: Path, scenario: str
) -> None:
    """status shows the database's side and a note when Kafka does not answer, as for a broker
    down: the note names the TLS failure."""
    settings, says = _failing(broker, tmp_path, scenario)
    succeeded(run_process("db", "upgrade", timeout=60, **settings))
    started = time.monotonic()
    proc = run_process("status", "--format", "json", "--kafka-timeout", "5", timeout=60, **settings)
    assert time.monotonic() - started < 30
    assert says in json.loads(succeeded(proc))["kafka"]


def test_the_other_name_is_reached_without_endpoint_identification(
    broker: TlsKafka, tmp_path: Path
) -> None:
    """What refused the WRONGNAME listener is the check of the name alone: with
    ``ssl.endpoint.identification.algorithm = none`` the same CA's certificate is accepted."""
    settings, _ = _failing(broker, tmp_path, "another-name")
    settings |= client_variables(ssl_endpoint_identification_algorithm="none")
    replay = run_process("replay", str(write_corpus(tmp_path, 10)), timeout=120, **settings)
    assert "produced 10" in succeeded(replay)
