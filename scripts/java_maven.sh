#!/usr/bin/env bash
# java_and_maven: make sure `java` (17+) and `mvn` are on PATH for the local Kafka broker (run on
# Java, fetched from Maven Central by Maven), installing Debian's packages when they are missing
# (default-jre-headless is OpenJDK 17 on bookworm), as scripts/services.sh installs PostgreSQL.
# Sourced by scripts/services.sh and scripts/demo.sh.

java_and_maven() {
  command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 && return 0
  echo "== installing Java and Maven from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq default-jre-headless maven >/dev/null \
    || { echo "error: could not install Java and Maven (apt-get)" >&2; return 1; }
}
