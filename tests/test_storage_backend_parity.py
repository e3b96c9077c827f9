"""The store behaves alike on SQLite and PostgreSQL: NaN, rows without a time and text in the
orderings, damaged npz blobs, database URLs (a "~" path, a password with "@")."""

from __future__ import annotations

import io
import math
import uuid
import zipfile
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import sqlalchemy as sa
from sparsewatch.storage.engine import mask_url
from sparsewatch.storage.schema import snapshots
from sparsewatch.storage.serialization import arrays_to_npz, npz_to_arrays
from sparsewatch.storage.store import Store

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def _doc(doc_id: str, **values: object) -> dict[str, object]:
    return {
        "stream": "s",
        "doc_id": doc_id,
        "event_time": T0,
        "window_seq": 0,
        "novelty_score": 0.5,
        **values,
    }


def _alert(subject: str, score: float, event_time: datetime | None) -> dict[str, object]:
    return {
        "kind": "anomaly",
        "stream": "s",
        "subject_id": subject,
        "score": score,
        "window_seq": 0,
        "event_time": event_time,
        "summary": subject,
    }


def _topic(strength: float) -> dict[str, object]:
    return {
        "stream": "s",
        "window_seq": 0,
        "topic_id": 0,
        "terms": [["a", 1.0]],
        "strength": strength,
        "emerging": False,
    }


def test_nan_is_null_on_both_databases_and_refused_where_a_column_is_not_null(database_url):
    """SQLite turned NaN into NULL (and failed on NOT NULL columns), PostgreSQL stored NaN."""
    nan = float("nan")
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.upsert_window("s", 0, T0, T0 + timedelta(hours=1), 2, nan, {}, "idle")
            tx.insert_documents(
                [_doc("a", novelty_score=np.float32(nan), reconstruction_error=nan)]
            )
            tx.upsert_anomaly_scores(
                [{"stream": "s", "doc_id": "a", "anomaly_score": np.float64(nan), "anomaly": False}]
            )
        (doc,) = store.documents()
        assert (doc["novelty_score"], doc["reconstruction_error"], doc["anomaly_score"]) == (
            None,
            None,
            None,
        )
        assert store.windows()[0]["threshold"] is None
        for write in (
            lambda tx: tx.insert_alerts([_alert("x", nan, T0)]),
            lambda tx: tx.upsert_topics([_topic(nan)]),
        ):
            with pytest.raises(ValueError, match="is NaN"), store.transaction() as tx:
                tx.insert_documents([_doc("b")])
                write(tx)
        assert store.alerts() == [] and store.topics() == []
        assert [d["doc_id"] for d in store.documents()] == ["a"]  # the failed windows left nothing
        with store.transaction() as tx:  # infinities are numbers on both
            tx.insert_alerts([_alert("y", -math.inf, T0)])
        assert store.alerts()[0]["score"] == -math.inf


def test_rows_without_a_time_come_last_on_both_databases(database_url):
    """NULL sorted first on SQLite and last on PostgreSQL ascending (the other way descending), so
    a --limit returned different rows."""
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            # an anomaly worker wrote "early" before the detector without its event time (as
            # before it stored the scores message's)
            tx.upsert_anomaly_scores(
                [{"stream": "s", "doc_id": "early", "anomaly_score": 1.0, "anomaly": True}]
            )
            tx.insert_documents([_doc("timed")])
            tx.insert_alerts([_alert("untimed", 9.0, None), _alert("timed", 1.0, T0)])
        assert [d["doc_id"] for d in store.documents()] == ["timed", "early"]
        assert [d["doc_id"] for d in store.documents(limit=1)] == ["timed"]
        by_event = store.alerts(time_field="event")
        assert [a["subject_id"] for a in by_event] == ["timed", "untimed"]


def _linguistic_database(url: str) -> str:
    """A new PostgreSQL database on the server of ``url`` whose default collation is ICU's
    English, as a server set up with an en_US locale has; skipped where ICU is missing."""
    name = f"sw_test_icu_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            ctype = conn.execute(
                sa.text("SELECT datctype FROM pg_database WHERE datname = current_database()")
            ).scalar_one()
            try:
                conn.execute(
                    sa.text(
                        f'CREATE DATABASE "{name}" TEMPLATE template0 LOCALE_PROVIDER icu '
                        f"ICU_LOCALE 'en' LOCALE '{ctype}'"
                    )
                )
            except sa.exc.DBAPIError as exc:
                pytest.skip(f"this PostgreSQL server cannot make an ICU database: {exc.orig}")
    finally:
        engine.dispose()
    return sa.engine.make_url(url).set(database=name).render_as_string(hide_password=False)


def test_text_sorts_in_code_point_order_on_both_databases(database_url):
    """PostgreSQL ordered by the database's collation ("a" before "B", "-" ignored), SQLite by
    code point: the same query listed the same rows in another order."""
    if sa.engine.make_url(database_url).get_backend_name() == "postgresql":
        database_url = _linguistic_database(database_url)
    names = ["a", "B", "_z", "news1", "news-2", "Ä"]
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            # (the snapshots of stream "s" have a window too: a row without one is listed last)
            tx.upsert_window("s", 0, T0, T0 + timedelta(hours=1), 0, None, {}, "idle")
            for name in names:
                tx.upsert_window(name, 0, T0, T0 + timedelta(hours=1), 0, None, {}, "idle")
                tx.upsert_topics([{**_topic(1.0), "stream": name}])
                tx.put_snapshot(name, 0, "dictionary", {"A": np.zeros(1)}, {}, 0)
                tx.put_snapshot("s", 0, name, {"A": np.zeros(1)}, {}, 0)
            tx.insert_documents([_doc(name, stream=stream) for name in names for stream in names])
        assert [w["stream"] for w in store.windows()] == sorted([*names, "s"])
        assert [t["stream"] for t in store.topics()] == sorted(names)
        documents = store.documents(limit=None)
        assert [(d["stream"], d["doc_id"]) for d in documents] == sorted(
            (stream, name) for name in names for stream in names
        )
        keys = {(name, "dictionary") for name in names} | {("s", name) for name in names}
        assert [(s["stream"], s["model_kind"]) for s in store.snapshots()] == sorted(keys)


def test_a_damaged_snapshot_blob_is_a_value_error_on_both_databases(database_url):
    """A bare .npy (not an npz) raised TypeError from inside np.load's context manager."""
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.put_snapshot("s", 0, "dictionary", {"A": np.arange(3)}, {}, 0)
            tx.connection.execute(sa.update(snapshots).values(blob=_npy()))
        with pytest.raises(ValueError, match="not a valid npz blob"):
            store.load_snapshot("s", "dictionary")


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _damaged_deflate() -> bytes:
    compressed = arrays_to_npz({"a": np.arange(1000)}, compress=True)
    middle = len(compressed) // 2
    flipped = bytes(b ^ 0xFF for b in compressed[middle : middle + 30])
    return compressed[:middle] + flipped + compressed[middle + 30 :]


def _npy() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.arange(3))
    return buffer.getvalue()


@pytest.mark.parametrize(
    "blob",
    [
        pytest.param(_npy(), id="bare-npy"),  # was TypeError
        pytest.param(_damaged_deflate(), id="corrupt-deflate-stream"),  # was zlib.error
        pytest.param(_zip({"a.txt": b"hello"}), id="member-not-npy"),  # was returned as bytes
        pytest.param(_zip({"a.npy": b"hello"}), id="garbage-npy-member"),  # was returned as bytes
    ],
)
def test_a_damaged_npz_blob_is_a_value_error(blob):
    with pytest.raises(ValueError, match="not a valid npz blob"):
        npz_to_arrays(blob)


def test_an_empty_archive_is_a_valid_blob():
    assert npz_to_arrays(arrays_to_npz({})) == {}


def test_a_sqlite_path_under_home_opens_the_file_under_home(tmp_path, monkeypatch):
    """The folder was made under $HOME but SQLite opened ./~/x.db: "unable to open database"."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with Store.open("sqlite:///~/results/x.db") as store, store.transaction() as tx:
        tx.insert_documents([_doc("a")])
    assert (tmp_path / "home" / "results" / "x.db").is_file()
    assert not (tmp_path / "~").exists()
    with Store.open(f"sqlite:///{tmp_path / 'home' / 'results' / 'x.db'}") as store:
        assert [d["doc_id"] for d in store.documents()] == ["a"]


def test_a_password_with_an_unencoded_at_sign_is_hidden_whole():
    """SQLAlchemy ended the password at its first '@' and took the rest for the host."""
    url = "postgresql+psycopg://u:se@cr@et@db.example:5433/x"
    assert mask_url(url) == "postgresql+psycopg://u:***@db.example:5433/x"
    assert mask_url("postgresql+psycopg://u%40org:p@h/d") == "postgresql+psycopg://u%40org:***@h/d"


def test_a_password_in_the_query_is_hidden():
    """libpq reads ``password`` (and ``sslpassword``) from the query too: printed in errors."""
    query = mask_url("postgresql+psycopg://u@h/d?password=S3CRET&sslpassword=K3Y&sslmode=require")
    assert "S3CRET" not in query and "K3Y" not in query and "sslmode=require" in query
    assert "password=***" in query and "sslpassword=***" in query


def test_a_password_with_an_unencoded_at_sign_reaches_the_server(postgres_database):
    url, _ = postgres_database
    parsed = sa.engine.make_url(url)
    if parsed.password is not None:
        pytest.skip("the test server asks for a password: a made-up one cannot log in")
    raw = url.replace(f"@{parsed.host}", f":se@cret@{parsed.host}", 1)
    assert sa.engine.make_url(raw).host == f"cret@{parsed.host}"  # how SQLAlchemy reads it
    with Store.open(raw) as store:  # the test server trusts its clients: any password is fine
        assert store.engine.url.host == parsed.host
        assert store.engine.url.password == "se@cret"
        assert store.documents() == []
