#!/usr/bin/env bash
# The whole test suite against real services: installs the project with its dev extras, starts
# PostgreSQL and the local Kafka broker, runs ruff, mypy (scripts/typecheck.sh) and pytest, and always stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/python_env.sh
installable_python "$PWD"
python3 -m pip install -q --disable-pip-version-check -e '.[dev]'
source scripts/services.sh
trap services_down EXIT
services_up

ruff check .
bash scripts/typecheck.sh
python3 -m pytest "$@"
