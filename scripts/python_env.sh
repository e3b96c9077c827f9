#!/usr/bin/env bash
# installable_python ROOT: make the `python3` first on PATH one that pip may install into. That
# is python3 itself, unless it is a system interpreter marked externally managed (PEP 668: Debian
# 12's /usr/bin/python3 refuses `pip install` with "externally-managed-environment") outside any
# virtual environment; then ROOT/.venv, created once, is put first on PATH (and VIRTUAL_ENV set).
# Sourced by scripts/demo.sh and scripts/test.sh.

installable_python() {
  local root="$1"
  if python3 - <<'PY'
import os, sys, sysconfig
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(1 if os.path.exists(marker) and sys.prefix == sys.base_prefix else 0)
PY
  then
    return 0
  fi
  if [ ! -x "$root/.venv/bin/python3" ]; then
    echo "== $(command -v python3) is externally managed (PEP 668): installing into $root/.venv"
    python3 -m venv "$root/.venv" || {
      echo "error: could not create $root/.venv (Debian: apt-get install python3-venv)" >&2
      return 1
    }
  fi
  export VIRTUAL_ENV="$root/.venv"
  export PATH="$root/.venv/bin:$PATH"
}
