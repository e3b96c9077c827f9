"""The workers' log lines are JSON, Python's warnings included (``sparsewatch/logs.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

# The anomaly worker's OC-SVM fit on rows where libsvm cycles: it stops at its iteration bound
# and scikit-learn warns (tests/test_anomaly_models_real_parameters.py has the rows).
_CHILD = """
import numpy as np
from sparsewatch.logs import setup_logging
from sparsewatch.models._ocsvm_base import fit_linear_ocsvm
setup_logging("INFO")
rows = [
    [-963.199445, 0.0, 0.0, 963.902641],
    [0.0, 0.553589, 0.0, 0.446411],
    [1493.241052, 0.0, 0.0, -1493.049573],
    [1493.254929, 0.0, 0.0, -1493.049573],
    [1493.256954, 0.0, 0.0, -1493.049573],
]
order = [0, 1, 1, 1, 4, 4, 4, 1, 1, 1, 3, 0, 1, 0, 1, 2, 2, 1, 1, 2, 1, 0, 1, 1, 2, 2, 1, 0, 0, 1]
fit_linear_ocsvm(np.array(rows)[order], 0.5, 1e-3)
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
