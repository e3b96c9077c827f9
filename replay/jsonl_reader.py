"""The JSON-lines reader (:func:`read_jsonl`): one JSON object per line, or a file that is one
JSON array, its elements read as they come (:func:`json_array_elements`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path

from sparsewatch.consumers.field_mapping import parse_json_object
from sparsewatch.consumers.messages import RecordError
from sparsewatch.replay.bounded_lines import LongLine
from sparsewatch.replay.json_array_reader import Element, json_array_elements
from sparsewatch.replay.numbered_lines import Line, numbered_lines
from sparsewatch.replay.record_size import MAX_RECORD_BYTES, line_bytes, over_limit
from sparsewatch.replay.source_records import Rejected, SourceRecord, raw_text


def read_jsonl(path: Path, window_chars: int) -> Iterator[SourceRecord | Rejected]:
    """One JSON object per line; blank lines are skipped. A file that is one JSON array (what
    ``sparsewatch documents --format json`` and many tools export) yields its elements, each by
    the line it starts on (every line of such a file was rejected, the export could not be
    replayed); a file that starts with ``[`` but is no JSON array is read line by line. The file
    is read once (:func:`json_array_elements` tells an array from its lines as they come): a
    pipe's first mebibyte was read to tell, then lost (``cat f.jsonl | ... /dev/stdin`` read
    nothing). An array's elements are read as they are iterated, from a window of the file (read
    ``window_chars`` at least at a time), whatever its lines: the whole file was held before the
    first, and a minified array (one line) until its end. A damaged spot in an array rejects only
    the element it lies in: one stray byte, a cut gzip or a missing ``]`` had the file read line
    by line, every record lost.

    A line or an array element over :data:`MAX_RECORD_BYTES` is rejected with its size, read past
    without being held (it was read and parsed whole, and one of 200 MB ended the replay for want
    of memory). A file without a record (empty, blank, or an empty array) is one rejection, as
    the CSV reader rejects an empty file: it was replayed as nothing, without a word.
    """
    source = str(path)
    lines = numbered_lines(path)
    elements, read = json_array_elements(lines, source, window_chars)
    if elements is None:
        yield from _line_records(source, itertools.chain(read, lines))
    else:
        yield from _array_records(source, elements)


def _line_records(source: str, lines: Iterable[Line]) -> Iterator[SourceRecord | Rejected]:
    """The records of JSON ``lines`` (:func:`read_jsonl`)."""
    empty = True
    for number, line, error in lines:
        if not isinstance(line, bytes) or len(line) > MAX_RECORD_BYTES:
            if line is None:
                yield Rejected(source, number, error)
                return
            data = line_bytes(line)
            if data is None:  # cut short by the error that follows
                continue
            if isinstance(data, int):
                empty = False
                head = line.head if isinstance(line, LongLine) else line
                yield Rejected(source, number, over_limit("line", data), raw_text(head))
                continue
            line = data
        if not line.strip():
            continue
        empty = False
        try:
            yield SourceRecord(source, number, parse_json_object(line))
        except RecordError as exc:
            yield Rejected(source, number, str(exc), raw_text(line))
    if empty:
        yield Rejected(source, 1, "empty file (no records)")


def _array_records(source: str, elements: Iterable[Element]) -> Iterator[SourceRecord | Rejected]:
    """The records of a JSON array's ``elements`` (:func:`read_jsonl`)."""
    empty = True
    for element in elements:
        empty = False
        if isinstance(element, Rejected):
            yield element
            continue
        number, data, where = element
        try:
            yield SourceRecord(source, number, parse_json_object(data, "array element"))
        except RecordError as exc:
            yield Rejected(source, number, str(exc) + where, raw_text(data))
    if empty:
        yield Rejected(source, 1, "empty JSON array (no records)")
