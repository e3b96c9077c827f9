"""Corners of the document message, the scores message and the per-window core: every poison
message is parsed deterministically or refused with a one-line reason, never a crash."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.consumers.detector_core import _repeats_an_alert
from sparsewatch.consumers.messages import (
    MAX_EPOCH_MS,
    InvalidMessageError,
    parse_document,
    parse_message,
)
from sparsewatch.consumers.score_messages import ScoreMessages, parse_scored


def _doc(timestamp: object, **extra: object) -> bytes:
    return json.dumps({"id": "x", "text": "a", "timestamp": timestamp, **extra}).encode()


@pytest.mark.parametrize(
    ("iso", "number"),
    [
        # the last tenth of a millisecond of a day: 23:59:59.9996 was rounded into the next day
        # (and so into the next day's window), while the same instant as a number was cut off
        ("2026-12-31T23:59:59.9996Z", 1_798_761_599_999.6),
        ("2026-12-31T10:00:00.0015Z", 1_798_711_200_001.5),
        ("2026-12-31T10:00:00.9999999Z", 1_798_711_200_999.9),  # > 6 digits: cut to 6 first
        ("2027-01-01T05:29:59.9996+05:30", 1_798_761_599_999.6),
        # the last representable instant before 2200 was rounded to 2200 and refused
        ("2199-12-31T23:59:59.9999Z", MAX_EPOCH_MS - 0.1),
    ],
)
def test_a_fraction_of_a_millisecond_is_cut_off_from_an_iso_time_as_from_a_number(iso, number):
    from_iso = parse_document(_doc(iso)).timestamp_ms
    assert from_iso == parse_document(_doc(number)).timestamp_ms == int(number)


def test_an_iso_time_a_fraction_of_a_millisecond_before_1970_is_refused_as_its_number_is():
    """1969-12-31T23:59:59.9996Z was rounded to 0 ms and accepted, in 1970."""
    for before in ("1969-12-31T23:59:59.9996Z", -0.4):
        with pytest.raises(InvalidMessageError, match=r"outside 1970\.\.2200"):
            parse_document(_doc(before))


@pytest.mark.parametrize(
    "timestamp", [10**400, -(10**4000), 1e300, -1.7e308], ids=["int", "-int", "float", "-float"]
)
def test_a_huge_timestamp_is_refused_with_a_short_reason(timestamp):
    """The reason printed all of a number of up to 4,300 digits (dead-letter header and row)."""
    with pytest.raises(InvalidMessageError, match=r"outside 1970\.\.2200") as refused:
        parse_document(_doc(timestamp))
    assert len(refused.value.reason) < 80 and "digits" in refused.value.reason


@pytest.mark.parametrize(
    ("timestamp", "ms"),
    [
        ("2026-11-27T10:00:00+05:30", 1_795_753_800_000),
        ("2026-11-27T04:30:00-00:00", 1_795_753_800_000),
        ("2026-W48-5T04:30", 1_795_753_800_000),  # a week date: Friday of week 48
        ("20261127T043000Z", 1_795_753_800_000),  # the basic format
        ("  2026-11-27 04:30  ", 1_795_753_800_000),  # a space for T, blanks around
        ("2026-11-27", 1_795_737_600_000),
    ],
)
def test_odd_but_valid_iso_forms_parse_to_the_same_instant(timestamp, ms):
    assert parse_document(_doc(timestamp)).timestamp_ms == ms


@pytest.mark.parametrize(
    "timestamp",
    [
        "2026-12-31T23:59:60Z",  # a leap second
        "2026-12-31T24:00",
        "2026-331",  # an ordinal date
        "2026-12-31T10:00:00+24:00",
        "1700000000000",  # epoch ms as a string
        "\ud800",
        "\u0662026-12-31",  # an Arabic-Indic digit
    ],
)
def test_times_python_does_not_read_are_refused_with_a_reason(timestamp):
    payload = json.dumps({"id": "x", "text": "a", "timestamp": timestamp}).encode()
    with pytest.raises(InvalidMessageError, match="is not ISO-8601") as refused:
        parse_document(payload)
    refused.value.reason.encode("utf-8")  # storable and sendable as a header


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b'\xef\xbb\xbf{"id": "x", "text": "a", "timestamp": 1}', "invalid JSON"),  # BOM
        (b'[{"id": "x", "text": "a", "timestamp": 1}]', "not a JSON object but list"),
        (b'{"id": "x", "text": "a", "timestamp": NaN}', "timestamp is not finite"),
        (b'{"id": "x", "text": "a", "timestamp": -Infinity}', "timestamp is not finite"),
        (b'{"id": "x", "text": "a", "timestamp": 1e400}', "timestamp is not finite"),
        (b'{"id": 7, "text": "a", "timestamp": 1}', "'id' must be a string, got int"),
        (b'{"id": "x", "text": "a", "timestamp": 1, "stream": 7}', "'stream' must be a string"),
        (b'{"id": "x", "text": "a", "timestamp": 1, "labels": [1]}', "'labels'"),
        (b'{"id": "x", "text": "a", "timestamp": 1, "labels": ["a\\u0000"]}', "'labels'"),
        (b'{"id": "\\ud800\\ud800", "text": "a", "timestamp": 1}', "unpaired surrogate"),
        (b'{"id": " ", "text": "a", "timestamp": 1}', "'id' is empty"),
        (b'{"id": "x", "text": "a\xc3", "timestamp": 1}', "not UTF-8"),
    ],
)
def test_poison_messages_are_refused_with_a_reason(payload, reason):
    with pytest.raises(InvalidMessageError, match=reason) as refused:
        parse_message(payload)
    assert "\n" not in refused.value.reason
    refused.value.reason.encode("utf-8")


def test_duplicate_keys_resolve_to_the_last_one_on_every_reading():
    payload = b'{"id": "a", "id": "b", "text": "x", "timestamp": 1, "timestamp": 2}'
    first = parse_document(payload)
    assert (first.id, first.timestamp_ms) == ("b", 2)
    assert parse_document(payload) == first == parse_document(first.to_json())


def test_documents_the_detector_accepts_as_they_are():
    """Whitespace-only text (no term: scored, never novel), duplicate and empty labels."""
    doc = parse_document(_doc(1, text="  \t ", labels=["a", "a", ""]))
    assert (doc.text, doc.labels) == ("  \t ", ("a", "a", ""))


def test_a_document_with_any_meta_it_was_accepted_with_round_trips_through_to_json():
    """``meta`` is not validated (the detector does not read it): an unpaired surrogate escape
    in it made ``to_json`` raise UnicodeEncodeError for a document ``parse_document`` had
    accepted."""
    payload = (
        b'{"id": "x", "text": "a", "timestamp": 1, "meta": {"k\\udc00": ["\\ud800", "\\u0000", '
        b'1e400, NaN, 123456789012345678901234567890, {"deep": [[[]]]}]}}'
    )
    doc = parse_document(payload)
    again = parse_document(doc.to_json())
    assert again == doc and again.meta["k\udc00"][0] == "\ud800"


def _scores(n: int, **columns: object) -> ScoreMessages:
    rng = np.random.default_rng(0)
    base = {
        "stream": "s\u00e9",
        "window_seq": 2**62,
        "doc_ids": [f"d\U0001f600{i}" for i in range(n)],
        "timestamps_ms": np.arange(n, dtype=np.int64) + MAX_EPOCH_MS - n,
        "scores": rng.random(n).astype(np.float32),
        "errors": rng.random(n),
        "novel": rng.random(n) > 0.5,
        "codes": sp.random(n, 7, density=0.3, format="csr", random_state=0, dtype=np.float32),
        "n_terms": rng.integers(0, 10**6, n),
    }
    base.update(columns)
    return ScoreMessages(**base)


@pytest.mark.parametrize("n", [1, 3, 257])
def test_every_scores_message_the_detector_sends_is_read_back_by_the_anomaly_worker(n):
    window = _scores(n)
    codes = window.codes
    for i, (key, value) in enumerate(window):
        assert key == window.stream
        doc = parse_scored(value)
        row = codes[i]
        assert (doc.stream, doc.doc_id, doc.window_seq, doc.index, doc.n) == (
            window.stream,
            window.doc_ids[i],
            window.window_seq,
            i,
            n,
        )
        assert doc.timestamp_ms == int(window.timestamps_ms[i])
        assert doc.features[0] == float(window.scores[i])
        assert doc.features[1] == float(window.errors[i])
        assert doc.features[3] == row.nnz
        assert doc.features[2] == pytest.approx(float(row.data.astype(float).sum()))
        msg = json.loads(value)
        assert msg["novel"] is bool(window.novel[i])
        assert msg["code_index"] == row.indices.tolist()


def test_a_document_without_a_code_and_without_words_is_read_back():
    window = _scores(2, codes=sp.csr_matrix((2, 0)), n_terms=np.zeros(2, dtype=np.int64))
    for _, value in window:
        doc = parse_scored(value)
        assert doc.features[2:] == (0.0, 0.0, 0.0, 0.0)


def test_an_emerging_topic_announced_in_a_window_numbered_after_this_one_is_forgotten():
    """Window numbers go down when windows.size changes: an announcement of window 500 (hourly
    windows) was never forgotten at window 21 (daily windows) and suppressed the alert of a new
    story with the same terms until 64 later announcements pushed it out."""
    terms = {"quake": 1.0, "city": 0.5}
    announced = {7: (500, dict(terms)), 8: (19, {"other": 1.0})}
    assert _repeats_an_alert(announced, terms, seq=21, windows=3) is None
    assert announced == {8: (19, {"other": 1.0})}
    # within the repeat horizon, before and in this window, it is still recognised
    announced = {7: (18, dict(terms))}
    assert _repeats_an_alert(announced, terms, seq=21, windows=3) == 7
    assert _repeats_an_alert({7: (21, dict(terms))}, terms, seq=21, windows=3) == 7
