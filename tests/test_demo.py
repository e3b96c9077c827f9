"""The README's main job: the demo runs end to end against a real broker and stores results."""

from __future__ import annotations

import sqlalchemy as sa
from sparsewatch.storage.store import Store

from sparsewatch.config import load_config
from sparsewatch.demo import MALFORMED, run_demo


def test_demo_end_to_end(kafka_bootstrap, tmp_path):
    config = load_config(
        env={
            "SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "SPARSEWATCH_DATA_DIR": str(tmp_path),
            "SPARSEWATCH_WINDOWS_SIZE": "2h",
            "SPARSEWATCH_WINDOWS_IDLE_TIMEOUT_S": "3",
        }
    )
    result = run_demo(config, n_documents=1500, out_dir=tmp_path / "demo")
    assert result.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Store.open(result.database_url) as store:
        docs = store.documents(limit=None)
        assert len(docs) == 1500
        assert store.alerts(kinds=["novel_document"], limit=None)
        assert any(d["anomaly_score"] is not None for d in docs)
        with store.reading() as conn:
            dead = conn.execute(sa.text("select reason from dead_letters")).scalars().all()
    assert len(dead) == result.n_malformed == len(MALFORMED)
    assert all(dead)
