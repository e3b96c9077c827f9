"""The detector's per-document results as columns: what :meth:`StoreTx.insert_documents` writes.

A window's results were a dict per document from the detector's core to the database: about 550
bytes a tweet on top of its text, held from the window's close until written (the default window
is a day, so at a busy stream's close that was a large part of the worker's peak memory) and
pickled to the writer process row by row. :class:`DocumentColumns` keeps them as numpy arrays and
lists that point at the documents' own strings (about 120 bytes a document), crosses the process
boundary as arrays, and becomes database values column by column in the writer
(:meth:`DocumentColumns.bind`), which is also the form the bulk writes of
:mod:`sparsewatch.storage.bulk` hand the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import numpy as np
from sparsewatch.storage.values import int_list, opt_float, opt_int, require_keys, str_list

REQUIRED = ("stream", "doc_id", "event_time", "window_seq", "novelty_score")
"""The keys a document row must have (:meth:`DocumentColumns.from_rows`)."""


@dataclass(frozen=True)
class DocumentColumns:
    """Rows of the ``documents`` table's detector columns, one entry per document in each field.

    ``novelty_score`` / ``reconstruction_error``: float64, NaN where there is none (NULL);
    ``dominant_topic`` / ``emerging_topic``: int64, -1 where there is none; ``top_atoms``: the
    atoms of document ``i`` are ``top_atoms[top_atoms_indptr[i]:top_atoms_indptr[i + 1]]``;
    ``event_time``: timezone-aware datetimes; ``labels``: a sequence of strings per document.
    """

    stream: Sequence[str]
    doc_id: Sequence[str]
    event_time: Sequence[datetime]
    window_seq: np.ndarray
    novelty_score: np.ndarray
    reconstruction_error: np.ndarray
    novel: np.ndarray
    late: np.ndarray
    dominant_topic: np.ndarray
    emerging_topic: np.ndarray
    top_atoms_indptr: np.ndarray
    top_atoms: np.ndarray
    labels: Sequence[Sequence[str]]
    text: Sequence[str | None]

    def __post_init__(self) -> None:
        n = len(self.doc_id)
        lengths = {
            f.name: len(getattr(self, f.name))
            for f in fields(self)
            if f.name not in ("top_atoms", "top_atoms_indptr")
        }
        lengths["top_atoms_indptr - 1"] = len(self.top_atoms_indptr) - 1
        wrong = {name: size for name, size in lengths.items() if size != n}
        if wrong:
            raise ValueError(f"document columns of {n} documents, but {wrong}")
        if n and self.top_atoms_indptr[-1] != len(self.top_atoms):
            raise ValueError("top_atoms_indptr does not end at the number of top atoms")

    def __len__(self) -> int:
        return len(self.doc_id)

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> DocumentColumns:
        """Columns of document rows (dicts with the keys of :data:`REQUIRED`, and optionally
        ``reconstruction_error``, ``novel``, ``late``, ``dominant_topic``, ``emerging_topic``,
        ``top_atoms``, ``labels``, ``text``). ``KeyError`` for a missing key, ``ValueError`` for
        a row without ``event_time``."""
        rows = list(rows)
        for r in rows:
            require_keys(r, REQUIRED, "document")
            if r["event_time"] is None:  # it marks rows the detector has written
                raise ValueError(f"document {r['doc_id']!r} of {r['stream']!r} has no event_time")

        def floats(key: str) -> np.ndarray:
            values = [opt_float(r.get(key)) for r in rows]
            return np.array([np.nan if v is None else v for v in values], dtype=np.float64)

        def ints(key: str) -> np.ndarray:
            values = [opt_int(r.get(key)) for r in rows]
            return np.array([-1 if v is None else v for v in values], dtype=np.int64)

        atoms = [int_list(r.get("top_atoms")) for r in rows]
        return cls(
            stream=[r["stream"] for r in rows],
            doc_id=[str(r["doc_id"]) for r in rows],
            event_time=[r["event_time"] for r in rows],
            window_seq=np.array([int(r["window_seq"]) for r in rows], dtype=np.int64),
            novelty_score=floats("novelty_score"),
            reconstruction_error=floats("reconstruction_error"),
            novel=np.array([bool(r.get("novel", False)) for r in rows], dtype=bool),
            late=np.array([bool(r.get("late", False)) for r in rows], dtype=bool),
            dominant_topic=ints("dominant_topic"),
            emerging_topic=ints("emerging_topic"),
            top_atoms_indptr=np.cumsum([0, *map(len, atoms)], dtype=np.int64),
            top_atoms=np.array([a for row in atoms for a in row], dtype=np.int64),
            labels=[str_list(r.get("labels")) for r in rows],
            text=[r.get("text") for r in rows],
        )

    def bind(self) -> dict[str, list[Any]]:
        """The ``documents`` columns as Python values (NULL as ``None``, JSON columns as lists),
        one row per ``(stream, doc_id)`` key (its first occurrence wins, within a batch as across
        batches), in key order: concurrent writers of the same rows lock them in one order."""
        first: dict[tuple[str, str], int] = {}
        for i, key in enumerate(zip(self.stream, self.doc_id, strict=True)):
            first.setdefault(key, i)
        return self._values(np.array([first[key] for key in sorted(first)], dtype=np.int64))

    def rows(self) -> list[dict[str, Any]]:
        """One dict per document, in order (duplicates kept), with the values :meth:`bind` gives:
        for tests and tools; the store writes :meth:`bind`'s columns."""
        columns = self._values(np.arange(len(self)))
        names = list(columns)
        return [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]

    def _values(self, take: np.ndarray) -> dict[str, list[Any]]:
        """The columns of the documents ``take`` (indices, in that order) as Python values."""

        def nullable(values: np.ndarray, none: np.ndarray) -> list[Any]:
            out: list[Any] = values[take].tolist()
            for j in np.flatnonzero(none[take]).tolist():
                out[j] = None
            return out

        indptr = self.top_atoms_indptr.tolist()
        atoms = self.top_atoms.tolist()
        rows = take.tolist()
        return {
            "stream": [self.stream[i] for i in rows],
            "doc_id": [self.doc_id[i] for i in rows],
            "event_time": [self.event_time[i] for i in rows],
            "window_seq": self.window_seq[take].tolist(),
            "novelty_score": nullable(self.novelty_score, np.isnan(self.novelty_score)),
            "reconstruction_error": nullable(
                self.reconstruction_error, np.isnan(self.reconstruction_error)
            ),
            "novel": self.novel[take].tolist(),
            "late": self.late[take].tolist(),
            "dominant_topic": nullable(self.dominant_topic, self.dominant_topic < 0),
            "emerging_topic": nullable(self.emerging_topic, self.emerging_topic < 0),
            "top_atoms": [atoms[indptr[i] : indptr[i + 1]] for i in rows],
            "labels": [list(self.labels[i]) for i in rows],
            "text": [self.text[i] for i in rows],
        }
