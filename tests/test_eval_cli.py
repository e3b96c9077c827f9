"""``sparsewatch evaluate`` (the click command) end to end on a small synthetic stream."""

from __future__ import annotations

import json

from click.testing import CliRunner

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
