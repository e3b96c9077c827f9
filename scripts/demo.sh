#!/usr/bin/env bash
# The main job end to end on a fresh machine: install, then `sparsewatch demo` (starts the local
# Kafka broker when none answers, replays a generated stream through both workers, prints the top
# alerts and emerging topics from the database, and writes a PNG of novelty scores over time).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e .
# Without a configured broker the demo starts the local one, which needs Java and Maven; a failed
# install is not fatal here (a broker may answer at the default address: the demo says what it
# needs when it finds none).
if [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}${SPARSEWATCH_KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  source scripts/java_maven.sh
  java_and_maven || true
fi
exec sparsewatch demo "$@"
