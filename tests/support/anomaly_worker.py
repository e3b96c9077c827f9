"""The anomaly worker against a real broker: scores messages as the detector sends them, a topic
of them, a stream's state restored from its checkpoint, the anomaly scores it stored, and a run of
the worker on such a topic with what it left in its store."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparsewatch.consumers.anomaly_worker import AnomalyStreamState
from sparsewatch.storage.store import Checkpoint, Store
from sqlalchemy import text

from sparsewatch.config import Config
from sparsewatch.runner import build_worker, run_loops
from tests.support.kafka_topics import produce_messages


def scores_payload(
    *,
    stream: str,
    doc_id: str,
    seq: int,
    i: int,
    n: int,
    timestamp: int,
    score: float,
    error: float,
    code_value: list[float],
    n_terms: int,
) -> bytes:
    """A message of ``<prefix>.scores`` as the detector sends it: document ``i`` of ``n`` of
    window ``seq``, not novel, coded on the first ``len(code_value)`` atoms."""
    return json.dumps(
        {
            "stream": stream,
            "doc_id": doc_id,
            "window_seq": seq,
            "index": i,
            "n": n,
            "timestamp": timestamp,
            "score": score,
            "reconstruction_error": error,
            "novel": False,
            "code_index": list(range(len(code_value))),
            "code_value": code_value,
            "n_terms": n_terms,
        }
    ).encode()


def scores_message(stream: str, seq: int, i: int, n: int, tag: str) -> bytes:
    """A message of ``<prefix>.scores`` as the detector sends it (document ``i`` of ``n``)."""
    rng = random.Random(f"{stream}{seq}{i}{tag}")
    atoms = rng.randrange(1, 5)
    return scores_payload(
        stream=stream,
        doc_id=f"{seq}-{tag}-{i}",
        seq=seq,
        i=i,
        n=n,
        timestamp=1_700_000_000_000 + 1000 * seq + i,
        score=rng.uniform(0.2, 1.0),
        error=rng.uniform(0.1, 0.9),
        code_value=[rng.uniform(0.05, 0.5) for _ in range(atoms)],
        n_terms=rng.randrange(5, 20),
    )


def window_message(seq: int, i: int, n: int) -> bytes:
    """Document ``i`` of ``n`` of window ``seq`` of stream ``s`` as the detector sends it, its
    values fixed by ``i`` (its id ``seq-i``: a larger version of a window holds the smaller one's
    documents first)."""
    return scores_payload(
        stream="s",
        doc_id=f"{seq}-{i}",
        seq=seq,
        i=i,
        n=n,
        timestamp=1_700_000_000_000 + 1000 * seq + i,
        score=0.3 + 0.05 * (i % 7),
        error=0.2 + 0.03 * (i % 5),
        code_value=[0.1 + 0.02 * i] * (1 + i % 3),
        n_terms=5 + i,
    )


def window(stream: str, seq: int, n: int = 10) -> list[tuple[str, bytes]]:
    return [(stream, scores_message(stream, seq, i, n, tag=stream)) for i in range(n)]


def produce(bootstrap: str, topic: str, messages: list[tuple[str, bytes]]) -> None:
    """``messages`` (stream, scores message) produced to ``topic``, keyed by stream."""
    produce_messages(bootstrap, topic, ((key.encode(), value) for key, value in messages))


def scores_topic(
    bootstrap: str, tmp_path: Path, name: str, sent: list[bytes], idle_timeout_s: str
) -> dict[str, str]:
    """A fresh ``<prefix>.scores`` topic holding ``sent`` (keyed by stream), and the environment
    of an anomaly worker reading it (its group ``<prefix>``, a SQLite file under ``tmp_path``)."""
    prefix = f"{name}-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'anomaly.db'}"
    env = {
        "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SPARSEWATCH_KAFKA_TOPIC_PREFIX": prefix,
        "SPARSEWATCH_KAFKA_GROUP_ID": prefix,
        "SPARSEWATCH_DATABASE_URL": url,
        "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": idle_timeout_s,
    }
    topic = f"{prefix}.scores"
    produce_messages(bootstrap, topic, ((json.loads(raw)["stream"].encode(), raw) for raw in sent))
    return env


def restore(
    state: AnomalyStreamState, config: Config, drop: tuple[str, ...] = ()
) -> AnomalyStreamState:
    """Stream ``s``'s state restored under ``config`` from ``state``'s checkpoint, without its
    arrays ``drop`` (as an older version wrote it)."""
    arrays, meta = state.checkpoint()
    arrays = {k: v for k, v in arrays.items() if k not in drop}
    return AnomalyStreamState("s", config, Checkpoint("g", "s", arrays, meta, None))


def wait(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return False


def anomaly_scores(store: Store) -> dict[str, float]:
    return {
        r["doc_id"]: r["anomaly_score"]
        for r in store.documents(limit=None)
        if r["anomaly_score"] is not None
    }


@dataclass
class AnomalyRun:
    """What one run of the anomaly worker left in its store: the ids of the documents it scored,
    its resume offsets by partition of the scores topic, and its dead letters as (offset, reason,
    payload), sorted."""

    scored: set[str]
    offsets: dict[int, int]
    dead: list[tuple[int, str, bytes]]


def run_anomaly_worker(config: Config, seconds: float) -> AnomalyRun:
    """The anomaly worker of ``config`` run for ``seconds`` on its scores topic, and what it
    stored."""
    with Store.open(config.database_url) as store:
        run_loops([build_worker("anomaly", config, store)], [seconds], False)
        group, topic = f"{config.kafka.group_id}.anomaly", config.kafka.topic("scores")
        with store.reading() as conn:
            dead = conn.execute(text("select offset, reason, payload from dead_letters"))
            dead_letters = sorted((o, reason, bytes(payload)) for o, reason, payload in dead)
        return AnomalyRun(
            set(anomaly_scores(store)), store.partition_offsets(group, topic), dead_letters
        )
