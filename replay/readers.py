"""Corpus readers for the replay tool: JSONL, CSV and Reuters-21578 SGML, plain or gzip.

Each reader yields, per record, either a :class:`SourceRecord` (the raw fields, with the source file
and the line where the record starts) or a :class:`Rejected` (why it could not be read, where);
:func:`read_records` picks the reader by the file name (:func:`detect_format`). A file is read as
UTF-8, or as UTF-16 or UTF-32 after its byte-order mark, with any line ending. What a record's
fields become is :func:`~sparsewatch.consumers.field_mapping.to_document`'s to say;
:func:`~sparsewatch.replay.documents.read_documents` chains both over many files.

This module is the readers' entry point; the reading is done in its own modules: the records
(:mod:`~sparsewatch.replay.source_records`), the compression of a file
(:mod:`~sparsewatch.replay.input_compression`), its lines in bounded memory
(:mod:`~sparsewatch.replay.bounded_lines`, :mod:`~sparsewatch.replay.numbered_lines`) and the size
limit of a JSON record (:mod:`~sparsewatch.replay.record_size`), and the readers of each format
(:mod:`~sparsewatch.replay.jsonl_reader` with :mod:`~sparsewatch.replay.json_array_reader` and
:mod:`~sparsewatch.replay.json_window`, :mod:`~sparsewatch.replay.csv_reader` with
:mod:`~sparsewatch.replay.csv_quotes`, :mod:`~sparsewatch.replay.reuters_reader`). The limits
that the readers are given are set here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from sparsewatch.replay import csv_reader, jsonl_reader
from sparsewatch.replay.bounded_lines import SNIFF_BYTES
from sparsewatch.replay.reuters_reader import read_reuters_sgml
from sparsewatch.replay.source_records import RAW_CHARS, Rejected, SourceRecord

__all__ = [
    "READERS",
    "InputFormat",
    "Rejected",
    "SourceRecord",
    "detect_format",
    "read_csv",
    "read_jsonl",
    "read_records",
    "read_reuters_sgml",
]

InputFormat = Literal["jsonl", "csv", "reuters"]

_EXTENSIONS: dict[str, InputFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".sgm": "reuters",
    ".sgml": "reuters",
}
_RAW_CHARS = RAW_CHARS  # raw text kept per rejected record in the error file
_SNIFF_BYTES = SNIFF_BYTES  # how much of a file's start tells its line ending
# How much more of the file a JSON array's text window reads when it needs more (characters, at
# least), and how much text before the element being read it keeps
_WINDOW_CHARS = 1 << 16
# The longest CSV field read (characters): above any document a Kafka message can carry (the
# csv module's default, 131,072, refused texts a configured max_text_bytes allows)
_CSV_FIELD_CHARS = 1 << 24


def detect_format(path: Path) -> InputFormat:
    """The input format from the file name (``.gz`` removed), in any case."""
    name = path.name[:-3] if path.name.lower().endswith(".gz") else path.name
    suffix = Path(name).suffix.lower()
    if suffix not in _EXTENSIONS:
        raise ValueError(
            f"{path}: cannot tell the format from '{suffix or name}' "
            "(use .jsonl, .csv or .sgm, or give the format)"
        )
    return _EXTENSIONS[suffix]


def read_jsonl(path: Path) -> Iterator[SourceRecord | Rejected]:
    """The records of a JSON-lines file, or of one JSON array
    (:func:`~sparsewatch.replay.jsonl_reader.read_jsonl`, its array read :data:`_WINDOW_CHARS`
    at least at a time)."""
    return jsonl_reader.read_jsonl(path, _WINDOW_CHARS)


def read_csv(path: Path) -> Iterator[SourceRecord | Rejected]:
    """The records of a CSV file with a header row
    (:func:`~sparsewatch.replay.csv_reader.read_csv`, its fields up to :data:`_CSV_FIELD_CHARS`
    characters)."""
    return csv_reader.read_csv(path, _CSV_FIELD_CHARS)


READERS = {"jsonl": read_jsonl, "csv": read_csv, "reuters": read_reuters_sgml}


def read_records(path: Path, fmt: InputFormat | None = None) -> Iterator[SourceRecord | Rejected]:
    """The records of one file (format from the name unless given)."""
    return READERS[fmt or detect_format(path)](path)
