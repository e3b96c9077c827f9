"""One stream's windows and models in the detector worker: late documents are neither lost on a
crash nor scored differently depending on where the consumer's batches happen to end."""

from __future__ import annotations

import json

from sparsewatch.consumers.detector_worker import DetectorStreamState
from sparsewatch.consumers.messages import EndOfStream, parse_document
from sparsewatch.replay.synthetic import generate_stream

from sparsewatch.config import load_config

HOUR_MS = 3_600_000
PAST = 1e15  # a wall clock (epoch ms) long after the 2026 windows: they are all over


def _config():
    return load_config(
        env={
            "SPARSEWATCH_WINDOWS_SIZE": "1h",
            "SPARSEWATCH_DETECTOR_WARMUP_DOCUMENTS": "120",
        }
    )


def _stream() -> tuple[list, object, list]:
    """Documents spread over three hours, one late document of the first hour, then one document
    of a later hour that closes the open window."""
    raw = generate_stream(600, kind="tweet", stream="s", seed=5)
    t0 = 1_767_225_600_000  # 2026-01-01T00:00Z, epoch ms
    docs = []
    for i, d in enumerate(raw[:480]):
        d = {**d, "timestamp": t0 + (i // 160) * HOUR_MS + i}  # 160 documents an hour
        docs.append(parse_document(json.dumps(d).encode()))
    late = parse_document(json.dumps({**raw[500], "id": "late", "timestamp": t0 + 5}).encode())
    closer = parse_document(json.dumps({**raw[501], "timestamp": t0 + 4 * HOUR_MS}).encode())
    return docs, late, [closer]


def _run(batch_boundary_after_late: bool) -> tuple[list, DetectorStreamState]:
    docs, late, closer = _stream()
    state = DetectorStreamState("s", _config(), None)
    outputs = []
    for offset, doc in enumerate(docs):
        outputs += state.add(doc, 0, offset, now=0.0)
    n = len(docs)
    assert state.min_buffered_offset(0) == 2 * 160  # the third hour is still open
    # (On a partition of its own, so that the open window's earlier offsets do not hide it.)
    outputs += state.add(late, 1, 0, now=0.0)
    # Until it is handed over, the late document is where a restart must re-read from.
    assert state.min_buffered_offset(1) == 0
    if batch_boundary_after_late:
        outputs += state.close_idle(silent_until=0.0, wall_ms=PAST)  # a poll batch ends here
        assert state.min_buffered_offset(1) is None
    outputs += state.add(closer[0], 0, n, now=0.0)
    return outputs, state


def _late_rows(outputs: list) -> list[dict]:
    return [
        row
        for out in outputs
        for name, args in out.calls
        if name == "insert_documents"
        for row in args[0].rows()
        if row["late"]
    ]


def test_late_document_is_scored_by_the_model_it_arrived_to_whatever_the_batches():
    plain, state = _run(batch_boundary_after_late=False)
    split, _ = _run(batch_boundary_after_late=True)
    [a], [b] = _late_rows(plain), _late_rows(split)
    assert a["doc_id"] == b["doc_id"] == "late"
    assert a["novelty_score"] == b["novelty_score"] and a["novel"] == b["novel"]
    # Handed over before the window that closed after it: the same transaction or an earlier one.
    kinds = [bool(_late_rows([o])) for o in plain[-2:]]
    assert kinds == [True, False] and plain[-1].is_window
    # Once handed over it no longer holds back the resume offset.
    assert state.min_buffered_offset(1) is None


def test_windows_closed_together_share_their_close_time():
    """One end-of-stream marker closes three windows: each one's latency (close to commit) starts
    when they closed, not when the worker got round to computing it after the others."""
    raw = generate_stream(30, kind="tweet", stream="s", seed=3)
    t0 = 1_767_225_600_000
    env = {"SPARSEWATCH_WINDOWS_SIZE": "1h", "SPARSEWATCH_WINDOWS_ALLOWED_LATENESS": "1d"}
    state = DetectorStreamState("s", load_config(env=env), None)
    for i, d in enumerate(raw):
        doc = parse_document(json.dumps({**d, "timestamp": t0 + (i // 10) * HOUR_MS}).encode())
        assert state.add(doc, 0, i, now=0.0) == []  # the lateness keeps all three open
    outputs = state.add(EndOfStream("s"), 0, len(raw), now=0.0)
    assert [out.n_documents for out in outputs] == [10, 10, 10]
    assert len({out.closed_at for out in outputs}) == 1


def test_epoch_seconds_sent_as_milliseconds_are_logged_once_per_stream(caplog):
    # 1,767,225,600 is 2026-01-01 in epoch seconds; read as the format's milliseconds it is
    # 1970-01-21, and a day of such a stream is 86 s of event time: one window that never
    # closes by its watermark. The worker says so in its log, once per stream.
    raw = generate_stream(5, kind="tweet", stream="s", seed=5)
    state = DetectorStreamState("s", _config(), None)
    with caplog.at_level("WARNING", logger="sparsewatch.consumers.detector_worker"):
        for offset, d in enumerate(raw):
            doc = parse_document(json.dumps({**d, "timestamp": 1_767_225_600 + offset}).encode())
            state.add(doc, 0, offset, now=0.0)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "stream 's'" in warnings[0] and "1970-01-21" in warnings[0]
    assert "epoch seconds sent as milliseconds?" in warnings[0]
    caplog.clear()
    other = DetectorStreamState("s", _config(), None)
    with caplog.at_level("WARNING", logger="sparsewatch.consumers.detector_worker"):
        for offset, d in enumerate(raw):  # milliseconds, and ISO-8601: nothing to say
            ms = {**d, "timestamp": 1_767_225_600_000 + offset}
            other.add(parse_document(json.dumps(ms).encode()), 0, offset, now=0.0)
            iso = {**d, "id": f"iso-{offset}", "timestamp": "1973-03-04T00:00:00Z"}
            other.add(parse_document(json.dumps(iso).encode()), 0, 10 + offset, now=0.0)
    assert caplog.records == []


def test_documents_late_after_an_idle_close_are_counted_and_warned_about_once(caplog):
    """A window the idle timeout closed turns the rest of its documents late (not learnt from):
    a stream whose gaps exceed the timeout learns from few documents, which nothing showed. The
    worker now warns once per stream, and every late output counts its documents (the
    ``sparsewatch_late_documents_total`` metric); a document late by the watermark is no news."""
    docs, late, _ = _stream()
    state = DetectorStreamState("s", _config(), None)
    outputs = []
    for offset, doc in enumerate(docs[:200]):  # the first hour and 40 documents of the second
        outputs += state.add(doc, 0, offset, now=0.0)
    with caplog.at_level("WARNING", logger="sparsewatch.consumers.detector_worker"):
        assert state.add(late, 1, 0, now=1.0) == []  # late by the watermark: no warning
        assert not caplog.records
        idle = state.close_idle(silent_until=1.0 + state.spec.idle_timeout_s, wall_ms=PAST)
        assert [o.is_window for o in idle] == [False, True]  # the late one, then the window
        assert idle[0].late == 1 and idle[1].late == 0
        assert not state.windows.closed_early(late.timestamp_ms)
        for offset, doc in enumerate(docs[200:260], start=200):  # the rest of the second hour
            assert state.windows.closed_early(doc.timestamp_ms)
            outputs += state.add(doc, 0, offset, now=100.0)
        [warning] = caplog.records  # once for the stream, not per document
    assert "is late because its window (windows.size 1h) closed before the watermark" in (
        warning.getMessage()
    )
    assert "after 30.0 s without documents" in warning.getMessage()
    outputs += state.close_idle(silent_until=200.0, wall_ms=PAST)
    assert sum(o.late for o in outputs) == 60
    assert len(_late_rows(outputs)) == 60


def test_an_idle_stream_whose_window_ends_after_the_wall_clock_waits_and_says_so_once(caplog):
    """Event times ahead of the machine's clock by more than a window: the idle timer closes no
    window (it waits for the wall clock to pass its end), which would look like a hang; the
    detector says why, once per stream."""
    docs, _, _ = _stream()
    state = DetectorStreamState("s", _config(), None)
    for offset, doc in enumerate(docs[:100]):  # the first hour, 100 documents
        assert state.add(doc, 0, offset, now=0.0) == []
    wall = docs[0].timestamp_ms - 2 * 24 * HOUR_MS  # two days before the stream's event times
    with caplog.at_level("WARNING", logger="sparsewatch.consumers.detector_worker"):
        assert state.close_idle(silent_until=1.0, wall_ms=wall) == []  # not idle yet: no word
        assert not caplog.records
        for t in (100.0, 200.0):
            assert state.close_idle(silent_until=t, wall_ms=wall + t * 1000) == []
        [warning] = caplog.records
    assert "stream 's' is idle, but its open window ends 49.0 h after the wall clock" in (
        warning.getMessage()
    )
    assert state.windows.n_buffered == 100
    # Once the wall clock has passed the window's end, the idle stream's window closes.
    [window] = state.close_idle(silent_until=300.0, wall_ms=docs[0].timestamp_ms + HOUR_MS)
    assert window.n_documents == 100 and window.is_window


def test_a_late_novel_document_raises_a_novel_document_alert_in_its_own_window():
    """A late document the current dictionary cannot explain (words of no earlier document) is
    flagged novel like a window's: its row and its alert go out together, in the window its
    event time belongs to; a late document that is not novel raises none."""
    docs, _, closer = _stream()
    t0 = docs[0].timestamp_ms
    novel_text = "zyxqv wobblefrotz quernic plimsolute varnothex glimmerrat snorvax"
    late_novel = parse_document(
        json.dumps({"id": "late-novel", "text": novel_text, "timestamp": t0 + 7}).encode()
    )
    late_known = parse_document(
        json.dumps({"id": "late-known", "text": docs[3].text, "timestamp": t0 + 8}).encode()
    )
    state = DetectorStreamState("s", _config(), None)
    outputs = []
    for offset, doc in enumerate(docs):
        outputs += state.add(doc, 0, offset, now=0.0)
    outputs += state.add(late_novel, 1, 0, now=0.0)
    outputs += state.add(late_known, 1, 1, now=0.0)
    outputs += state.add(closer[0], 0, len(docs), now=0.0)
    late_outputs = [o for o in outputs if o.late]
    assert len(late_outputs) == 1
    (out,) = late_outputs
    calls = dict(out.calls)
    (rows,) = calls["insert_documents"]
    flags = dict(zip(rows.doc_id, rows.novel.tolist(), strict=True))
    assert flags == {"late-novel": True, "late-known": False}
    (alerts,) = calls["insert_alerts"]
    assert [a["subject_id"] for a in alerts] == ["late-novel"]
    (alert,) = alerts
    assert alert["kind"] == "novel_document" and alert["stream"] == "s"
    assert alert["window_seq"] == t0 // HOUR_MS  # the late document's own window
    assert alert["event_time"] == late_novel.event_time
    assert alert["score"] == float(rows.novelty_score[0]) > 0
