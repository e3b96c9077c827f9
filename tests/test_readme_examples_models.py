"""The README's "The models without Kafka" example runs as written and does what its comments say.

The snippet is read from the README itself, so an edit there that breaks it, or a change of the
library that makes its comments untrue, fails here.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparsewatch.config import DetectorConfig

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## The models without Kafka"


def _snippet() -> str:
    """The first ```python block after the section heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    match = re.search(r"```python\n(.*?)```", text[start:], re.DOTALL)
    assert match is not None, f"no python block under {SECTION!r} in the README"
    return match.group(1)


@pytest.fixture(scope="module")
def ran() -> tuple[dict[str, Any], str]:
    """The snippet's namespace after it ran, and what it printed."""
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_snippet(), str(README), "exec"), namespace)
    return namespace, out.getvalue()


@pytest.mark.slow
def test_the_example_prints_scores_and_a_flag_count(ran: tuple[dict[str, Any], str]) -> None:
    """It prints the last window's first five scores and its number of novel flags first."""
    namespace, printed = ran
    result = namespace["result"]
    line = printed.strip().splitlines()[0]
    assert line.startswith("[") and line.endswith(f"] {int(result.novel.sum())}"), printed
    assert result.scores.shape == (1000,) and not result.warmup
    assert np.isfinite(result.scores).all() and (result.scores >= 0).all()


@pytest.mark.slow
def test_the_flags_are_the_top_tenth_of_the_scores(ran: tuple[dict[str, Any], str]) -> None:
    """The comment's "higher = more novel": the flagged documents are the highest-scoring ones,
    10% of the window with the default model."""
    result = ran[0]["result"]
    assert int(result.novel.sum()) == 100
    assert result.scores[result.novel].min() >= result.scores[~result.novel].max()


@pytest.mark.slow
def test_the_workers_flag_the_top_5_percent(ran: tuple[dict[str, Any], str]) -> None:
    """The comment's contrast: the plain Detector flags 10%, the workers' configuration 5%."""
    assert ran[0]["detector"].model.top_q == 0.1
    assert DetectorConfig().novel_top_q == 0.05


@pytest.mark.slow
def test_the_example_names_why_and_groups_the_flagged_documents(
    ran: tuple[dict[str, Any], str],
) -> None:
    """Its comments: ``novel_terms`` maps each flagged document to (term, mass) pairs, and
    ``similar_groups`` gives one story label per flagged document."""
    namespace, printed = ran
    result = namespace["result"]
    flagged = np.flatnonzero(result.novel)
    assert sorted(result.novel_terms) == flagged.tolist()
    assert all(
        pairs and all(isinstance(t, str) and w > 0 for t, w in pairs)
        for pairs in result.novel_terms.values()
    )
    assert printed.strip().splitlines()[1] == str(result.novel_terms)
    labels = namespace["similar_groups"](result.features[:, flagged], 0.5)
    assert labels.shape == flagged.shape and labels.max() < flagged.size
