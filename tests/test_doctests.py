"""The docstring examples of the library modules run as doctests (DESIGN.md's River anchor:
examples a user can paste, kept true by the suite)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
import sparsewatch.consumers
import sparsewatch.models
import sparsewatch.replay


def _modules() -> list[str]:
    names = []
    for package in (sparsewatch.consumers, sparsewatch.models, sparsewatch.replay):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_the_estimators_have_examples() -> None:
    """Every public estimator of ``sparsewatch.models`` (and the per-window ``Detector``) shows
    its use in an Examples section."""
    from sklearn.base import BaseEstimator
    from sparsewatch.models.window_detector import Detector

    missing = (
        [] if ">>>" in (Detector.__doc__ or "") else ["sparsewatch.models.window_detector.Detector"]
    )
    for name in _modules():
        if not name.startswith("sparsewatch.models.") or name.rsplit(".", 1)[1].startswith("_"):
            continue
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and issubclass(obj, BaseEstimator)
                and obj.__module__ == name
                and not attr.startswith("_")
                and ">>>" not in (obj.__doc__ or "")
            ):
                missing.append(f"{name}.{attr}")
    assert not missing, f"estimators without a runnable example: {missing}"
