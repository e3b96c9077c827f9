"""scripts/python_env.sh, which scripts/demo.sh and scripts/test.sh source before ``pip install``:
on a system Python marked externally managed (PEP 668; Debian 12's /usr/bin/python3) both main
commands failed at their first step with "externally-managed-environment". Such an interpreter
gets a virtual environment in the checkout; any other python3 is used as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _externally_managed(python: Path) -> bool:
    probe = (
        "import os, sysconfig; print(os.path.exists(os.path.join("
        "sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"
    )
    return (
        subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout.strip()
        == "True"
    )


def _python_after(root: Path, python_dir: Path) -> tuple[str, str]:
    """(python3's sys.prefix, VIRTUAL_ENV) after ``installable_python root`` with the python3
    of ``python_dir`` first on PATH."""
    steps = (
        f"source {ROOT / 'scripts/python_env.sh'}\n"
        f"installable_python {root} >/dev/null\n"
        "python3 -c 'import sys; print(sys.prefix)'\n"
        'echo "${VIRTUAL_ENV:-}"'
    )
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = f"{python_dir}:{env['PATH']}"
    done = subprocess.run(
        ["bash", "-c", steps], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    prefix, venv = done.stdout.splitlines()
    return prefix, venv


@pytest.mark.skipif(
    not SYSTEM_PYTHON.exists() or not _externally_managed(SYSTEM_PYTHON),
    reason="needs an externally managed system python3 (Debian 12's)",
)
def test_an_externally_managed_python_gets_a_virtual_environment_that_pip_installs_into(
    tmp_path: Path,
) -> None:
    prefix, venv = _python_after(tmp_path, SYSTEM_PYTHON.parent)
    assert Path(prefix) == tmp_path / ".venv" and venv == str(tmp_path / ".venv")
    pip = subprocess.run(
        [tmp_path / ".venv/bin/python3", "-m", "pip", "install", "--dry-run", "--no-index",
         "sparsewatch-no-such-package"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    # (past PEP 668's check: pip looks for the package)
    assert "externally-managed-environment" not in pip.stderr
    assert "No matching distribution" in pip.stderr, pip.stderr
    again = _python_after(tmp_path, SYSTEM_PYTHON.parent)  # created once, used again
    assert again == (prefix, venv)


def test_a_python_that_may_install_is_used_as_it_is(tmp_path: Path) -> None:
    prefix, venv = _python_after(tmp_path, Path(sys.executable).parent)
    assert prefix == sys.prefix and venv == "" and not (tmp_path / ".venv").exists()
