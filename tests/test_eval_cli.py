"""``sparsewatch evaluate`` (the click command) end to end on a small synthetic stream; ``run``
and ``demo`` with the anomaly worker disabled."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner
from sparsewatch.storage.store import Store

from sparsewatch.cli import main
from sparsewatch.commands_evaluate import evaluate
from sparsewatch.errors import SparsewatchError


def test_evaluate_synthetic_writes_json_and_plots(tmp_path) -> None:
    args = [
        "--docs",
        "700",
        "--warmup",
        "300",
        "--step",
        "200",
        "--max-steps",
        "2",
        "--methods",
        "nn-exact,nn-lsh,l2-batch,online",
        "--out",
        str(tmp_path),
    ]
    result = CliRunner().invoke(evaluate, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    payload = json.loads((tmp_path / "synthetic.json").read_text())
    assert [s["n_docs"] for s in payload["steps"]] == [200, 200]
    assert set(payload["methods"]) == {"nn-exact", "nn-lsh", "l2-batch", "online"}
    for m in payload["methods"].values():
        assert len(m["time_s"]) == 2
        assert m["pooled_auc_any"] is None or 0 <= m["pooled_auc_any"] <= 1
    assert payload["methods"]["online"]["sre"][0] <= 1 + 1e-6
    assert (tmp_path / "synthetic_roc.png").stat().st_size > 0
    assert (tmp_path / "synthetic_steps.png").stat().st_size > 0


def test_evaluate_reports_user_errors() -> None:
    runner = CliRunner()
    res = runner.invoke(evaluate, ["--corpus", "jsonl"])
    assert isinstance(res.exception, SparsewatchError)
    res = runner.invoke(evaluate, ["--docs", "50", "--methods", "nope"])
    assert isinstance(res.exception, SparsewatchError)


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["sparsewatch", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.fixture
def anomaly_disabled(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARSEWATCH_CONFIG", raising=False)
    monkeypatch.delenv("SPARSEWATCH_DEBUG", raising=False)
    monkeypatch.setenv("SPARSEWATCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARSEWATCH_ANOMALY_ENABLED", "0")


def test_run_anomaly_when_disabled_is_a_one_line_error(anomaly_disabled, monkeypatch, capsys):
    code, out, err = _main(monkeypatch, capsys, "run", "anomaly", "--until-idle", "1")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: the anomaly worker is disabled in the configuration")
    assert "SPARSEWATCH_ANOMALY_ENABLED" in err


def test_demo_with_the_anomaly_worker_disabled(
    anomaly_disabled, kafka_bootstrap, monkeypatch, capsys
):
    """The whole demo command against the real broker, the detector alone: it says so instead of
    printing an empty anomaly table, and stores every document without anomaly scores."""
    monkeypatch.setenv("SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("SPARSEWATCH_WINDOWS_SIZE", "2h")
    code, out, err = _main(monkeypatch, capsys, "demo", "--documents", "800")
    assert code == 0, err
    assert "top novel_document alerts" in out and "the anomaly worker is disabled" in out
    assert "top anomaly alerts" not in out
    url = next(line.split()[-1] for line in out.splitlines() if line.startswith("database:"))
    with Store.open(url) as store:
        docs = store.documents(limit=None)
    assert len(docs) == 800 and all(d["anomaly_score"] is None for d in docs)
