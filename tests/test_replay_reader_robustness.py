"""Corpus files with one damaged spot keep every record around it (the README: one bad record
never stops the replay).

Reuters-21578 stories whose DATE carries the collection's "non-date noise material" after the time
(``27-MAR-1987 13:49:54.59E RM``) were rejected, the noise read as a time zone; a JSON array
export (``sparsewatch documents --format json``: ``indent=2``) with one stray byte, a truncated
gzip or a missing ``]`` was read line by line, every record rejected (0 documents of 1,000).
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path, PosixPath
from typing import Any

import pytest
from sparsewatch.consumers.messages import RecordError
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.replay import readers
from sparsewatch.replay.documents import ErrorFile, read_documents
from sparsewatch.replay.readers import Rejected, SourceRecord, read_jsonl

T0 = 1767225600000


class ListedErrors(ErrorFile):
    """An :class:`ErrorFile` that keeps its rejections in a list."""

    def __init__(self) -> None:
        super().__init__(None)
        self.items: list[Rejected] = []

    def write(self, rejected: Rejected) -> None:
        self.count += 1
        self.items.append(rejected)


def read(path: Path) -> tuple[list[dict], list[Rejected]]:
    errors = ListedErrors()
    return list(read_documents([path], errors=errors)), errors.items


# --- Reuters-21578 DATE noise ------------------------------------------------------------------

STORY = """<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN" CGISPLIT="TRAINING-SET" OLDID="{n}" NEWID="{n}">
<DATE>{date}</DATE>
<TOPICS><D>grain</D></TOPICS>
<TEXT>&#2;
<TITLE>STORY {n}</TITLE>
<BODY>Body of story {n}.
 Reuter
&#3;</BODY></TEXT>
</REUTERS>
"""

# DATE values as they occur in reut2-*.sgm, and the noise after their time
NOISY_DATES = [
    ("27-MAR-1987 13:49:54.59E RM", "27-MAR-1987 13:49:54.59", "E RM"),
    ("27-MAR-1987 13:53:00.39C M", "27-MAR-1987 13:53:00.39", "C M"),
    ("27-MAR-1987 13:58:01.19E A RM", "27-MAR-1987 13:58:01.19", "E A RM"),
    ("27-MAR-1987 13:59:06.41F", "27-MAR-1987 13:59:06.41", "F"),
    ("27-MAR-1987 14:01:21.93V RM", "27-MAR-1987 14:01:21.93", "V RM"),
    (
        "9-APR-1987 00:00:00.00    # date added by S Finch as guesswork",
        "9-APR-1987 00:00:00.00",
        "# date added by S Finch as guesswork",
    ),
]


def test_reuters_dates_with_trailing_noise_are_read_and_the_noise_kept(tmp_path: Path) -> None:
    dates = ["26-FEB-1987 15:01:01.79"] + [raw for raw, _, _ in NOISY_DATES]
    path = tmp_path / "reut2-000.sgm"
    path.write_text(
        '<!DOCTYPE lewis SYSTEM "lewis.dtd">\n'
        + "".join(STORY.format(n=n, date=d) for n, d in enumerate(dates, start=1))
    )
    docs, rejected = read(path)
    assert rejected == []
    assert [d["id"] for d in docs] == [str(n) for n in range(1, len(dates) + 1)]
    assert docs[0]["timestamp"] == parse_timestamp_ms("26-FEB-1987 15:01:01.79")
    assert "date_note" not in docs[0]["meta"]
    for doc, (_, clean, noise) in zip(docs[1:], NOISY_DATES, strict=True):
        assert doc["timestamp"] == parse_timestamp_ms(clean)
        assert doc["meta"]["date_note"] == noise


def test_a_reuters_date_that_is_no_date_still_rejects_its_story(tmp_path: Path) -> None:
    path = tmp_path / "reut2-001.sgm"
    path.write_text(STORY.format(n=1, date="sometime in MARCH") + STORY.format(n=2, date=""))
    docs, rejected = read(path)
    assert docs == []
    assert [r.line for r in rejected] == [1, 10]
    assert all(r.reason.startswith("bad timestamp") for r in rejected)


def test_noise_after_a_time_is_still_refused_outside_reuters_sgml(tmp_path: Path) -> None:
    """Only the SGML reader takes the date's noise apart: the timestamp parser stays strict."""
    with pytest.raises(RecordError, match="time zone"):
        parse_timestamp_ms("27-MAR-1987 13:49:54.59E RM")
    path = tmp_path / "noise.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "t", "date": "27-MAR-1987 13:49:54.59E RM"}))
    docs, rejected = read(path)
    assert docs == [] and [r.line for r in rejected] == [1]


# --- JSON arrays with one damaged spot ---------------------------------------------------------

N = 1000
LINES_PER_ELEMENT = 8  # of json.dumps(indent=2) of EXPORT's documents


def export_text() -> str:
    """A JSON export as ``sparsewatch documents --format json`` writes it."""
    docs = [
        {
            "id": f"d{i}",
            "text": f"story number {i}",
            "timestamp": T0 + i,
            "stream": "s",
            "labels": [],
            "meta": {},
        }
        for i in range(N)
    ]
    return json.dumps(docs, indent=2)


def element_line(i: int) -> int:
    return 2 + LINES_PER_ELEMENT * i


def test_the_export_form_is_what_the_tests_assume() -> None:
    lines = export_text().splitlines()
    assert lines[element_line(7) - 1] == "  {" and '"d7"' in lines[element_line(7)]


def test_one_byte_that_is_not_utf8_rejects_only_its_element(tmp_path: Path) -> None:
    text = export_text().replace("story number 500", "story number 500 caf\udce9", 1)
    path = tmp_path / "export.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    docs, rejected = read(path)
    assert [d["id"] for d in docs] == [f"d{i}" for i in range(N) if i != 500]
    assert len(rejected) == 1
    assert rejected[0].source == str(path) and rejected[0].line == element_line(500)
    assert rejected[0].reason.startswith(f"not UTF-8 (line {element_line(500) + 2}, byte ")
    assert "story number 500 caf\\xe9" in rejected[0].raw


def test_a_truncated_gzip_keeps_the_elements_before_the_cut(tmp_path: Path) -> None:
    packed = gzip.compress(export_text().encode())
    path = tmp_path / "export.json.gz"
    path.write_bytes(packed[: len(packed) * 9 // 10])
    docs, rejected = read(path)
    assert len(docs) > N // 2
    assert [d["id"] for d in docs] == [f"d{i}" for i in range(len(docs))]
    assert len(rejected) == 1
    assert rejected[0].line == element_line(len(docs))
    assert rejected[0].reason.startswith("truncated gzip: reading stopped after line ")
    assert rejected[0].reason.endswith(
        f"inside the array element that starts on line {element_line(len(docs))}"
    )


def test_a_missing_closing_bracket_keeps_every_element(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text(export_text().rstrip().removesuffix("]"))
    docs, rejected = read(path)
    assert len(docs) == N
    assert len(rejected) == 1 and "closing ']' is missing" in rejected[0].reason


def test_an_element_that_is_no_json_is_rejected_alone(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text(export_text().replace('"id": "d3"', '"id": d3 oops', 1))
    docs, rejected = read(path)
    assert [d["id"] for d in docs] == [f"d{i}" for i in range(N) if i != 3]
    assert len(rejected) == 1 and rejected[0].line == element_line(3)
    assert rejected[0].reason.startswith(
        f"invalid JSON: Expecting value (line {element_line(3) + 1}"
    )
    assert rejected[0].raw.startswith("{") and "d3 oops" in rejected[0].raw


def test_text_after_the_closing_bracket_is_rejected_and_the_array_kept(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    text = export_text()
    path.write_text(text + "\ntrailing words\n")
    docs, rejected = read(path)
    assert len(docs) == N
    assert [(r.line, r.raw) for r in rejected] == [(len(text.splitlines()) + 1, "trailing words")]


class CountingPath(PosixPath):
    """A path whose file counts the bytes read from it (:attr:`bytes_read`)."""

    bytes_read = 0

    def open(self, *args: Any, **kwargs: Any) -> Any:  # (``_open_binary``'s "rb")
        return io.BufferedReader(_CountedReads(super().open("rb", buffering=0), self))


class _CountedReads(io.RawIOBase):
    """A raw file whose reads add to ``path.bytes_read``."""

    def __init__(self, raw: Any, path: CountingPath) -> None:
        super().__init__()
        self.raw = raw
        self.path = path

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size = self.raw.readinto(buffer)
        self.path.bytes_read += size
        return size

    def close(self) -> None:
        self.raw.close()
        super().close()


def test_a_large_array_yields_its_first_record_after_reading_only_its_start(
    tmp_path: Path,
) -> None:
    """The whole file was read, and held (215 MiB for a 55 MB export), before the first
    element; the elements are now read as they come, from a bounded window of the file."""
    docs = [{"id": f"d{i}", "text": "word " * 20, "timestamp": T0 + i} for i in range(40_000)]
    (tmp_path / "export.json").write_text(json.dumps(docs, indent=2))
    path = CountingPath(tmp_path / "export.json")
    size = path.stat().st_size
    records = read_jsonl(path)
    assert next(records) == SourceRecord(str(path), 2, docs[0])
    assert path.bytes_read <= 2 * 2**20 < size // 3  # (the first MiB tells the line ending)
    assert [r.fields["id"] for r in records] == [d["id"] for d in docs[1:]]
    assert path.bytes_read == size


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text.replace("story number 500", "story number 500 caf\udce9", 1),
        lambda text: text.replace('"id": "d3"', '"id": d3 oops', 1),
        lambda text: text.rstrip().removesuffix("]"),
        lambda text: text + "\ntrailing words\n",
        lambda text: text.replace("  {", "  {{", 1) + "\n[\n" + text[2:],
        lambda text: text[: len(text) // 2],
    ],
)
def test_a_small_window_reads_an_array_as_a_large_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Any
) -> None:
    """Elements and damaged spots across the window's edges: the same records, and the same
    rejections, where they are."""
    path = tmp_path / "export.json"
    path.write_bytes(damage(export_text()).encode("utf-8", "surrogateescape"))
    whole = list(read_jsonl(path))
    monkeypatch.setattr(readers, "_WINDOW_CHARS", 3)
    assert list(read_jsonl(path)) == whole
    assert sum(isinstance(r, Rejected) for r in whole) <= 2


def test_a_one_line_array_that_is_no_array_is_still_read_line_by_line(tmp_path: Path) -> None:
    """JSON lines whose first line starts with ``[``: no element starts after the ``[`` line."""
    path = tmp_path / "lines.jsonl"
    good = [json.dumps({"id": f"a{i}", "text": "t", "timestamp": T0}) for i in range(3)]
    path.write_text("[1, 2\n" + "\n".join(good) + "\n")
    docs, rejected = read(path)
    assert [d["id"] for d in docs] == ["a0", "a1", "a2"]
    assert [(r.line, r.reason.split(":")[0]) for r in rejected] == [(1, "invalid JSON")]
