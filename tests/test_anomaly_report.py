"""The protocol-B report counts exactly equal mean balanced accuracies as tied best."""

from __future__ import annotations

import importlib.util
from fractions import Fraction
from pathlib import Path

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "anomaly_odds.py"


def load_module():
    spec = importlib.util.spec_from_file_location("anomaly_odds_for_test", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def result(bas: list[float]) -> dict:
    runs = [{"ba": b, "auc": 0.9, "params": {}, "cv": []} for b in bas]
    return {
        "ba_mean": float(np.mean(bas)),
        "ba_std": float(np.std(bas, ddof=1)),
        "auc_mean": 0.9,
        "auc_std": 0.0,
        "fit_s_median": 0.0,
        "score_s_median": 0.0,
        "select_s_median": 0.0,
        "runs": runs,
    }


def test_float_rounding_tie_is_counted_for_both_methods() -> None:
    """lympho, fixed defaults: the same rational mean 1069/1140 summed in two orders differs in the
    last bit; both methods are best, a strictly lower one is not."""
    ao = load_module()
    # per-seed values as balanced_accuracy_score returned them (lympho test parts: 57 + 2 rows)
    a = [1.0, 1.0, 0.7236842105263157, 0.9912280701754386, 0.9736842105263157, 0.75]
    a += [1.0, 0.9736842105263157, 0.9824561403508771, 0.9824561403508771]
    b = [1.0, 1.0, 0.7324561403508771, 0.9912280701754386, 0.9912280701754386, 0.75]
    b += [0.9736842105263157, 0.9736842105263157, 0.9824561403508771, 0.9824561403508771]
    exact = [sum(Fraction(x).limit_denominator(228) for x in v) for v in (a, b)]
    assert exact[0] == exact[1] == Fraction(10 * 1069, 1140)
    assert np.mean(a) != np.mean(b)  # the float means differ in the last bit
    c = [x - 1 / 228 for x in b]
    res = {"lympho": {"A": result(a), "B": result(b), "C": result(c)}}
    lines = ao.report_b(res, "t")
    summary = next(line for line in lines if line.startswith("Best mean per method"))
    assert summary.endswith("A 1, B 1, C 0")
    row = next(line for line in lines if line.startswith("| lympho"))
    assert row.count("**") == 4
    assert ao.is_best(0.9, 0.9 + 1e-15) and not ao.is_best(0.9, 0.9 + 1e-6)
