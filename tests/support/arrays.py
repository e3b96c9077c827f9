"""A matrix, sparse or dense, as a dense array."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def to_dense(M: sp.spmatrix | np.ndarray) -> np.ndarray:
    """``M`` as a dense array (a dense one as it is)."""
    return M.toarray() if sp.issparse(M) else np.asarray(M)
