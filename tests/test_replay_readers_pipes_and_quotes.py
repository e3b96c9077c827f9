"""Replay readers, fourth round: a JSON-lines file read through a pipe (``cat f | sparsewatch
replay /dev/stdin``, a FIFO, ``<(zcat ...)``) read once, as a regular file is (its first mebibyte
was read to tell a JSON array from JSON lines, then the file was opened again: a pipe lost what
was read, 500 of 500 documents); gzip through a pipe whose first byte comes alone; a CSV field
over the field limit in a record with a quote that opens no quoted field (``5" tall``: every
later record was skipped, unreported); a CR-only file whose first line is longer than the part of
the file read to tell the line ending (read as one line); ``--text-field`` with a blank
alternative (``'|'``: every record was rejected)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from sparsewatch.replay import readers
from sparsewatch.replay.documents import ErrorFile, ReadStats, read_documents
from sparsewatch.replay.readers import Rejected, SourceRecord, read_csv, read_jsonl

from sparsewatch.cli import cli
from tests.support.cli import clean_environ
from tests.support.kafka_topics import consume_values

PIPE_TIMEOUT_S = 60  # the code before read a pipe again, and could wait for a writer forever

# A child process that reads the file it is given (a pipe) and prints what it read, one JSON
# line per record: kind, line, id (a SourceRecord) or reason (a Rejected).
_READ_CHILD = """
import json, sys
from pathlib import Path
from sparsewatch.replay.readers import SourceRecord, read_records
for r in read_records(Path(sys.argv[1]), sys.argv[2]):
    if isinstance(r, SourceRecord):
        print(json.dumps(["ok", r.line, r.fields.get("id")]))
    else:
        print(json.dumps(["rejected", r.line, r.reason]))
"""


def _jsonl(n: int, text_chars: int = 300) -> bytes:
    """``n`` JSON lines, each about ``text_chars`` bytes of text."""
    return b"".join(
        json.dumps({"id": f"d{i}", "text": "x" * text_chars, "timestamp": i}).encode() + b"\n"
        for i in range(n)
    )


def _read_from_stdin(data: bytes, fmt: str = "jsonl") -> list[list]:
    """What a child process reads from ``/dev/stdin``, a pipe ``data`` is written to."""
    done = subprocess.run(
        [sys.executable, "-c", _READ_CHILD, "/dev/stdin", fmt],
        input=data,
        capture_output=True,
        timeout=PIPE_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return [json.loads(line) for line in done.stdout.splitlines()]


def _read_from_fifo(tmp_path: Path, chunks: list[bytes], fmt: str = "jsonl") -> list[list]:
    """What a child process reads from a FIFO this process writes ``chunks`` to, a moment
    apart."""
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with fifo.open("wb") as fh:
                for chunk in chunks:
                    fh.write(chunk)
                    fh.flush()
                    time.sleep(0.2)
        except OSError as exc:  # the reader went away (the code before)
            failures.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    child = subprocess.Popen(
        [sys.executable, "-c", _READ_CHILD, str(fifo), fmt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = child.communicate(timeout=PIPE_TIMEOUT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
        if writer.is_alive():  # still waiting for a reader to open the FIFO? (it gets EPIPE)
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(timeout=10)
    assert child.returncode == 0, err.decode(errors="replace")
    assert not failures
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_jsonl_read_through_a_pipe_yields_every_record(compress: bool) -> None:
    """5,000 lines, 1.6 MB: the code before read 0 of them (plain), or 2 rejected records (the
    gzip's first mebibyte read to tell its kind, then the pipe read again)."""
    data = _jsonl(5000)
    records = _read_from_stdin(gzip.compress(data) if compress else data)
    assert records == [["ok", i + 1, f"d{i}"] for i in range(5000)]


def test_a_pipe_that_starts_with_a_bracket_but_is_no_json_array_is_read_line_by_line() -> None:
    """The whole pipe was read to see whether it is one JSON array; it is not, and the lines were
    read again from a pipe that had none left: every record lost, none reported."""
    data = b"[1, 2\n" + _jsonl(3000)
    records = _read_from_stdin(data)
    assert len(records) == 3001
    assert records[0][:2] == ["rejected", 1] and records[0][2].startswith("invalid JSON")
    assert records[1:] == [["ok", i + 2, f"d{i}"] for i in range(3000)]


def test_jsonl_written_in_pieces_to_a_fifo_yields_every_record(tmp_path: Path) -> None:
    """After blank lines, as a JSON array is (which a pipe still gives whole)."""
    data = b"\n\n" + _jsonl(4000) + b"\n"
    records = _read_from_fifo(tmp_path, [data[:700_000], data[700_000:]])
    assert records == [["ok", i + 3, f"d{i}"] for i in range(4000)]
    elements = ",\n".join(
        json.dumps({"id": f"a{i}", "text": "t", "timestamp": i}) for i in range(3)
    )
    array = f"\n[\n{elements}\n]\n".encode()
    assert _read_from_stdin(array) == [["ok", 3 + i, f"a{i}"] for i in range(3)]


def test_gzip_through_a_fifo_whose_first_byte_comes_alone_is_decompressed(tmp_path: Path) -> None:
    """The gzip magic number was looked for in what the first read gave: one byte, so the
    compressed bytes were read as text (and the FIFO then read again)."""
    data = gzip.compress(_jsonl(50))
    records = _read_from_fifo(tmp_path, [data[:1], data[1:]])
    assert records == [["ok", i + 1, f"d{i}"] for i in range(50)]


_AFTER = [f"{i},valid {i},2020-01-0{i}T00:00:00Z\n" for i in range(3, 8)] + [
    '8,"quoted, eight",2020-01-08T00:00:00Z\n'
]


@pytest.mark.parametrize(
    "record",
    [
        '2,he said 5" tall {long},2020-01-02T00:00:00Z\n',  # a quote inside an unquoted field
        '2,{long} 5" tall,2020-01-02T00:00:00Z\n',  # after the over-limit part
        '2, "{long},2020-01-02T00:00:00Z\n',  # after a space: no quoted field
        '2,"closed"{long}",2020-01-02T00:00:00Z\n',  # after a quoted field's closing quote
        '2,"a\n""b"" {long}"c"d,2020-01-02T00:00:00Z\n',  # quoted over two lines, then text
    ],
    ids=["in-unquoted", "after-the-limit", "after-a-space", "after-closing-quote", "two-lines"],
)
def test_an_over_limit_field_with_a_quote_that_opens_no_quoted_field_rejects_only_its_record(
    tmp_path: Path, small_field_limit: int, record: str
) -> None:
    """Counting the record's quotes took that quote for an unclosed quoted field: every record
    after it was skipped, neither read nor reported."""
    path = tmp_path / "d.csv"
    long = "x" * (2 * small_field_limit)
    head = "id,text,timestamp\n1,one,2020-01-01T00:00:00Z\n"
    path.write_text(head + record.format(long=long) + "".join(_AFTER), encoding="utf-8")
    records = list(read_csv(path))
    assert [type(r) for r in records] == [SourceRecord, Rejected] + [SourceRecord] * 6
    assert records[1].line == 3 and "field larger than field limit" in records[1].reason
    assert [r.fields["id"] for r in records[2:]] == ["3", "4", "5", "6", "7", "8"]
    assert records[-1].fields["text"] == "quoted, eight"
    first_after = 5 if "\n" in record[:-1] else 4
    assert [r.line for r in records[2:]] == list(range(first_after, first_after + 6))


def test_an_over_limit_quoted_field_over_many_lines_says_which_lines_it_skipped(
    tmp_path: Path, small_field_limit: int
) -> None:
    """The record was rejected by its first line alone: that the 11 lines after it went with it
    was said nowhere."""
    path = tmp_path / "d.csv"
    text = 'a ""quoted"" word\n' * (small_field_limit // 10)  # 100 lines, over the limit
    path.write_text(
        f'id,text,timestamp\n1,"{text}",2020-01-01T00:00:00Z\n2,after,2020-01-02T00:00:00Z\n',
        encoding="utf-8",
    )
    records = list(read_csv(path))
    assert [type(r) for r in records] == [Rejected, SourceRecord]
    assert records[0].line == 2 and records[1].line == 103 and records[1].fields["id"] == "2"
    assert "field larger than field limit" in records[0].reason
    assert records[0].reason.endswith("(the record, lines 2-102, is skipped)")


def test_a_cr_only_file_whose_first_line_is_over_the_sniffed_part_is_read_line_by_line(
    tmp_path: Path,
) -> None:
    """Its line ending was told from its first mebibyte, which held no CR: it was read as one
    line, one rejected record, its later records lost."""
    path = tmp_path / "mac.jsonl"
    first = {"id": "long", "text": "y" * (readers._SNIFF_BYTES + 5000), "timestamp": 0}
    rest = [{"id": f"d{i}", "text": "t", "timestamp": i} for i in range(1, 4)]
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\r" for r in [first, *rest]))
    records = list(read_jsonl(path))
    assert [(type(r), r.line) for r in records] == [(SourceRecord, n) for n in range(1, 5)]
    assert records[0].fields["text"] == first["text"]
    stats = ReadStats()
    with ErrorFile(tmp_path / "errors.jsonl") as errors:
        docs = list(read_documents([path], errors=errors, stats=stats))
    assert [d["id"] for d in docs] == ["d1", "d2", "d3"]  # the long text is over the limit
    assert stats.rejected == 1


@pytest.mark.parametrize("spec", ["|", " | ", "title|", "|body", "title||body", "title| |body"])
def test_a_text_field_with_a_blank_alternative_is_a_usage_error(tmp_path: Path, spec: str) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "title": "hello", "timestamp": 0}\n', encoding="utf-8")
    env = {
        "SPARSEWATCH_DATA_DIR": str(tmp_path),
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9",
    }
    args = ["replay", str(corpus), "--text-field", spec, "--connect-timeout", "1"]
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 2, result.output
    assert "--text-field" in result.output and "cannot be blank" in result.output
    assert len(result.output.strip().splitlines()[-1]) < 200 and "Traceback" not in result.output


@pytest.mark.kafka
def test_replay_of_stdin_sends_every_document(kafka_bootstrap, topic_name, tmp_path) -> None:
    """``cat f.jsonl | sparsewatch replay --input-format jsonl /dev/stdin``: produced 0 of 5000,
    exit status 0."""
    data = _jsonl(5000, text_chars=100)
    (tmp_path / "c.jsonl").write_bytes(data)
    shell = (
        f"cat {tmp_path / 'c.jsonl'} | {sys.executable} -m sparsewatch replay --input-format jsonl"
        f" /dev/stdin --topic {topic_name} --bootstrap-servers {kafka_bootstrap}"
        f" --errors {tmp_path / 'errors.jsonl'}"
    )
    env = clean_environ(SPARSEWATCH_DATA_DIR=str(tmp_path))
    done = subprocess.run(
        ["bash", "-c", shell], env=env, capture_output=True, text=True, timeout=PIPE_TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr
    assert "produced 5000, rejected 0" in done.stdout, done.stdout
    sent = {value["id"] for value in consume_values(kafka_bootstrap, topic_name)}
    assert sent == {f"d{i}" for i in range(5000)}
