"""A window's messages for ``<prefix>.scores``, kept as columns until they are sent.

The detector publishes one JSON message per scored document (its id, novelty score,
reconstruction error, novel flag and sparse code; key = stream id) for the anomaly worker. Encoded
at once they are about 450 bytes a tweet, held from the window's close until the writer has sent
them: at a big window's close (the default window is a day) that was a quarter of the worker's
memory rise. :class:`ScoreMessages` holds the same content as arrays (about 60 bytes a document
plus the codes) and encodes a message only as the writer produces it, in the writer (a child
process by default), off the worker's loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sparsewatch.consumers.messages import json_bytes

Message = tuple[str, bytes]
"""A message's key (the stream id) and value."""


@dataclass(frozen=True)
class ScoreMessages:
    """The ``<prefix>.scores`` messages of one window, in document order.

    ``doc_ids``, ``timestamps_ms`` (event times), ``scores``, ``errors`` (reconstruction errors),
    ``novel``, ``n_terms`` (whitespace-separated words of the text) hold one entry per document;
    ``codes`` is the ``n x k`` CSR matrix of their sparse codes. Iterating gives ``(stream,
    JSON bytes)`` per document, the message format :func:`~sparsewatch.consumers.anomaly_worker.
    parse_scored` reads.
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
