"""Replay readers, fifth round: records over the size limit, minified JSON arrays, and inputs with
nothing to replay.

A JSON line was read and parsed whole whatever its size, although nothing over 6,000,000 bytes
can become a message (six times the producer's 1,000,000, as JSON may write a byte as a six-byte
escape): about eight times its size in memory, and one line of 200 MB stopped the replay
(``MemoryError``) before the documents after it were sent. A minified JSON array (one line, what
``json.dump`` writes by default) was held whole, five times its size, and a damaged element in it
lost every element, all of them "line 1". An empty JSONL, Reuters SGML or JSON array file was
replayed as nothing without a word (an empty CSV file was rejected); a file compressed with
bzip2, xz, zstd or zip had each of its "lines" rejected as garbage ("not UTF-8").
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import json
import lzma
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from sparsewatch.replay import readers
from sparsewatch.replay.readers import Rejected, SourceRecord, read_jsonl, read_records

from tests.support.cli import run_cli
from tests.support.kafka_topics import consume_values

T0 = 1_767_225_600_000  # 2026-01-01
LIMIT = 6_000_000  # the longest line or array element read: six times the message limit
CHILD_TIMEOUT_S = 300
# How much more memory (resident set) a child may take to read a file: a little above the
# window and buffers the readers hold; the code before took several times the file's size.
READ_GROWTH_KIB = 48 * 1024


def _doc(i: int, text: str = "t") -> dict[str, Any]:
    return {"id": f"d{i}", "text": text, "timestamp": T0 + i}


def _line(i: int, text: str = "t") -> str:
    return json.dumps(_doc(i, text))


def _kinds(records: list[SourceRecord | Rejected]) -> list[tuple[str, int, str]]:
    """(kind, line, id or reason) of each record."""
    return [
        ("ok", r.line, r.fields["id"])
        if isinstance(r, SourceRecord)
        else ("rejected", r.line, r.reason)
        for r in records
    ]


def _over_limit(size: int, what: str = "line") -> str:
    return f"{what} of {size} bytes, over the limit of {LIMIT}"


# --- a line over the limit ----------------------------------------------------------------------

BIG = _line(1, "x" * LIMIT)  # 6,000,041 bytes


@pytest.mark.parametrize(
    ("form", "before"),
    [
        ("lf", 1),
        ("crlf", 1),
        ("cr", 1),  # classic Mac OS line ends
        ("no-final-line-end", 1),
        ("gzip", 1),
        ("utf-16", 1),
        ("first-line", 0),  # the part of the file read to tell the line ending holds no line end
        ("only-line", 0),  # a file without a line end: it was read whole
    ],
)
def test_a_line_over_the_limit_is_rejected_with_its_size_and_the_lines_after_it_read(
    tmp_path: Path, form: str, before: int
) -> None:
    end = {"crlf": "\r\n", "cr": "\r"}.get(form, "\n")
    lines = [_line(0)] * before + [BIG] + ([] if form == "only-line" else [_line(2), _line(3)])
    text = end.join(lines) + ("" if form in ("no-final-line-end", "only-line") else end)
    data = text.encode("utf-16") if form == "utf-16" else text.encode()
    path = tmp_path / ("corpus.jsonl.gz" if form == "gzip" else "corpus.jsonl")
    path.write_bytes(gzip.compress(data) if form == "gzip" else data)
    records = list(read_jsonl(path))
    expected = [("ok", 1, "d0")] * before + [("rejected", before + 1, _over_limit(len(BIG)))]
    if form != "only-line":
        expected += [("ok", before + 2, "d2"), ("ok", before + 3, "d3")]
    assert _kinds(records) == expected
    rejected = records[before]
    assert isinstance(rejected, Rejected) and rejected.source == str(path)
    assert rejected.raw == BIG[: len(rejected.raw)] and len(rejected.raw) == 2000


def test_a_line_at_the_limit_is_read_and_one_byte_longer_rejected(tmp_path: Path) -> None:
    """The limit counts the line's bytes, its line end (here CRLF) aside."""
    at_limit = _line(1, "x" * (LIMIT - len(_line(1, ""))))
    over = _line(2, "x" * (LIMIT + 1 - len(_line(2, ""))))
    assert (len(at_limit), len(over)) == (LIMIT, LIMIT + 1)
    path = tmp_path / "limit.jsonl"
    path.write_bytes("\r\n".join([_line(0), at_limit, over, _line(3)]).encode() + b"\r\n")
    assert _kinds(list(read_jsonl(path))) == [
        ("ok", 1, "d0"),
        ("ok", 2, "d1"),
        ("rejected", 3, _over_limit(LIMIT + 1)),
        ("ok", 4, "d3"),
    ]


# A child process that reads a file (format given) and reports the ids of the first and last
# records read, the rejections, and how much its resident set grew at most while it read (KiB).
_READ_CHILD = """
import json, sys
from pathlib import Path
from sparsewatch.replay.readers import SourceRecord, read_records

def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))

with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the peak (VmHWM) from here on (ru_maxrss counts the parent's at the fork)
before = kib("VmRSS")
ids, rejected = [], []
for record in read_records(Path(sys.argv[1]), sys.argv[2]):
    if isinstance(record, SourceRecord):
        ids[1:] = [record.fields["id"]] if ids else []
        ids[:1] = ids[:1] or [record.fields["id"]]
    else:
        rejected.append([record.line, record.reason])
print(json.dumps({"ids": ids, "rejected": rejected, "grew_kib": kib("VmHWM") - before}))
"""


def _read_in_a_child(path: Path, fmt: str = "jsonl") -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _READ_CHILD, str(path), fmt],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("then", ["a-record", "nothing"], ids=["then-a-record", "no-line-end"])
def test_an_over_long_line_is_read_past_in_bounded_memory(tmp_path: Path, then: str) -> None:
    """A line of 100 MB took about 800 MB to read (1.6 GB for 200 MB: under a memory limit the
    replay stopped, ``MemoryError``, nothing sent); a file without a line end was read whole to
    find its line ending first."""
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as fh:
        fh.write(b'{"id": "huge", "text": "')
        for _ in range(100):
            fh.write(b"x" * 1_000_000)
        fh.write(b'", "timestamp": 0}')
        if then == "a-record":
            fh.write(b"\n" + _line(2).encode() + b"\n")
    size = 100_000_000 + len('{"id": "huge", "text": "", "timestamp": 0}')
    report = _read_in_a_child(path)
    assert report["grew_kib"] < READ_GROWTH_KIB, report
    assert report["rejected"] == [[1, _over_limit(size)]]
    assert report["ids"] == (["d2"] if then == "a-record" else [])


# --- minified JSON arrays -----------------------------------------------------------------------


def _write_minified(path: Path, n: int, text: str = "word " * 40) -> None:
    """``n`` documents as one JSON array on one line, as ``json.dump`` writes it, written a
    document at a time."""
    with path.open("w") as fh:
        fh.write("[")
        for i in range(n):
            fh.write((", " if i else "") + json.dumps(_doc(i, text)))
        fh.write("]")


def test_a_minified_array_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """200,000 documents, 47 MB on one line: the array was held whole (five times its size)."""
    path = tmp_path / "export.json"
    _write_minified(path, 200_000)
    assert path.stat().st_size > 45_000_000
    report = _read_in_a_child(path)
    assert report["grew_kib"] < READ_GROWTH_KIB, report
    assert report["rejected"] == [] and report["ids"] == ["d0", "d199999"]


N = 5000  # documents of a minified array of 1.2 MB, over the mebibyte that tells it an array


def _minified_text(n: int = N) -> str:
    return json.dumps([_doc(i, "word " * 40) for i in range(n)])


def _element(i: int) -> str:
    """The JSON text of document ``i`` in :func:`_minified_text`."""
    return json.dumps(_doc(i, "word " * 40))


@pytest.mark.parametrize("at", [10, 4000], ids=["in-the-first-mebibyte", "after-it"])
@pytest.mark.parametrize("damage", ["invalid-json", "stray-byte", "no-object"])
def test_a_damaged_element_of_a_minified_array_is_rejected_alone_and_named_by_its_number(
    tmp_path: Path, damage: str, at: int
) -> None:
    """Every element of a minified array is on line 1: the rejection names the element. The
    whole array was read as one JSON line, one rejection, every element lost."""
    text = _minified_text()
    element = _element(at)
    damaged = {
        "invalid-json": element.replace(f'"id": "d{at}"', f'"id": d{at} oops'),
        "stray-byte": element.replace(f'"d{at}"', f'"d{at}\udce9"'),
        "no-object": "[1, 2]",
    }[damage]
    data = text.replace(element, damaged, 1).encode("utf-8", "surrogateescape")
    path = tmp_path / "export.json"
    path.write_bytes(data)
    records = list(read_jsonl(path))
    ids = [r.fields["id"] for r in records if isinstance(r, SourceRecord)]
    assert ids == [f"d{i}" for i in range(N) if i != at]
    (rejected,) = [r for r in records if isinstance(r, Rejected)]
    raw = damaged.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    assert rejected.line == 1 and rejected.raw.startswith(raw)
    assert rejected.reason.endswith(f" (element {at + 1} of the array)")
    if damage == "invalid-json":
        column = text.index(element) + damaged.index(f"d{at} oops") + 1
        assert rejected.reason.startswith(
            f"invalid JSON: Expecting value (line 1, column {column})"
        )
    elif damage == "stray-byte":
        byte = data.index(b"\xe9") + 1
        assert rejected.reason.startswith(f"not UTF-8 (line 1, byte {byte})")
    else:
        assert rejected.reason.startswith("not a JSON object but list")


@pytest.mark.parametrize("indent", [None, 2], ids=["minified", "pretty-printed"])
def test_an_array_element_over_the_limit_is_rejected_with_its_size(
    tmp_path: Path, indent: int | None
) -> None:
    docs = [_doc(0), _doc(1, "x" * LIMIT), _doc(2)]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(docs, indent=indent))
    records = list(read_jsonl(path))
    size = len(json.dumps(docs[1], indent=indent).replace("\n", "\n  "))
    if indent is None:
        assert _kinds(records) == [
            ("ok", 1, "d0"),
            ("rejected", 1, _over_limit(size, "array element") + " (element 2 of the array)"),
            ("ok", 1, "d2"),
        ]
    else:  # (the element starts its line: the line says where)
        assert _kinds(records) == [
            ("ok", 2, "d0"),
            ("rejected", 7, _over_limit(size, "array element")),
            ("ok", 12, "d2"),
        ]
    assert records[1].raw.startswith('{"id": "d1", "text": "xxxx' if indent is None else "{\n")


def _complete_elements(length: int) -> int:
    """How many elements of :func:`_minified_text` lie whole in its first ``length``
    characters."""
    end, count = 1, 0
    while count < N and end + len(_element(count)) <= length:
        end += len(_element(count)) + 2
        count += 1
    return count


CUT = len(_minified_text()) - 200_000  # (over the mebibyte)


@pytest.mark.parametrize(
    ("damage", "read"),
    [
        (lambda text: text.replace('"id": "d3000"', '"id": d3000 oops', 1), N - 1),
        (lambda text: text.replace('"id": "d20"', '"id": "d20\udce9"', 1), N - 1),
        (lambda text: text.replace('"d2000", "text": "', '"d2000", "text": "\\', 1), N - 1),
        (lambda text: text[:-1], N),
        (lambda text: text[:CUT], _complete_elements(CUT)),
        (lambda text: text + "\ntrailing words\n", N),
    ],
    ids=["invalid-json", "stray-byte", "bad-escape", "no-closing-bracket", "cut", "trailing"],
)
def test_a_small_window_reads_a_minified_array_as_a_large_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Any, read: int
) -> None:
    """Elements, escapes and damaged spots across the window's edges, within a line: the same
    records and rejections; only the damaged element is lost."""
    path = tmp_path / "export.json"
    path.write_bytes(damage(_minified_text()).encode("utf-8", "surrogateescape"))
    whole = list(read_jsonl(path))
    assert sum(isinstance(r, SourceRecord) for r in whole) == read
    assert sum(isinstance(r, Rejected) for r in whole) == 1
    monkeypatch.setattr(readers, "_WINDOW_CHARS", 3)
    assert list(read_jsonl(path)) == whole


# --- inputs with nothing to replay --------------------------------------------------------------

EMPTY_FILE = "empty file (no records)"
EMPTY_ARRAY = "empty JSON array (no records)"


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.jsonl", b"", EMPTY_FILE),
        ("blank.jsonl", b"\n  \n\r\n", EMPTY_FILE),
        ("bom.jsonl", codecs.BOM_UTF8, EMPTY_FILE),
        ("empty.jsonl.gz", gzip.compress(b""), EMPTY_FILE),
        ("empty.json", b"[]", EMPTY_ARRAY),
        ("pretty.json", b"\n[\n]\n", EMPTY_ARRAY),
        ("empty.sgm", b"", EMPTY_FILE),
        ("blank.sgm", b" \n\n", EMPTY_FILE),
    ],
)
def test_an_input_without_records_is_one_rejection(
    tmp_path: Path, name: str, content: bytes, reason: str
) -> None:
    """As an empty CSV file is: it was replayed as nothing, exit status 0, without a word."""
    path = tmp_path / name
    path.write_bytes(content)
    assert list(read_records(path)) == [Rejected(str(path), 1, reason)]


def _zip(data: bytes) -> bytes:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        zipped.writestr("corpus.jsonl", data)
    return archive.getvalue()


COMPRESSIONS = {
    "bzip2": bz2.compress,
    "xz": lzma.compress,
    "zip": _zip,
    "zstd": lambda data: b"\x28\xb5\x2f\xfd\x24\x04\x89\x10\x00" + data[:50],  # (its frame start)
}
CORPUS = {
    "jsonl": "".join(_line(i) + "\n" for i in range(300)),
    "csv": "id,text,timestamp\n" + "".join(f"{i},t,{T0 + i}\n" for i in range(300)),
    "sgm": '<REUTERS NEWID="1"><DATE>26-FEB-1987 15:01:01.79</DATE><BODY>b</BODY></REUTERS>\n'
    * 100,
}


@pytest.mark.parametrize("fmt", sorted(CORPUS))
@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_a_file_compressed_otherwise_than_with_gzip_is_refused_in_one_rejection(
    tmp_path: Path, compression: str, fmt: str
) -> None:
    """Each of its lines was rejected as garbage (``not UTF-8 (byte 0 of the line)``)."""
    path = tmp_path / f"corpus.{fmt}"
    path.write_bytes(COMPRESSIONS[compression](CORPUS[fmt].encode()))
    reason = (
        f"{path} is {compression}-compressed: decompress it, or compress it with gzip, "
        "which replay reads"
    )
    assert list(read_records(path)) == [Rejected(str(path), 1, reason)]


def test_a_compressed_file_whose_first_bytes_come_apart_through_a_fifo_is_told(
    tmp_path: Path,
) -> None:
    """The magic number is waited for when a pipe gives the file's first bytes alone."""
    fifo = tmp_path / "corpus.jsonl"
    os.mkfifo(fifo)
    data = bz2.compress(CORPUS["jsonl"].encode())

    def write() -> None:
        with fifo.open("wb") as fh:
            for piece in (data[:2], data[2:5], data[5:]):
                fh.write(piece)
                fh.flush()
                time.sleep(0.2)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    records = list(read_jsonl(fifo))
    writer.join(10)
    reason = (
        f"{fifo} is bzip2-compressed: decompress it, or compress it with gzip, which replay reads"
    )
    assert records == [Rejected(str(fifo), 1, reason)]


# --- the replay, end to end ---------------------------------------------------------------------


@pytest.mark.kafka
def test_replay_sends_the_records_around_over_long_lines_and_refuses_inputs_without_records(
    kafka_bootstrap: str, topic_name: str, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """An over-long line, a damaged element of a minified array, an empty file, an empty array
    and a bzip2 file among the inputs: each is one rejected record saying why, and every other
    document is sent."""
    lines = tmp_path / "lines.jsonl"
    lines.write_text(_line(0) + "\n" + BIG + "\n" + _line(2) + "\n")
    export = tmp_path / "export.json"
    text = _minified_text()
    damaged = text.replace('"id": "d4000"', '"id": "d4000\udce9"', 1)
    export.write_bytes(damaged.encode("utf-8", "surrogateescape"))
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "none.json").write_bytes(b"[]\n")
    packed = tmp_path / "packed.jsonl"
    packed.write_bytes(bz2.compress(CORPUS["jsonl"].encode()))
    inputs = [lines, export, tmp_path / "empty.jsonl", tmp_path / "none.json", packed]
    errors = tmp_path / "errors.jsonl"
    code, out, err = run_cli(
        monkeypatch, capsys, "replay", *map(str, inputs), "--topic", topic_name,
        "--bootstrap-servers", kafka_bootstrap, "--errors", str(errors), "--json",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["produced"], summary["rejected"]) == (2 + N - 1, 5)
    entries = [json.loads(line) for line in errors.read_text().splitlines()]
    assert [(e["source"], e["line"], e["reason"]) for e in entries] == [
        (str(lines), 2, _over_limit(len(BIG))),
        (str(export), 1, f"not UTF-8 (line 1, byte {damaged.index(chr(0xDCE9)) + 1})"
         " (element 4001 of the array)"),
        (str(inputs[2]), 1, EMPTY_FILE),
        (str(inputs[3]), 1, EMPTY_ARRAY),
        (str(packed), 1, f"{packed} is bzip2-compressed: decompress it, or compress it with "
         "gzip, which replay reads"),
    ]  # fmt: skip
    sent = {value["id"] for value in consume_values(kafka_bootstrap, topic_name)}
    assert sent == {"d0", "d2"} | {f"d{i}" for i in range(N) if i != 4000}
