"""The workers' log lines are JSON, Python's warnings included (``sparsewatch/logs.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.ocsvm_cycling import CYCLING_CODES

# The anomaly worker's OC-SVM fit on rows where libsvm cycles: it stops at its iteration bound
# and scikit-learn warns.
_CHILD = f"""
import numpy as np
from sparsewatch.logs import setup_logging
from sparsewatch.models._ocsvm_base import fit_linear_ocsvm
setup_logging("INFO")
fit_linear_ocsvm({CYCLING_CODES}, 0.5, 1e-3)
"""


def test_a_library_warning_is_a_json_log_line() -> None:
    """scikit-learn's ConvergenceWarning (the anomaly worker's fit stopped at its bound) came
    on stderr as two lines of plain text among the JSON lines."""
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", _CHILD], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert lines, "no warning at all"
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    warning = next(e for e in entries if "ConvergenceWarning" in e["message"])
    assert warning["level"] == "WARNING" and warning["logger"] == "py.warnings"
