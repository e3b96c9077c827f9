"""Codes of a degenerate reference the anomaly worker fitted DL-OCSVM on (five distinct rows;
near-collinear atoms gave coefficients of about 1,500), on which libsvm's solver cycles with the
worker's tolerance 1e-3: as a Python expression, for a child process to fit them (unbounded, the
solver would hang the test itself)."""

from __future__ import annotations

_ROWS = [
    [-963.199445, 0.0, 0.0, 963.902641],
    [0.0, 0.553589, 0.0, 0.446411],
    [1493.241052, 0.0, 0.0, -1493.049573],
    [1493.254929, 0.0, 0.0, -1493.049573],
    [1493.256954, 0.0, 0.0, -1493.049573],
]
_ORDER = [0, 1, 1, 1, 4, 4, 4, 1, 1, 1, 3, 0, 1, 0, 1, 2, 2, 1, 1, 2, 1, 0, 1, 1, 2, 2, 1, 0, 0, 1]

# the rows in the order the worker met them (numpy imported as ``np``)
CYCLING_CODES = f"np.array({_ROWS})[{_ORDER}]"
