"""``sparsewatch evaluate`` run in-process through the console entry point, and its JSONL input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sparsewatch.cli import main


def run_evaluate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """``sparsewatch evaluate ARGS`` through the console entry point: (status, stdout, stderr)."""
    monkeypatch.delenv("SPARSEWATCH_CONFIG", raising=False)
    monkeypatch.delenv("SPARSEWATCH_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["sparsewatch", "evaluate", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    code = exc.value.code
    assert isinstance(code, int)
    return code, out.out, out.err


def write_jsonl(path: Path, docs: list[dict]) -> Path:
    """``docs`` as a JSONL file at ``path`` (UTF-8, one document a line)."""
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    return path
