"""The ``<prefix>.scores`` message: a window's messages kept as columns until they are sent (the
detector's side), and one message parsed and validated (the anomaly worker's).

The detector publishes one JSON message per scored document (its id, novelty score,
reconstruction error, novel flag and sparse code; key = stream id) for the anomaly worker. Encoded
at once they are about 450 bytes a tweet, held from the window's close until the writer has sent
them: at a big window's close (the default window is a day) that was a quarter of the worker's
memory rise. :class:`ScoreMessages` holds the same content as arrays (about 60 bytes a document
plus the codes) and encodes a message only as the writer produces it, in the writer (a child
process by default), off the worker's loop. The anomaly worker reads each message with
:func:`parse_scored`, which refuses (:class:`~sparsewatch.consumers.messages.InvalidMessageError`)
what the detector never sends, and reduces it to the fixed-length :func:`representation` its
model scores.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from sparsewatch.consumers.messages import (
    MAX_EPOCH_MS,
    MAX_ID_CHARS,
    MAX_STREAM_CHARS,
    MIN_EPOCH_MS,
    InvalidMessageError,
    json_bytes,
    string_field,
)

Message = tuple[str, bytes]
"""A message's key (the stream id) and value."""


@dataclass(frozen=True)
class ScoreMessages:
    """The ``<prefix>.scores`` messages of one window, in document order.

    ``doc_ids``, ``timestamps_ms`` (event times), ``scores``, ``errors`` (reconstruction errors),
    ``novel``, ``n_terms`` (whitespace-separated words of the text) hold one entry per document;
    ``codes`` is the ``n x k`` CSR matrix of their sparse codes. Iterating gives ``(stream,
    JSON bytes)`` per document, the message format :func:`parse_scored` reads.
    """

    stream: str
    window_seq: int
    doc_ids: Sequence[str]
    timestamps_ms: np.ndarray
    scores: np.ndarray
    errors: np.ndarray
    novel: np.ndarray
    codes: sp.csr_matrix
    n_terms: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.doc_ids)
        sizes = {
            len(self.timestamps_ms),
            len(self.scores),
            len(self.errors),
            len(self.novel),
            len(self.n_terms),
            self.codes.shape[0],
        }
        if sizes != {n}:
            raise ValueError(f"score message columns of different lengths: {sorted(sizes)} vs {n}")

    def __len__(self) -> int:
        return len(self.doc_ids)

    def __iter__(self) -> Iterator[Message]:
        indptr = self.codes.indptr.tolist()
        indices = self.codes.indices.tolist()
        values = self.codes.data.astype(float).tolist()
        columns = zip(
            self.doc_ids,
            self.timestamps_ms.tolist(),
            self.scores.tolist(),
            self.errors.tolist(),
            self.novel.tolist(),
            self.n_terms.tolist(),
            strict=True,
        )
        n = len(self)
        for i, (doc_id, timestamp, score, error, novel, n_terms) in enumerate(columns):
            lo, hi = indptr[i], indptr[i + 1]
            yield (
                self.stream,
                json_bytes(
                    {
                        "stream": self.stream,
                        "doc_id": doc_id,
                        "window_seq": self.window_seq,
                        "index": i,
                        "n": n,
                        "timestamp": timestamp,
                        "score": score,
                        "reconstruction_error": error,
                        "novel": bool(novel),
                        "code_index": indices[lo:hi],
                        "code_value": values[lo:hi],
                        "n_terms": n_terms,
                    }
                ),
            )


N_FEATURES = 6
# A scores message claiming a larger window is corrupt (no detector window is that large): refused
# at once instead of being kept, with its offset, until a later window completes.
MAX_WINDOW_DOCUMENTS = 10_000_000
# Window numbers are stored as int64 (the checkpoint's ``last_seq``).
MAX_WINDOW_SEQ = 2**63 - 1
# The largest feature value accepted (the detector's are about 1; a document's length is a count).
MAX_FEATURE = 1e12


@dataclass(frozen=True)
class ScoredDocument:
    """One message of ``<prefix>.scores``."""

    stream: str
    doc_id: str
    window_seq: int
    index: int
    n: int
    timestamp_ms: int
    features: tuple[float, ...]
    raw: bytes = field(default=b"", repr=False, compare=False)  # for a dead letter, if dropped


def _integer(msg: dict[str, Any], name: str) -> int:
    """A field that must be a JSON integer (not a string, a float or a boolean)."""
    value = msg[name]
    if type(value) is not int:
        raise InvalidMessageError(f"{name} must be an integer, got {_shown(value)}")
    return value


def _number(value: Any, name: str) -> float:
    """A JSON number (not a string or a boolean), finite and at most ``MAX_FEATURE`` in size:
    standardising a larger one overflowed to infinity, and the model refused the window (the
    worker stopped on every restart) or, in a refit, dropped the feature for the whole stream.
    The value is cut in the reason, as every other one is: an integer of thousands of digits put
    all of them into the dead letter's reason."""
    if type(value) not in (int, float):
        raise InvalidMessageError(f"{name} must be a number, got {_shown(value)}")
    if not abs(value) <= MAX_FEATURE:  # (NaN fails too)
        raise InvalidMessageError(
            f"{name} {_cut(repr(value))} is not a finite number of size <= 1e12"
        )
    return float(value)


SHOWN_CHARS = 40
"""The most characters of an offending value a reason quotes."""


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {json.dumps(value)[:SHOWN_CHARS]}"


def _cut(text: str) -> str:
    """``text`` up to ``SHOWN_CHARS`` characters; a longer one cut there, with its length."""
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def representation(msg: dict[str, Any]) -> tuple[float, ...]:
    """The fixed-length representation of one scored document (see the docstring of
    :mod:`sparsewatch.consumers.anomaly_worker`)."""
    code = msg["code_value"]
    if not isinstance(code, list):
        raise InvalidMessageError(f"code_value must be a list of numbers, got {_shown(code)}")
    values = [_number(v, "a code_value") for v in code]
    n_terms = _integer(msg, "n_terms")
    if not 0 <= n_terms <= MAX_FEATURE:
        raise InvalidMessageError("n_terms is not in 0..1e12")
    return (
        _number(msg["score"], "score"),
        _number(msg["reconstruction_error"], "reconstruction_error"),
        float(sum(values)),
        float(len(values)),
        max(values, default=0.0),
        math.log1p(n_terms),
    )


def parse_scored(payload: bytes | None) -> ScoredDocument:
    """Validate one scores message; :class:`InvalidMessageError` otherwise. The stream and the
    document id obey the detector's rules for its input (:func:`string_field`), the event time
    its range, and the window number fits the checkpoint's int64: a value that passed here and
    failed later, when stored, would stop the worker on every restart."""
    if payload is None:  # (its dead letter's payload is empty: the reason tells it from b"")
        raise InvalidMessageError("bad scores message: empty message (null value)")
    try:
        msg = json.loads(payload)
        if not isinstance(msg, dict):
            raise TypeError(f"a JSON {type(msg).__name__}, not an object")
        doc = ScoredDocument(
            string_field(msg, "stream", MAX_STREAM_CHARS),
            string_field(msg, "doc_id", MAX_ID_CHARS),
            _integer(msg, "window_seq"),
            _integer(msg, "index"),
            _integer(msg, "n"),
            _integer(msg, "timestamp"),
            representation(msg),
            payload,
        )
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"bad scores message: {exc.reason}") from None
    except (ValueError, KeyError, TypeError, ArithmeticError, RecursionError) as exc:
        # (ValueError covers UnicodeDecodeError and ints of too many digits; ArithmeticError
        # covers floats out of range, e.g. 1e400 -> int)
        reason = f"bad scores message: {type(exc).__name__}: {str(exc)[:200]}"
        raise InvalidMessageError(reason) from None
    if not 0 <= doc.window_seq <= MAX_WINDOW_SEQ:
        raise InvalidMessageError(f"bad scores message: window number {doc.window_seq}"[:240])
    if not 0 <= doc.index < doc.n <= MAX_WINDOW_DOCUMENTS:
        raise InvalidMessageError(
            f"bad scores message: index {doc.index} of a window of {doc.n} documents "
            f"(at most {MAX_WINDOW_DOCUMENTS})"[:240]
        )
    if not MIN_EPOCH_MS <= doc.timestamp_ms < MAX_EPOCH_MS:
        raise InvalidMessageError(
            f"bad scores message: timestamp {doc.timestamp_ms} ms is outside 1970..2200"[:240]
        )
    return doc
