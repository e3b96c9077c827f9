"""``sparsewatch evaluate`` (the click command) end to end on a small synthetic stream; ``run``
and ``demo`` with the anomaly worker disabled."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sparsewatch.storage.store import Store

from sparsewatch.commands_evaluate import evaluate
from sparsewatch.demo import MALFORMED
from sparsewatch.errors import SparsewatchError
from tests.support.cli import run_cli


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
    # both classes occur in every step, so every AUC is defined
    assert all(
        0 < s["n_novel_none"] <= s["n_novel_any"] < s["n_evaluated"] for s in payload["steps"]
    )
    assert set(payload["methods"]) == {"nn-exact", "nn-lsh", "l2-batch", "online"}
    for m in payload["methods"].values():
        assert len(m["time_s"]) == 2 and all(t >= 0 for t in m["time_s"])
        for rule in ("none", "any"):
            assert len(m[f"auc_{rule}"]) == 2
            assert all(0 <= a <= 1 for a in m[f"auc_{rule}"])
            assert 0 <= m[f"pooled_auc_{rule}"] <= 1
            assert m[f"pooled_auc_{rule}_se"] > 0
    # exact nearest neighbour finds the stories the seeded stream brings in after the warm-up
    assert payload["methods"]["nn-exact"]["pooled_auc_none"] > 0.8
    # the l1 objective at x = 0 is 1 for a unit-l1 document, so the mean optimum is at most 1
    assert all(0 <= sre <= 1 + 1e-6 for sre in payload["methods"]["online"]["sre"])
    assert payload["methods"]["nn-exact"]["sre"] == [None, None]  # no reconstruction
    printed = json.loads(result.stdout)  # with --out: the summary of what the file holds
    assert printed["online"]["pooled_auc_any"] == payload["methods"]["online"]["pooled_auc_any"]
    for rule in ("none", "any"):  # the headline measure is printed too
        key = f"stratified_auc_{rule}"
        assert printed["online"][key] == payload["methods"]["online"][key]
    assert (tmp_path / "synthetic_roc.png").stat().st_size > 0
    assert (tmp_path / "synthetic_steps.png").stat().st_size > 0


def test_evaluate_reports_user_errors() -> None:
    runner = CliRunner()
    res = runner.invoke(evaluate, ["--corpus", "jsonl"])
    assert isinstance(res.exception, SparsewatchError)
    assert str(res.exception) == "--corpus jsonl needs --path"
    res = runner.invoke(evaluate, ["--docs", "50", "--methods", "nope"])
    assert isinstance(res.exception, SparsewatchError)  # before the too-short corpus is noticed
    assert str(res.exception).startswith("unknown method(s) ['nope']; choose from ")
    res = runner.invoke(evaluate, ["--docs", "500", "--methods", "nn-exact"])
    assert isinstance(res.exception, SparsewatchError)
    assert "need more than the warm-up 1000" in str(res.exception)


@pytest.fixture
def anomaly_disabled(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARSEWATCH_CONFIG", raising=False)
    monkeypatch.delenv("SPARSEWATCH_DEBUG", raising=False)
    monkeypatch.setenv("SPARSEWATCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARSEWATCH_ANOMALY_ENABLED", "0")


def test_run_anomaly_when_disabled_is_a_one_line_error(anomaly_disabled, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "run", "anomaly", "--until-idle", "1")
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
    code, out, err = run_cli(monkeypatch, capsys, "demo", "--documents", "800")
    assert code == 0, err
    assert "top novel_document alerts" in out and "the anomaly worker is disabled" in out
    assert "top anomaly alerts" not in out
    url = next(line.split()[-1] for line in out.splitlines() if line.startswith("database:"))
    with Store.open(url) as store:
        docs = store.documents(limit=None)
        reasons = store.dead_letter_reasons(limit=None)
    assert len(docs) == 800 and all(d["anomaly_score"] is None for d in docs)
    # the malformed messages it sent, counted by reason as `dead-letters --summary` does
    assert f"== dead letters by reason ({len(MALFORMED)} in total)" in out
    assert sum(r["count"] for r in reasons) == len(MALFORMED)
    assert all(f"{r['count']:8d}  {r['reason']}" in out for r in reasons)


def test_evaluate_reads_the_configuration(monkeypatch, capsys, tmp_path) -> None:
    """evaluate never read the configuration: a bad file or a misspelt variable passed silently,
    and the detector evaluated was not the configured one."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[detector\n")
    args = ["evaluate", "--docs", "700", "--warmup", "300", "--step", "200", "--max-steps", "2"]
    code, out, err = run_cli(monkeypatch, capsys, "--config", str(bad), *args)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    monkeypatch.setenv("SPARSEWATCH_DETECTOR_MAX_ATMOS", "10")
    code, out, err = run_cli(monkeypatch, capsys, *args, "--methods", "detector")
    assert code == 2 and "SPARSEWATCH_DETECTOR_MAX_ATOMS" in err and err.count("\n") == 1, err
    monkeypatch.delenv("SPARSEWATCH_DETECTOR_MAX_ATMOS")
    aucs = []
    for atoms in (None, "3"):
        if atoms is not None:  # a fixed dictionary of 3 atoms scores the stream differently
            monkeypatch.setenv("SPARSEWATCH_DETECTOR_INITIAL_ATOMS", atoms)
            monkeypatch.setenv("SPARSEWATCH_DETECTOR_NEW_ATOMS_PER_WINDOW", "0")
        code, out, err = run_cli(monkeypatch, capsys, *args, "--methods", "detector")
        assert code == 0, err
        aucs.append(json.loads(out)["methods"]["detector"]["auc_any"])
    assert aucs[0] != aucs[1]
