#!/usr/bin/env bash
# The main job end to end on a fresh machine: install, then `sparsewatch demo` (starts the local
# Kafka broker when none answers, replays a generated stream through both workers, prints the top
# alerts and emerging topics from the database, and writes a PNG of novelty scores over time).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e .
exec sparsewatch demo "$@"
