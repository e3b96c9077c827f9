"""The replay tool, the ingest bridge and the configuration: values that used to pass
the checks and then fail deep inside a library (a native abort, a ctypes overflow, a producer
refusal that stopped the ingest bridge at every restart)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from sparsewatch.consumers.field_mapping import FieldMapping, to_document
from sparsewatch.consumers.ingest import run_ingest
from sparsewatch.consumers.messages import RecordError, encode
from sparsewatch.consumers.retry import StopFlag

from sparsewatch.config import load_config
from sparsewatch.errors import SparsewatchError
from tests.support.cli import clean_environ
from tests.support.ingest_kafka import create, make_route

MAX_MESSAGE_BYTES = 1_000_000  # librdkafka's default message.max.bytes, as the producers use it


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparsewatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_environ(**env),
    )


# -- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "option"),
    [
        # ctypes refused the count in the BLAS call ("ArgumentError: ... int too long to convert")
        ("SPARSEWATCH_BLAS_THREADS", "99999999999999999999999", "'blas_threads'"),
        # MB * 2**20 overflowed ("OverflowError: cannot convert float infinity to integer")
        ("SPARSEWATCH_HEAP_FREE_LIMIT_MB", "1e308", "'heap_free_limit_mb'"),
        ("SPARSEWATCH_HEAP_FREE_LIMIT_MB", "-1e308", "'heap_free_limit_mb'"),
    ],
)
def test_values_a_worker_cannot_use_are_refused_when_loaded(
    variable: str, value: str, option: str
) -> None:
    with pytest.raises(SparsewatchError, match=option) as caught:
        load_config(env={variable: value})
    assert variable in str(caught.value)


def test_usable_extremes_still_load() -> None:
    config = load_config(
        env={"SPARSEWATCH_BLAS_THREADS": "2147483647", "SPARSEWATCH_HEAP_FREE_LIMIT_MB": "-1"}
    )
    assert config.blas_threads == 2147483647 and config.heap_free_limit_mb == -1.0


def test_a_nul_character_in_a_toml_string_is_refused_naming_the_option(tmp_path: Path) -> None:
    path = tmp_path / "sw.toml"
    path.write_text('data_dir = "data\\u0000x"\n[kafka]\ngroup_id = "g\\u0000"\n')
    with pytest.raises(SparsewatchError, match=r"'data_dir' .*NUL"):
        load_config(path, env={})
    path.write_text('[kafka]\ngroup_id = "g\\u0000"\n')  # the Kafka client cut it at the NUL
    with pytest.raises(SparsewatchError, match=r"'kafka\.group_id' .*NUL"):
        load_config(path, env={})


def test_the_cli_reports_a_nul_in_data_dir_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "sw.toml"
    path.write_text('data_dir = "data\\u0000x"\n')
    corpus = tmp_path / "a.jsonl"
    corpus.write_text('{"id": "1", "text": "a", "timestamp": 1}\n')
    proc = _cli("--config", str(path), "replay", str(corpus))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr  # was "ValueError: embedded null"
    assert "'data_dir'" in lines[0] and "NUL" in lines[0]


# -- documents over the producer's message limit ------------------------------------------------


def _record(text_bytes: int) -> dict[str, object]:
    return {"id": "big", "text": "x" * text_bytes, "timestamp": 1}


def _largest_accepted_text() -> int:
    """The longest text (bytes) whose document message the producer's limit allows."""
    envelope = len(encode(to_document(_record(0), max_text_bytes=2_000_000)))
    return MAX_MESSAGE_BYTES - 36 - len(b"default") - envelope


def test_a_document_over_the_producers_message_limit_is_rejected_with_a_reason() -> None:
    fits = _largest_accepted_text()
    document = to_document(_record(fits), max_text_bytes=2_000_000)
    with pytest.raises(RecordError, match="exceeds the Kafka producer's limit"):
        to_document(_record(fits + 1), max_text_bytes=2_000_000)
    # the boundary is the producer's own: the largest accepted message is handed over, one byte
    # more is refused (no broker is needed for that check)
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    try:
        producer.produce("t", key=b"default", value=encode(document))
        with pytest.raises(KafkaException, match="MSG_SIZE_TOO_LARGE"):
            producer.produce("t", key=b"default", value=encode(document) + b" ")
    finally:
        producer.purge()
        producer.flush(0)


def test_ingest_dead_letters_a_record_too_large_to_forward_and_forwards_the_rest(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """With a max_text_bytes above ~150 kB a mapped document could exceed the producer's limit:
    the bridge raised KafkaException(MSG_SIZE_TOO_LARGE) and stopped, the same batch stopping it
    again at every restart, so the records behind it were never forwarded."""
    route = make_route(kafka_bootstrap, topic_name)
    for name in (route.source_topics[0], route.docs_topic, route.dlq_topic):
        create(kafka_bootstrap, name, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 2_000_000})
    for record in (
        {"id": "good1", "text": "hello", "timestamp": 1},
        _record(_largest_accepted_text() + 1),
        {"id": "good2", "text": "world", "timestamp": 2},
    ):
        producer.produce(route.source_topics[0], value=json.dumps(record).encode())
    assert producer.flush(30) == 0
    stats = run_ingest(route, FieldMapping(), StopFlag(), max_text_bytes=2_000_000, until_idle_s=2)
    assert (stats.read, stats.forwarded, stats.dead_lettered) == (3, 2, 1)
    assert "exceeds the Kafka producer's limit" in next(iter(stats.per_reason))


# -- ingest arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # a blank group id: confluent-kafka's Consumer aborted the process (status 134)
        (["--group", " "], "a consumer group id cannot be blank"),
        (["--group", ""], "a consumer group id cannot be blank"),
        # consume() refuses more than a million ("ValueError: num_messages must be between ...")
        (["--batch-size", "1000001"], "--batch-size"),
    ],
)
def test_ingest_arguments_the_kafka_client_refuses_are_usage_errors(
    args: list[str], message: str
) -> None:
    proc = _cli("ingest", "--from-topic", "src", "--bootstrap-servers", "127.0.0.1:1", *args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


# -- dead-letters filters -----------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--reason", "--topic"])
def test_dead_letters_filters_that_are_not_utf8_are_usage_errors(
    tmp_path: Path, option: str
) -> None:
    """Bytes that are not UTF-8 (a Latin-1 terminal's) reached the database driver as surrogate
    escapes: 'error: UnicodeEncodeError: ...', status 1."""
    env = {"SPARSEWATCH_DATA_DIR": str(tmp_path)}
    assert _cli("db", "upgrade", **env).returncode == 0
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPARSEWATCH_")}
    proc = subprocess.run(
        [sys.executable, "-m", "sparsewatch", "dead-letters", option, b"caf\xe9"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, **env},
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"Invalid value for '{option}'" in lines[0] and "not UTF-8" in lines[0]
    proc = _cli("dead-letters", option, "café", **env)  # UTF-8 text is a filter as before
    assert proc.returncode == 0, proc.stderr


# -- kafka status / down ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["status", "down"])
def test_a_run_folder_under_a_file_is_a_one_line_error(tmp_path: Path, command: str) -> None:
    """'error: NotADirectoryError: [Errno 20] Not a directory: .../kafka.pid', status 1."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    proc = _cli("kafka", command, "--run-dir", str(a_file / "run"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"{a_file} is not a folder" in lines[0]
    proc = _cli("kafka", command, SPARSEWATCH_DATA_DIR=str(a_file))  # the default, in data_dir
    assert proc.returncode == 2 and "(data_dir)" in proc.stderr, proc.stderr
