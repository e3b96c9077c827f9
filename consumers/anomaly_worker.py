"""The anomaly worker: ``<prefix>.scores`` -> DL-OCSVM -> anomaly scores and alerts in SQL.

The detector publishes one message per document of every processed window (see
:func:`~sparsewatch.consumers.detector_core.process_window`), all of a window's messages flushed
before the next window's are produced. This worker reassembles each (stream, window) —
deduplicating re-sent messages by their index — and processes a window as soon as one *version*
of it (its messages claiming the same window size ``n``) is complete. A window has a second
version when the detector crashed while flushing it and recomputed it differently on restart (a
window closed by the idle timer may close later, with more documents); the complete version is
processed and the other versions' messages (re-sent copies included) go to the dead letters
with the reason. A version arriving after its window was processed is a re-send up to the number
of documents processed (a window closed later holds the earlier version's documents first); its
further documents go to the dead letters, since the window is done. Because a stream's windows
are flushed in order, a window still incomplete when a later window, all of whose messages came
after it, completes can never complete: its messages go to the dead letters rather than holding
back the stream, and the resume offset, for ever (while their messages interleave, as when a
detector that lost its partition still sends while the new owner re-sends, the later window
waits). Likewise for a later window all of whose messages came
before a window that completes (such as a stray message with a window number far ahead): the
detector sends a window only after the earlier ones. A window is dropped once any later window
sent after all of its messages completes, not only the first later one: a stray message with a
window number behind, amid a window's messages, otherwise held back the stream for ever. The
dropped windows are remembered with their last offset until the stored resume offset passes it:
a restart that reads their messages again (another stream on the partition held its resume
offset back) ignores them, as their dead letters are stored. The incomplete windows of a stream
quiet for ``INCOMPLETE_IDLE_S`` are dropped too (a stray message of a stream that sends nothing
more: no later window of it ever completes). A re-sent window is recognised by its
number among the last ``REMEMBERED_WINDOWS`` processed, not by being below the last one: window
numbers go down when the detector's ``windows.size`` changes (they count sizes since the epoch),
and a stray complete window far ahead would otherwise have turned scoring off for the stream.
A checkpoint from before the processed windows were remembered (it kept only the last one, up
to which every window counted as processed) is restored as if it remembered the last
``REMEMBERED_WINDOWS`` window numbers up to that one: counting every window below it as
processed for ever ignored, silently, every later window of a stream whose window numbers went
down. A processed window forgotten (the oldest of those remembered) is still recognised when
read again, by where its messages were: the stream keeps, per partition, the offset up to which
every message of it was taken (the largest offset of the forgotten windows' messages, below any
message still pending), and ignores a message at or below it on that partition, since its
results (or its dead letter) are stored. A restart re-reads a partition from its stored resume
offset, which another stream on it may hold back (consumers/worker.py): a stream that processed
more than ``REMEMBERED_WINDOWS`` windows since then otherwise took its oldest windows read again
for new ones, processed each a second time (rescored by a later model, its stored scores and
flags overwritten, fed to the reference set again) and so forgot the next: every window read
again was processed twice. A window's messages include the re-sent copies read after it was
processed (ignored, or dead letters beyond its processed documents): counting only the
processed version's, the copies were covered neither by the window's number, forgotten, nor by
the offset, below them, and such a restart processed the window a second time. A new message
of a stream comes at a larger offset on its partition; a stream met on another partition after
a restart (it moved) is judged there by its window numbers alone. Windows are then processed in
order:

* until ``reference_documents`` representations are collected, they only fill the reference set;
* then DL-OCSVM (Irofti et al. 2024, Algorithms 1-3) is fitted on the reference set and scores the
  window that completed it (the reference period, in sample);
* every later window is scored (Algorithm 3) by the model fitted before it arrived, so a burst of
  odd documents is judged against what came before it, not against itself; flagged documents
  raise ``anomaly`` alerts. The window then joins the reference set, which keeps the latest
  ``reference_documents`` rows;
* the model is refitted every ``refit_every_windows`` windows, and at once after a window when
  the flag count, of that window or of all windows since the last fit, is improbably high or
  low for the ``contamination`` rate (binomial tail below ``refit_drift_p``): the representation
  drifts while the detector's dictionary grows and its vocabulary turns over, and a stale model
  flags ever more of the stream (on Reuters-21578 up to 40% of a window before the scheduled
  refit; ``benchmarks/anomaly.md``, "The stream's flag rate"), or, fitted on the detector's
  warm-up, hardly any. After a genuine burst the refit takes its documents into the reference:
  a kind of document that keeps coming becomes normal;
* a model restored from a checkpoint fitted with another ``n_atoms``, ``sparsity`` or
  ``contamination`` than configured now is refitted at once on the checkpointed reference set
  (with a warning), so a changed setting takes effect from the first window after the restart.
  The refitted state is checkpointed as fitted with the new settings even when the stream's next
  messages are only re-sends of processed windows: a stream dropped from memory while idle was
  otherwise restored from the old checkpoint, and refitted with the same warning, every time.

A document's representation is a fixed-length summary of its detector output, stable while the
dictionary grows: novelty score, reconstruction error, code l1 mass, number of active atoms,
largest code weight, and log document length, standardised with the reference set's mean and
standard deviation (features constant over the reference set are left out).
"""

from __future__ import annotations

import heapq
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from scipy.stats import binom
from sparsewatch.consumers.processor import Output
from sparsewatch.consumers.score_messages import (
    MAX_WINDOW_DOCUMENTS,
    N_FEATURES,
    ScoredDocument,
    parse_scored,
)
from sparsewatch.consumers.writer import StoreCall
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.storage.store import Checkpoint

from sparsewatch.config import AnomalyConfig, Config

# Processed windows remembered per stream, to tell a re-sent window (a detector re-sends the
# windows after its last checkpoint) from one never processed that has a lower number.
REMEMBERED_WINDOWS = 4096
# An incomplete window of a stream quiet this long (its partition read up to date) can never
# complete: the detector's producer delivers or fails each message within its message.timeout.ms
# (librdkafka's default, 5 minutes), and a window whose sending failed is sent again whole.
INCOMPLETE_IDLE_S = 600.0

log = logging.getLogger(__name__)

# A message received: the document, its partition and its offset.
_Received = tuple["ScoredDocument", int, int]
# Per window sequence number, per claimed window size n: the messages received, by index.
_Versions = dict[int, dict[int, _Received]]


@dataclass(slots=True)
class _Span:
    """Where a pending window's messages are (those of its versions, not the copies): the first
    and last offsets, kept up to date as they arrive, and the window's rank by arrival among
    the pending windows (the order of the dead letters of windows dropped together)."""

    first: int
    last: int
    rank: int


def build_model(config: AnomalyConfig, sparsity: int) -> DLOCSVM:
    """The configured DL-OCSVM (OMP sparsity capped by the number of usable features)."""
    return DLOCSVM(
        n_components=config.n_atoms,
        n_nonzero_coefs=sparsity,
        contamination=config.contamination,
        # Standardised features: libsvm's default tolerance is on the right scale; the model's
        # data-scaled default made libsvm crawl on the many identical rows (unexplained docs).
        ocsvm_tol=1e-3,
        random_state=0,
    )


class AnomalyStreamState:
    """Reassembled windows, the reference set and the fitted model of one stream."""

    def __init__(self, stream: str, config: Config, checkpoint: Checkpoint | None) -> None:
        self.stream = stream
        self.config = config.anomaly
        self.model: DLOCSVM | None = None
        self.reference = np.zeros((0, N_FEATURES))
        self.last_seq = -1
        self.since_fit = 0
        # Documents scored and flagged since the last fit, for the drift test.
        self.scored_since_fit = 0
        self.flagged_since_fit = 0
        self.center = np.zeros(N_FEATURES)
        self.scale = np.zeros(N_FEATURES)
        self._pending: dict[int, _Versions] = {}
        # The pending windows' offsets, the complete ones among them, and two heaps, of window
        # numbers and of (last offset, window), for _process_complete: entries of windows no
        # longer pending are skipped, a last offset that grew is pushed again when met.
        self._spans: dict[int, _Span] = {}
        self._complete: set[int] = set()
        self._heads: list[int] = []
        self._ends: list[tuple[int, int]] = []
        self._arrived = 0  # (windows that became pending: the next one's rank)
        # Further copies of pending messages (same window, size and index), by (window, size):
        # ignored if their version is processed, dead letters with it if it is dropped.
        self._copies: dict[tuple[int, int], list[_Received]] = {}
        # The latest processed windows (re-sends are of recent ones) with the number of documents
        # processed, and where their messages were: the partition and the largest offset, of the
        # copies read since too (not known for the windows of a checkpoint that did not say,
        # until a copy is read).
        self.done: dict[int, int] = {}
        self.done_at: dict[int, tuple[int, int]] = {}
        # Per partition, the offset up to which every message of the stream was taken, as far
        # as the forgotten processed windows tell (see _forget_oldest): read again, ignored.
        self.taken_to: dict[int, int] = {}
        # Always -1 now (see the module docstring), and checkpointed so: an older version
        # restoring the checkpoint took a missing floor for last_seq.
        self.done_floor = -1
        # Windows whose messages were dead-lettered unprocessed: the partition and the largest
        # offset dropped, until the stored resume offset passes it (see _was_dropped).
        self.dropped: dict[int, tuple[int, int]] = {}
        self._warned_constant = False
        # The settings the model was fitted with (checkpointed: see _restore_model), and whether
        # it was refitted on restore and the worker has not yet been told the state changed.
        self._fitted_with: dict[str, float] = {}
        self._unsaved_refit = False
        # When a message of the stream was last taken (the clock of add and close_idle).
        self._last_add = float("-inf")
        self._idle_timeout_s = config.windows.idle_timeout_s
        if checkpoint is not None:
            st = checkpoint.state
            # (the latest rows, as _remember keeps them, if reference_documents was lowered)
            self.reference = np.asarray(st["reference"], dtype=float)
            self.reference = self.reference[-self.config.reference_documents :]
            self.last_seq = int(st["last_seq"])
            seqs = np.asarray(st.get("done_seqs", []), np.int64).tolist()
            # (a checkpoint without the sizes: every message of those windows is a re-send)
            sizes = np.asarray(st.get("done_sizes", [MAX_WINDOW_DOCUMENTS] * len(seqs)), np.int64)
            self.done = dict(zip(seqs, sizes.tolist(), strict=True))
            # (-1: where a window's messages were is not known, as from a checkpoint without it)
            unknown = [-1] * len(seqs)
            partitions = np.asarray(st.get("done_partitions", unknown), np.int64)
            offsets = np.asarray(st.get("done_offsets", unknown), np.int64)
            if "done_seqs" not in st:  # (only the windows remembered say where they were)
                partitions = offsets = np.asarray(unknown, np.int64)
            self.done_at = {
                seq: (p, o)
                for seq, p, o in zip(seqs, partitions.tolist(), offsets.tolist(), strict=True)
                if o >= 0
            }
            # (a checkpoint without them: nothing forgotten)
            self.taken_to = {
                int(p): int(o)
                for p, o in zip(
                    st.get("taken_partitions", []), st.get("taken_offsets", []), strict=True
                )
            }
            # A checkpoint that did not remember the processed windows: the last
            # REMEMBERED_WINDOWS window numbers up to its floor (its last window) count as
            # processed, oldest first (see the module docstring); so does one written since
            # (it carried the floor), beside the windows processed after it.
            floor = int(st.get("done_floor", self.last_seq))
            room = REMEMBERED_WINDOWS - len(self.done)
            if floor >= 0 and room > 0:
                era = range(max(floor - room + 1, 0), floor + 1)
                self.done = {**dict.fromkeys(era, MAX_WINDOW_DOCUMENTS), **self.done}
            self.dropped = {
                int(seq): (int(p), int(o))
                for seq, p, o in zip(
                    st.get("dropped_seqs", []),
                    st.get("dropped_partitions", []),
                    st.get("dropped_offsets", []),
                    strict=True,
                )
            }
            self.since_fit = int(st["since_fit"])
            self.scored_since_fit = int(st.get("scored_since_fit", 0))
            self.flagged_since_fit = int(st.get("flagged_since_fit", 0))
            # (a stream idle for long is checkpointed and restored when it comes back: the
            # warning about constant features is not repeated each time)
            self._warned_constant = bool(st.get("warned_constant", False))
            self.center = np.asarray(st["center"], dtype=float)
            self.scale = np.asarray(st["scale"], dtype=float)
            model_state = {k[6:]: v for k, v in st.items() if k.startswith("model.")}
            if model_state:
                self._restore_model(model_state, st)

    def _restore_model(self, model_state: dict[str, np.ndarray], st: dict[str, np.ndarray]) -> None:
        """Rebuild the checkpointed model; refit it at once on the checkpointed reference set
        when ``n_atoms``, ``sparsity`` or ``contamination`` changed since it was fitted. The old
        model under the new settings was silently miscalibrated: its dictionary learned at the
        old sparsity coded with the new one and its threshold set for the old contamination
        (sparsity 2 -> 1 flagged 40-50% of the next windows at a contamination of 10%), or the
        new setting was ignored until the scheduled refit, up to ``refit_every_windows``
        windows later (``n_atoms``). A checkpoint from before the settings were recorded tells
        only its dictionary's size."""
        # (the sparsity the model was fitted with: the configured one capped as in _fit)
        sparsity = int(st.get("model_sparsity", min(self.config.sparsity, self._usable())))
        self.model = build_model(self.config, sparsity).set_state(model_state)
        n_atoms: int = self.model.dictionary_.shape[1]  # (estimator attributes are untyped)
        fitted_with = {
            "n_atoms": int(st.get("fitted_n_atoms", n_atoms)),
            "sparsity": int(st.get("fitted_sparsity", self.config.sparsity)),
            "contamination": float(st.get("fitted_contamination", self.config.contamination)),
        }
        self._fitted_with = fitted_with
        changed = {k: v for k, v in fitted_with.items() if v != getattr(self.config, k)}
        if not changed:
            return
        log.warning(
            "anomaly: stream %s: its checkpointed model was fitted with %s, configured now %s: "
            "refitted on its %d reference documents",
            self.stream,
            ", ".join(f"{k} {v}" for k, v in changed.items()),
            ", ".join(f"{k} {getattr(self.config, k)}" for k in changed),
            len(self.reference),
        )
        self._fit()
        self._unsaved_refit = True

    def add(self, item: ScoredDocument, partition: int, offset: int, now: float) -> list[Output]:
        """Take a scores message; the outputs of the windows it completed (see the module
        docstring). After a refit on restore, the first message that leaves nothing buffered
        and produces nothing (a re-send of a processed window) yields an empty output: the
        worker checkpoints a stream only after an output, and the refit would otherwise be lost
        when the idle stream leaves memory, and repeated when it is restored."""
        self._last_add = now
        outputs = self._take(item, partition, offset)
        if self._unsaved_refit and (outputs or self.min_buffered_offset(partition) is None):
            self._unsaved_refit = False
            outputs = outputs or [Output(is_window=False)]
        return outputs

    def _take(self, item: ScoredDocument, partition: int, offset: int) -> list[Output]:
        """Reassemble ``item``'s window and process the windows that are complete, in order."""
        if offset <= self.taken_to.get(partition, -1):
            return []  # read again after a restore: taken before the checkpoint, its results stored
        if self._was_dropped(item.window_seq, partition, offset):
            return []  # read again after a restore: its dead letter is stored
        if item.window_seq in self.done:
            return self._after_processed(item, partition, offset)
        seq = item.window_seq
        version = self._pending.setdefault(seq, {}).setdefault(item.n, {})
        if item.index in version:  # re-sent by a restarted detector: changes no version
            self._copies.setdefault((seq, item.n), []).append((item, partition, offset))
            return []
        version[item.index] = (item, partition, offset)
        span = self._spans.get(seq)
        if span is None:
            self._spans[seq] = _Span(offset, offset, self._arrived)
            self._arrived += 1
            heapq.heappush(self._heads, seq)
            heapq.heappush(self._ends, (offset, seq))
        else:
            span.first, span.last = min(span.first, offset), max(span.last, offset)
        if len(version) < item.n:
            return []
        self._complete.add(seq)
        return self._process_complete([])

    def _process_complete(self, dead: list[dict[str, Any]]) -> list[Output]:
        """Process the pending windows that are complete, in order, dropping those that can no
        longer complete; ``dead``: dead letters found before, handed over first. The oldest
        pending window comes from a heap and the windows sent before a completed one from a heap
        of last offsets, not from a scan of every pending window, whose messages were scanned
        again for their offsets, for each window dropped: 16,000 stray messages of windows that
        never complete, dropped when a later window completed, took 96 s."""
        outputs: list[Output] = []
        while self._pending:  # windows in order, from the oldest pending
            while self._heads[0] not in self._pending:
                heapq.heappop(self._heads)  # (dropped)
            head = self._heads[0]
            n = self._complete_size(head)
            if n is not None:
                docs = self._pending[head].pop(n)
                self._copies.pop((head, n), None)
                dead += self._drop(head, f"superseded by its complete version of {n} documents")
                first = min(o for (_, _, o) in docs.values())
                for seq in self._sent_before(first):
                    # a later window sent entirely before this one: not the detector's
                    dead += self._drop(seq, f"sent before window {head}, which completed")
                where = max((p, o) for (_, p, o) in docs.values())  # (one partition per stream)
                outputs.append(self._process(head, [docs[i][0] for i in range(n)], where))
                continue
            after = self._completed_after(head)
            if after is None:
                break  # the head may still complete (its messages interleave with the later's)
            dead += self._drop(head, f"incomplete; window {after}, sent after it, completed")
        if dead:
            outputs.insert(0, Output(dead=dead, is_window=False))
        return outputs

    def _after_processed(self, item: ScoredDocument, partition: int, offset: int) -> list[Output]:
        """A message of a processed window: re-sent after a detector restart, ignored; or a
        document that a larger version of the window (closed later by a restarted detector)
        holds beyond the documents processed: a dead letter, since the window is done. Either
        way taken: the window's largest offset on its partition rises to it, so that the
        message is still recognised, by its offset, once the window is forgotten (see the
        module docstring; on another partition, where the stream moved, by its window number
        alone)."""
        where = self.done_at.get(item.window_seq)
        if where is None or where[0] == partition:
            self.done_at[item.window_seq] = (partition, max(offset, where[1] if where else -1))
        processed = self.done.get(item.window_seq, MAX_WINDOW_DOCUMENTS)
        if item.index < processed:
            return []  # the version's documents come first in a larger one: a re-send
        why = f"window {item.window_seq} was processed with its version of {processed} documents"
        log.warning(
            "anomaly: stream %s window %d: message %d of %d dead-lettered (%s)",
            self.stream,
            item.window_seq,
            item.index,
            item.n,
            why,
        )
        reason = f"scores message of window {item.window_seq} ({item.n} documents) not used: {why}"
        row = {"partition": partition, "offset": offset, "reason": reason, "payload": item.raw}
        return [Output(dead=[row], is_window=False)]

    def _completed_after(self, head: int) -> int | None:
        """The first later complete window all of whose messages came after every message of
        window ``head``, which can then never complete (see the module docstring); None if
        none. Not only the first later complete window: one interleaved with ``head`` (a stray
        message of an earlier window number amid its messages) held back every later window,
        and the partition's resume offset, for ever. Only the complete windows are looked at
        (few: those waiting behind an incomplete one), not every pending one."""
        last = self._spans[head].last
        after = [s for s in self._complete if s > head and self._spans[s].first > last]
        return min(after, default=None)

    def _sent_before(self, first: int) -> list[int]:
        """The pending windows all of whose messages came before offset ``first``, in the order
        they arrived. Each entry of the heap of last offsets is popped once while below
        ``first``: a window dropped since is skipped, one whose messages went on past it is
        pushed again with its last offset now."""
        found: set[int] = set()
        while self._ends and self._ends[0][0] < first:
            _, seq = heapq.heappop(self._ends)
            span = self._spans.get(seq)
            if span is None:
                continue
            if span.last < first:
                found.add(seq)
            else:
                heapq.heappush(self._ends, (span.last, seq))
        return sorted(found, key=lambda s: self._spans[s].rank)

    def _was_dropped(self, seq: int, partition: int, offset: int) -> bool:
        """Whether this message was dead-lettered with its window, unprocessed, before: a
        restored stream reads it again when its partition's resume offset was held back by
        another stream (the smallest replay anchor of its streams), and the window, pending
        again while the messages that made it a dead letter count as processed, held the
        resume offset back until a later window completed: for ever at the stream's end."""
        verdict = self.dropped.get(seq)
        return verdict is not None and verdict[0] == partition and offset <= verdict[1]

    def _complete_size(self, seq: int) -> int | None:
        """The size ``n`` of a complete version of window ``seq``; None if none is complete."""
        return next((n for n, docs in self._pending[seq].items() if len(docs) == n), None)

    def _drop(self, seq: int, why: str) -> list[dict[str, Any]]:
        """Forget what is left pending of window ``seq`` (see the module docstring): its
        messages become dead letters with the reason."""
        versions = self._pending.pop(seq)
        del self._spans[seq]
        self._complete.discard(seq)
        if not self._pending:  # (nothing left to order: the heaps' entries are all stale)
            self._heads.clear()
            self._ends.clear()
        received = [r for n, docs in versions.items() for r in self._received(seq, n, docs)]
        if received:  # (one partition per stream; a later drop holds messages read later)
            self.dropped[seq] = max((p, o) for (_, p, o) in received)
        rows = [
            {
                "partition": p,
                "offset": o,
                "reason": f"scores message of window {seq} ({item.n} documents) not used: {why}",
                "payload": item.raw,
            }
            for (item, p, o) in sorted(received, key=lambda r: r[2])
        ]
        if rows:
            log.warning(
                "anomaly: stream %s window %d: %d messages dead-lettered (%s)",
                self.stream,
                seq,
                len(rows),
                why,
            )
        return rows

    def _received(self, seq: int, n: int, docs: dict[int, _Received]) -> list[_Received]:
        """Every message of version ``n`` of window ``seq``, copies included (forgotten here)."""
        return list(docs.values()) + self._copies.pop((seq, n), [])

    def _fit(self) -> None:
        """Fit on the standardised reference set; constant features are left out (nothing to
        standardise them by, nothing to learn from), as are features whose spread overflows
        (finite values as large as an outside producer may send), and with no usable feature
        there is no model yet."""
        # Constant: no spread at all (the rounding of a large constant's mean leaves its std
        # above zero) or a tiny one; a spread that overflows is no use either.
        with np.errstate(over="ignore", invalid="ignore"):
            center = self.reference.mean(axis=0)
            scale = self.reference.std(axis=0)
            usable = (np.ptp(self.reference, axis=0) > 0) & (scale >= 1e-9) & np.isfinite(scale)
        scale[~usable] = 0.0
        self.since_fit = self.scored_since_fit = self.flagged_since_fit = 0
        if not scale.any():
            if self.model is not None or not self._warned_constant:
                log.warning(
                    "anomaly: stream %s: every feature is constant over its %d reference "
                    "documents: nothing can be scored until they vary (fitted again each window)",
                    self.stream,
                    len(self.reference),
                )
                self._warned_constant = True
            self.model = None
            return
        self._warned_constant = False
        self.center, self.scale = center, scale
        # DL-OCSVM needs more rows than its sparsity: a reference set not yet refilled after
        # reference_documents and sparsity were raised together (a model fitted on fewer rows
        # exists) stopped the worker on every restart.
        sparsity = min(self.config.sparsity, self._usable(), len(self.reference) - 1)
        self.model = build_model(self.config, sparsity).fit(self._standardise(self.reference))
        self._fitted_with = {
            "n_atoms": self.config.n_atoms,
            "sparsity": self.config.sparsity,
            "contamination": self.config.contamination,
        }

    def _usable(self) -> int:
        """The number of features the model uses (those with a spread in the reference)."""
        return int((self.scale > 0).sum())

    def _remember(self, X: np.ndarray) -> None:
        """Add a window's representations to the reference set (the latest rows are kept)."""
        self.reference = np.vstack([self.reference, X])[-self.config.reference_documents :]

    def _drifted(self, flags: np.ndarray) -> bool:
        """Whether the flag count is improbable for the ``contamination`` rate, in this window
        (a sudden change) or in all windows scored since the last fit (a slow one, or windows
        too small to tell alone): a binomial tail, ``P(K >= flagged)`` or ``P(K <= flagged)``,
        below ``refit_drift_p`` (0: never). Too many flags are false alarms; too few, a model
        grown too wide to flag anything."""
        p = self.config.refit_drift_p
        if p <= 0:
            return False
        for flagged, n, span in (
            (int(flags.sum()), len(flags), "this window"),
            (self.flagged_since_fit, self.scored_since_fit, "the windows since the last fit"),
        ):
            rate = self.config.contamination
            tail = min(float(binom.sf(flagged - 1, n, rate)), float(binom.cdf(flagged, n, rate)))
            if tail < p:
                log.info(
                    "anomaly: stream %s: %d of %d documents flagged in %s (binomial tail %.2g "
                    "at contamination %g): refitting on the latest %d",
                    self.stream,
                    flagged,
                    n,
                    span,
                    tail,
                    rate,
                    len(self.reference),
                )
                return True
        return False

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        keep = self.scale > 0
        return (X[:, keep] - self.center[keep]) / self.scale[keep]

    def _forget_oldest(self) -> None:
        """Forget the oldest remembered processed window; its messages are recognised by their
        offset instead (see the module docstring). Every message of the stream on its partition
        up to the largest offset of its messages (copies read after it was processed included)
        was read before that one, and taken: processed, ignored as a re-send or dead-lettered,
        unless pending (a message of a window interleaved with every window processed since,
        never the detector's): the offset stays below the messages pending now. (One pending at
        the checkpoint a restart restored and not read again yet is not known here: pending that
        long, it is such a message too.)"""
        seq = next(iter(self.done))
        del self.done[seq]
        where = self.done_at.pop(seq, None)
        if where is None:
            return  # (a window of a checkpoint that did not say where its messages were)
        partition, last = where
        buffered = self.min_buffered_offset(partition)
        bound = last if buffered is None else min(last, buffered - 1)
        self.taken_to[partition] = max(self.taken_to.get(partition, -1), bound)

    def _process(self, seq: int, docs: list[ScoredDocument], where: tuple[int, int]) -> Output:
        """Process complete window ``seq`` (``where``: its messages' partition and largest
        offset)."""
        t0 = time.perf_counter()
        X = np.array([d.features for d in docs], dtype=float)
        self.last_seq = seq
        self.done[seq] = len(docs)
        self.done_at[seq] = where
        if len(self.done) > REMEMBERED_WINDOWS:
            self._forget_oldest()
        in_sample = self.model is None
        if in_sample:  # the reference period: collect, then fit and score it
            self._remember(X)
            if len(self.reference) >= self.config.reference_documents:
                self._fit()
        model = self.model
        if model is None:  # (still in the reference period)
            return Output(
                n_documents=len(docs),
                window=(self.stream, seq),
                summary=f"stream {self.stream} window {seq}: {len(docs)} documents into the "
                f"reference set ({len(self.reference)} of {self.config.reference_documents})",
            )
        Z = self._standardise(X)
        scores = model.decision_function(Z)
        flags = scores > model.threshold_  # what predict() computes, without a second OMP
        self.since_fit += 1
        self.scored_since_fit += len(flags)
        self.flagged_since_fit += int(flags.sum())
        if not in_sample:
            self._remember(X)
            if self.since_fit >= self.config.refit_every_windows or self._drifted(flags):
                self._fit()
        times = [datetime.fromtimestamp(d.timestamp_ms / 1000, tz=UTC) for d in docs]
        # With the event time and window: a row the detector never writes (its window was pruned
        # before this worker, behind, scored it) is then pruned by its event time.
        rows = [
            {
                "stream": d.stream,
                "doc_id": d.doc_id,
                "anomaly_score": float(s),
                "anomaly": bool(f),
                "event_time": t,
                "window_seq": seq,
            }
            for d, t, s, f in zip(docs, times, scores.tolist(), flags.tolist(), strict=True)
        ]
        alerts = [
            {
                "kind": "anomaly",
                "stream": d.stream,
                "subject_id": d.doc_id,
                "score": float(s),
                "window_seq": seq,
                "event_time": t,
                "summary": f"anomalous detector output (novelty {d.features[0]:.3f}, "
                f"{int(d.features[3])} atom{'' if int(d.features[3]) == 1 else 's'})",
            }
            for d, t, s, f in zip(docs, times, scores.tolist(), flags.tolist(), strict=True)
            if f
        ]

        calls: list[StoreCall] = [("upsert_anomaly_scores", (rows,))]
        if alerts:
            calls.append(("insert_alerts", (alerts,)))
        return Output(
            calls,
            n_documents=len(docs),
            novel=int(flags.sum()),
            closed_at=t0,
            window=(self.stream, seq),
            summary=f"stream {self.stream} window {seq}: {len(docs)} documents, "
            f"{int(flags.sum())} anomalous",
        )

    def close_idle(self, silent_until: float, wall_ms: float) -> list[Output]:
        """Drop the incomplete windows of a stream quiet from its last message until
        ``silent_until`` for ``INCOMPLETE_IDLE_S`` (or the idle timeout, if longer): no message
        of theirs can come any more; the complete windows that waited behind them are processed.
        Nothing else drops the last incomplete window of a stream that sends no later one (a
        stray message, as of a misspelt stream): it held its partition's resume offset back for
        ever, so every restart read the partition again from there, and the stream never left
        memory."""
        quiet_s = max(self._idle_timeout_s, INCOMPLETE_IDLE_S)
        if not self._pending or silent_until - self._last_add < quiet_s:
            return []
        why = f"incomplete when its stream had been quiet for {quiet_s:g} s"
        incomplete = [s for s in sorted(self._pending) if self._complete_size(s) is None]
        dead = [row for seq in incomplete for row in self._drop(seq, why)]
        # a complete window that waited behind one of them (a stray message of an earlier
        # window amid its messages, at the stream's end) is processed now, not dropped with it
        return self._process_complete(dead)

    def min_buffered_offset(self, partition: int) -> int | None:
        received = [
            r for versions in self._pending.values() for d in versions.values() for r in d.values()
        ]
        received += [r for copies in self._copies.values() for r in copies]
        offsets = [o for (_, p, o) in received if p == partition]
        return min(offsets) if offsets else None

    def forget_before(self, partition: int, offset: int) -> None:
        """Forget the dropped windows whose messages are never read again (re-sent messages of
        processed windows are recognised by their window number, or their offset)."""
        self.dropped = {
            seq: (p, o) for seq, (p, o) in self.dropped.items() if p == partition and o >= offset
        }

    def checkpoint(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        state: dict[str, np.ndarray] = {
            "reference": self.reference,
            "last_seq": np.asarray(self.last_seq, np.int64),
            "done_seqs": np.fromiter(self.done, np.int64, len(self.done)),
            "done_sizes": np.fromiter(self.done.values(), np.int64, len(self.done)),
            "done_partitions": np.asarray(
                [self.done_at.get(s, (-1, -1))[0] for s in self.done], np.int64
            ),
            "done_offsets": np.asarray(
                [self.done_at.get(s, (-1, -1))[1] for s in self.done], np.int64
            ),
            "done_floor": np.asarray(self.done_floor, np.int64),
            "taken_partitions": np.asarray(sorted(self.taken_to), np.int64),
            "taken_offsets": np.asarray(
                [self.taken_to[p] for p in sorted(self.taken_to)], np.int64
            ),
            **_dropped_arrays(self.dropped),
            "since_fit": np.asarray(self.since_fit, np.int64),
            "scored_since_fit": np.asarray(self.scored_since_fit, np.int64),
            "flagged_since_fit": np.asarray(self.flagged_since_fit, np.int64),
            "warned_constant": np.asarray(self._warned_constant, np.bool_),
            "center": self.center,
            "scale": self.scale,
        }
        if self.model is not None:
            state.update({f"model.{k}": v for k, v in self.model.get_state().items()})
            state.update(
                {
                    "model_sparsity": np.asarray(self.model.n_nonzero_coefs, np.int64),
                    "fitted_n_atoms": np.asarray(self._fitted_with["n_atoms"], np.int64),
                    "fitted_sparsity": np.asarray(self._fitted_with["sparsity"], np.int64),
                    "fitted_contamination": np.asarray(
                        self._fitted_with["contamination"], np.float64
                    ),
                }
            )
        return state, {"last_seq": self.last_seq, "fitted": self.model is not None}


def _dropped_arrays(dropped: dict[int, tuple[int, int]]) -> dict[str, np.ndarray]:
    """The dropped windows' verdicts as checkpoint arrays (by window number)."""
    seqs = sorted(dropped)
    return {
        "dropped_seqs": np.asarray(seqs, np.int64),
        "dropped_partitions": np.asarray([dropped[s][0] for s in seqs], np.int64),
        "dropped_offsets": np.asarray([dropped[s][1] for s in seqs], np.int64),
    }


class AnomalyProcessor:
    """Parses scores messages and builds :class:`AnomalyStreamState` per stream."""

    name = "anomaly"
    alert_kinds: tuple[str, ...] = ("anomaly",)

    def __init__(self, config: Config) -> None:
        self.config = config
        # A stream quiet this long is checkpointed and may leave memory (consumers/worker.py).
        self.idle_timeout_s = config.windows.idle_timeout_s

    def parse(self, payload: bytes | None, kafka_ms: int | None = None) -> ScoredDocument:
        """The scored document of a ``<prefix>.scores`` message (its Kafka timestamp unused)."""
        return parse_scored(payload)

    def stream_of(self, item: ScoredDocument) -> str:
        return item.stream

    def ends_stream(self, item: ScoredDocument) -> bool:
        return False  # the scores topic carries no end-of-stream markers

    def new_state(self, stream: str, checkpoint: Checkpoint | None) -> AnomalyStreamState:
        return AnomalyStreamState(stream, self.config, checkpoint)
