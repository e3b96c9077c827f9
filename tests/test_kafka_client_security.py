"""``[kafka.client]``: the librdkafka properties of every Kafka client, for secured clusters.

Against a real broker with a SASL_PLAINTEXT listener (PLAIN users, tests/support/sasl_broker.py):
the whole path (topic creation, replay, the workers, status, the ingest bridge) logs in with the
properties of a TOML file or of ``SPARSEWATCH_KAFKA_CLIENT_*`` variables; a wrong password ends
each command in one line, in bounded time; refused and unknown properties are refused at load in
one line naming the property and where it came from; secrets appear in no log line or message.
"""

from __future__ import annotations

import json
import pickle
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.replay.synthetic import generate_stream

from sparsewatch.config import describe, load_config
from sparsewatch.errors import SparsewatchError
from tests.support.cli import run_process
from tests.support.sasl_broker import USERS, SaslKafka, client_properties
from tests.support.secured_runs import client_config_file, run_settings, succeeded, write_corpus

PASSWORD = USERS["alice"]
WRONG = "not-the-password-91c2"
_ENV_NAMES = {
    "security.protocol": "SPARSEWATCH_KAFKA_CLIENT_SECURITY_PROTOCOL",
    "sasl.mechanisms": "SPARSEWATCH_KAFKA_CLIENT_SASL_MECHANISMS",
    "sasl.username": "SPARSEWATCH_KAFKA_CLIENT_SASL_USERNAME",
    "sasl.password": "SPARSEWATCH_KAFKA_CLIENT_SASL_PASSWORD",
}


@pytest.fixture(scope="module")
def sasl_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The SASL listener of a broker of this module's own, stopped at teardown."""
    broker = SaslKafka(tmp_path_factory.mktemp("sasl-kafka"), port=0)
    broker.up()
    try:
        yield broker.sasl_bootstrap
    finally:
        broker.down()


def _settings(bootstrap: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    """:func:`run_settings` of this module's runs."""
    return run_settings(bootstrap, tmp_path, "sec", **extra)


def _env_properties(password: str = PASSWORD) -> dict[str, str]:
    """The SASL properties as ``SPARSEWATCH_KAFKA_CLIENT_*`` variables."""
    props = client_properties(password=password)
    return {_ENV_NAMES[name]: value for name, value in props.items()}


def _config_file(tmp_path: Path, password: str = PASSWORD) -> dict[str, str]:
    """The SASL properties in a TOML file's ``[kafka.client]``, as SPARSEWATCH_CONFIG."""
    return client_config_file(tmp_path, client_properties(password=password))


def _status(settings: dict[str, str]) -> dict:
    return json.loads(succeeded(run_process("status", "--format", "json", timeout=60, **settings)))


def _log_lines(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_replay_workers_and_status_log_in_with_the_environments_properties(
    sasl_bootstrap: str, tmp_path: Path
) -> None:
    """Every client of replay, ``run all`` (consumers, the writer process's producer, the admin
    clients) and status gets the properties; a consumer-only and a producer-only property go
    only where they apply (librdkafka warned at every other client); the password is in no line
    of the JSON log. Needs consumers/kafka_admin.py to build its AdminClients with
    ``admin_config``."""
    settings = _settings(
        sasl_bootstrap,
        tmp_path,
        **_env_properties(),
        SPARSEWATCH_KAFKA_CLIENT_SESSION_TIMEOUT_MS="20000",  # consumer only
        SPARSEWATCH_KAFKA_CLIENT_LINGER_MS="10",  # producer only
    )
    corpus = write_corpus(tmp_path, 240)
    replay = run_process("replay", str(corpus), timeout=120, **settings)
    assert "produced 240" in succeeded(replay)
    run = run_process("run", "all", "--until-idle", "8", timeout=300, **settings)
    succeeded(run)
    output = run.stdout + run.stderr + replay.stdout + replay.stderr
    assert PASSWORD not in output
    assert "property and will be ignored" not in output
    messages = [line["message"] for line in _log_lines(run.stderr)]
    assert any("detector assigned" in m for m in messages), run.stderr[-3000:]
    status = _status(settings)
    assert status["kafka"] == "ok"
    ends: dict[tuple[str, str], int] = {}
    for row in status["offsets"]:
        ends.setdefault((row["group_id"], row["topic"]), 0)
        ends[(row["group_id"], row["topic"])] += row["end_offset"] or 0
    prefix = settings["SPARSEWATCH_KAFKA_TOPIC_PREFIX"]
    assert ends[("sparsewatch.detector", f"{prefix}.docs")] == 240
    assert ends[("sparsewatch.anomaly", f"{prefix}.scores")] > 0  # the writer process produced
    assert all(row["not_stored"] == 0 for row in status["offsets"]), status["offsets"]


def test_the_ingest_bridge_and_topic_creation_log_in_with_the_files_properties(
    sasl_bootstrap: str, tmp_path: Path
) -> None:
    """``ingest`` creates its topics, reads a source topic and forwards it in transactions over
    SASL; status then reads the bridge's committed offsets. Needs consumers/kafka_admin.py to
    build its AdminClients with ``admin_config``."""
    settings = _settings(sasl_bootstrap, tmp_path, **_config_file(tmp_path))
    connection = load_config(env=settings).kafka.connection()
    source = f"src-{uuid.uuid4().hex[:8]}"
    producer = make_producer(connection)
    docs = generate_stream(30, kind="tweet", stream="alpha", seed=6)
    for doc in docs:
        producer.produce(source, json.dumps(doc).encode())
    assert producer.flush(30) == 0
    ingest = run_process(
        "ingest", "--from-topic", source, "--until-idle", "3", timeout=120, **settings
    )  # fmt: skip
    succeeded(ingest)
    assert PASSWORD not in ingest.stdout + ingest.stderr
    status = _status(settings)
    assert status["kafka"] == "ok"
    assert sum(row["committed_offset"] for row in status["ingest"]) == 30, status["ingest"]
    assert all(row["not_forwarded"] == 0 for row in status["ingest"]), status["ingest"]
    docs = settings["SPARSEWATCH_KAFKA_TOPIC_PREFIX"] + ".docs"
    waiting = [row["not_stored"] for row in status["offsets"] if row["topic"] == docs]
    assert sum(waiting) == 30, status["offsets"]  # forwarded, committed, read over SASL


@pytest.mark.parametrize(
    "args",
    [
        ("replay", "{corpus}", "--connect-timeout", "5"),
        ("run", "detector", "--until-idle", "5"),
        ("ingest", "--from-topic", "anything", "--connect-timeout", "5", "--no-database"),
    ],
    ids=["replay", "run", "ingest"],
)
@pytest.mark.parametrize("source", ["env", "file"])
def test_a_wrong_password_is_one_line_in_bounded_time(
    sasl_bootstrap: str, tmp_path: Path, args: tuple[str, ...], source: str
) -> None:
    """librdkafka reports a failed login only to its error callback: the commands waited for
    their timeout and said "Broker transport failure", or (without the properties) nothing
    useful at all."""
    secrets = _env_properties(WRONG) if source == "env" else _config_file(tmp_path, WRONG)
    settings = _settings(sasl_bootstrap, tmp_path, **secrets)
    argv = [a.format(corpus=write_corpus(tmp_path, 10)) for a in args]
    started = time.monotonic()
    proc = run_process(*argv, timeout=120, **settings)
    assert time.monotonic() - started < 60
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"error: cannot reach Kafka at {sasl_bootstrap}: ")
    assert "SASL authentication error" in lines[0]
    assert WRONG not in proc.stderr + proc.stdout


def test_status_with_a_wrong_password_says_why_in_its_note(
    sasl_bootstrap: str, tmp_path: Path
) -> None:
    """status shows the database's side and a note when Kafka does not answer, as for a broker
    down: the note names the failed login, said at once (status waited its whole
    --kafka-timeout)."""
    settings = _settings(sasl_bootstrap, tmp_path, **_env_properties(WRONG))
    succeeded(run_process("db", "upgrade", timeout=60, **settings))
    started = time.monotonic()
    proc = run_process(
        "status", "--format", "json", "--kafka-timeout", "40", timeout=90, **settings
    )
    assert time.monotonic() - started < 25
    assert "SASL authentication error" in json.loads(succeeded(proc))["kafka"]
    assert WRONG not in proc.stderr + proc.stdout


def _refusal(tmp_path: Path, table: str = "", **env: str) -> str:
    """The one-line refusal of loading a file with ``[kafka.client]`` ``table`` and ``env``."""
    path = tmp_path / "c.toml"
    path.write_text(f"[kafka.client]\n{table}\n", encoding="utf-8")
    with pytest.raises(SparsewatchError) as exc:
        load_config(path, env=env)
    message = str(exc.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "name",
    [
        "bootstrap.servers",
        "group.id",
        "group.instance.id",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "isolation.level",
        "transactional.id",
        "enable.idempotence",
        "auto.offset.reset",
        "enable.partition.eof",
        "partition.assignment.strategy",
        "statistics.interval.ms",
        "acks",
        "request.required.acks",
        "logger",
        "log_level",
        "error_cb",
        "on_delivery",
    ],
)
def test_the_properties_sparsewatch_sets_are_refused(tmp_path: Path, name: str) -> None:
    message = _refusal(tmp_path, f'"{name}" = "x"')
    assert message.startswith(f"configuration file {tmp_path / 'c.toml'}: [kafka.client]: ")
    assert f"property {name!r} is set by sparsewatch" in message


def test_a_variable_names_its_property_with_the_confluent_convention(tmp_path: Path) -> None:
    """``_`` is a period, ``__`` an underscore: LOG__LEVEL is log_level (refused), and the
    refusal names the variable."""
    message = _refusal(tmp_path, SPARSEWATCH_KAFKA_CLIENT_LOG__LEVEL="7")
    assert message.startswith("environment variable SPARSEWATCH_KAFKA_CLIENT_LOG__LEVEL: ")
    assert "property 'log_level' is set by sparsewatch" in message
    env = {"SPARSEWATCH_KAFKA_CLIENT_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM": "none"}
    client = load_config(env=env).kafka.client
    assert client == {"ssl.endpoint.identification.algorithm": "none"}


def test_an_unknown_property_or_value_is_refused_where_it_was_set(tmp_path: Path) -> None:
    message = _refusal(tmp_path, '"sasl.mechanism.typo" = "PLAIN"')
    assert message.startswith(f"configuration file {tmp_path / 'c.toml'}: [kafka.client]: ")
    assert "'sasl.mechanism.typo'" in message and "No such configuration property" in message
    message = _refusal(tmp_path, SPARSEWATCH_KAFKA_CLIENT_SECURITY_PROTOCOL="SASL_TLS")
    assert message.startswith("environment variable SPARSEWATCH_KAFKA_CLIENT_SECURITY_PROTOCOL")
    assert "Invalid value" in message
    message = _refusal(tmp_path, SPARSEWATCH_KAFKA_CLIENT="x")
    assert message.startswith("unknown environment variable SPARSEWATCH_KAFKA_CLIENT")
    # a set librdkafka cannot make a client with (SASL without a username and password)
    message = _refusal(
        tmp_path, '"security.protocol" = "SASL_PLAINTEXT"\n"sasl.mechanisms" = "PLAIN"'
    )
    assert "sasl.username and sasl.password must be set" in message


def test_values_are_strings_or_the_text_of_an_integer_or_boolean(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[kafka.client]\n"linger.ms" = 20\n"socket.keepalive.enable" = true\n"client.id" = "sw"\n'
    )
    client = load_config(path, env={}).kafka.client
    assert client == {"linger.ms": "20", "socket.keepalive.enable": "true", "client.id": "sw"}
    message = _refusal(tmp_path, '"linger.ms" = 2.5')
    assert "'linger.ms' must be a string, an integer or a boolean, got float" in message
    # a name left unquoted is TOML tables: the message names the property and the quoting (it
    # said "property 'sasl' must be a string, an integer or a boolean, got dict")
    message = _refusal(tmp_path, 'sasl.username = "x"')
    assert message.endswith(
        "'kafka.client' property 'sasl.username' is written as TOML tables: quote the "
        'property\'s name, "sasl.username" = ...'
    )


def test_the_environment_wins_over_the_file_property_by_property(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[kafka.client]\n"client.id" = "file"\n"linger.ms" = "7"\n')
    env = {"SPARSEWATCH_KAFKA_CLIENT_CLIENT_ID": "env"}
    assert load_config(path, env=env).kafka.client == {"client.id": "env", "linger.ms": "7"}


def test_secrets_are_in_no_message_repr_or_description(tmp_path: Path) -> None:
    from sparsewatch.consumers.kafka_client import KafkaConnection

    secrets = {"ssl.key.password": "keypw-5d1e", "sasl.oauthbearer.client.secret": "oauth-9a7c"}
    properties = {**client_properties(), **secrets}
    env = {
        "SPARSEWATCH_KAFKA_CLIENT_" + k.upper().replace(".", "_"): v for k, v in properties.items()
    }
    config = load_config(env=env)
    connection = config.kafka.connection()
    shown = [
        repr(config),
        str(describe(config)),
        repr(connection),
        str(connection),
        f"{connection}",
    ]
    for secret in (PASSWORD, "keypw-5d1e", "oauth-9a7c"):
        assert all(secret not in text for text in shown)
    assert str(connection) == config.kafka.bootstrap_servers
    assert "'ssl.key.location': '/etc/k.pem'" in str(
        describe(load_config(env={"SPARSEWATCH_KAFKA_CLIENT_SSL_KEY_LOCATION": "/etc/k.pem"}))
    )  # a path is shown
    # a worker's writer process gets the properties with the address
    copy = pickle.loads(pickle.dumps(connection))
    assert (copy, copy.consumer, copy.producer) == (
        connection, connection.consumer, connection.producer,
    )  # fmt: skip
    assert isinstance(copy, KafkaConnection)


@pytest.mark.timeout(180)  # (the workers waited for ever)
def test_the_demo_stays_plaintext_whatever_the_client_properties(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The demo talks plaintext to the broker it probed (or started): its workers got the SASL
    properties meant for the configured cluster and never read a message."""
    from sparsewatch.storage.store import Store

    from sparsewatch.demo import run_demo
    from tests.support.demo import demo_config

    config = demo_config(kafka_bootstrap, tmp_path, **_env_properties())
    result = run_demo(config, n_documents=300, out_dir=tmp_path / "demo")
    store = Store.open(result.database_url)
    try:
        streams = store.status()["streams"]
    finally:
        store.dispose()
    assert sum(s["documents"] for s in streams) == 300, streams
