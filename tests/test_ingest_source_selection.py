"""``sparsewatch ingest``'s sources, against a real broker (consumers/ingest.py).

* a bridge restarted in its group with other sources reads the sources it was given, not its
  predecessor's: its static group membership is per set of sources (the broker hands a static
  member that rejoins its old assignment, whatever it now subscribes to);
* a ``^`` source that librdkafka (POSIX extended regular expressions) refuses or reads otherwise
  than Python's ``re`` is a one-line usage error (sparsewatch/commands_ingest.py).
"""

from __future__ import annotations

import json
from dataclasses import replace

from sparsewatch.consumers.ingest import run_ingest
from sparsewatch.consumers.messages import parse_document
from sparsewatch.consumers.retry import StopFlag

from tests.support.ingest_kafka import (
    TWEET_FIELDS,
    TWEETS,
    cli,
    create,
    make_route,
    make_tweet,
    prepare,
    produce,
    read_all,
)


def test_a_bridge_restarted_with_other_sources_reads_them_not_its_predecessors(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """Bridge instance 0 of a group reads topic A and stops; the same instance is started at
    once on topic B. The broker gave the rejoining static member its old assignment (A's
    partitions) without a rebalance, so the second bridge forwarded A's new records, which it was
    not told to read, and none of B's, and ``--until-idle`` stopped it having read nothing from B.
    It now reads B (once the first bridge's session has ended) and nothing of A."""
    route_a = make_route(kafka_bootstrap, topic_name)
    prepare(route_a)
    source_b = f"{topic_name}-other"
    create(kafka_bootstrap, source_b, 2)
    route_b = replace(route_a, source_topics=(source_b,))

    first = [make_tweet(i, "en") for i in range(50)]
    produce(
        kafka_bootstrap, route_a.source_topics[0], [(b"", json.dumps(t).encode()) for t in first]
    )
    assert run_ingest(route_a, TWEETS, StopFlag(), until_idle_s=1.0).forwarded == len(first)

    later_a = [make_tweet(i, "en") for i in range(50, 80)]
    wanted = [make_tweet(i, "de") for i in range(100, 160)]
    produce(
        kafka_bootstrap, route_a.source_topics[0], [(b"", json.dumps(t).encode()) for t in later_a]
    )
    produce(kafka_bootstrap, source_b, [(b"", json.dumps(t).encode()) for t in wanted])
    stats = run_ingest(route_b, TWEETS, StopFlag(), until_idle_s=2.0)

    assert (stats.read, stats.forwarded) == (len(wanted), len(wanted))
    docs = read_all(kafka_bootstrap, route_a.docs_topic, len(first) + len(wanted))
    ids = sorted(parse_document(m.value(), 100_000).id for m in docs)
    assert ids == sorted(t["id_str"] for t in first + wanted)


def test_a_pattern_librdkafka_reads_otherwise_is_a_one_line_usage_error(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """librdkafka reads a ``^`` source as a POSIX extended regular expression, not as Python's
    ``re`` (which checked it): ``(?:...)`` and ``(?!...)`` passed the check and then stopped the
    bridge with a bare ``KafkaException: ... Invalid argument``, and ``\\d`` (a plain ``d``
    there) passed too, and the bridge read nothing, for ever, without a word (``--until-idle``
    never stopped it: the topic matched by Python's reading existed). Both are one-line usage
    errors now; the POSIX forms of the same patterns are accepted and read."""
    create(kafka_bootstrap, f"{topic_name}-7", 1)
    at = ["--bootstrap-servers", kafka_bootstrap, "--no-database", "--until-idle", "1"]
    for pattern, message in (
        (f"^{topic_name}-\\d+", "\\d is not what it is in Python (a plain d there: write [0-9])"),
        (f"^{topic_name}-[\\d]", "\\d"),
        (f"^{topic_name}-\\t", "\\t is not what it is in Python (a plain t there)"),
        (f"^{topic_name}-[[:digit:]]+", "[:digit:] is not what it is in Python (a class there"),
        (f"^[[:alpha:]]{topic_name}", "[:alpha:] is not what it is in Python (a class there"),
        (f"^(?:{topic_name})-7", "POSIX extended"),
        (f"^{topic_name}-7(?!0)", "POSIX extended"),
    ):
        proc = cli(*at, "--from-topic", pattern)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (pattern, proc.stderr)
        assert "--from-topic" in lines[0] and message in lines[0], (pattern, lines[0])
    produce(kafka_bootstrap, f"{topic_name}-7", [(b"", json.dumps(make_tweet(1, "en")).encode())])
    for n, pattern in enumerate(
        (f"^{topic_name}-[0-9]+$", f"^({topic_name})-\\w", f"^{topic_name}\\-7")
    ):
        proc = cli(
            *at,
            *("--from-topic", pattern, "--group", f"{topic_name}-{n}", "--json"),
            *TWEET_FIELDS,
            SPARSEWATCH_KAFKA_TOPIC_PREFIX=topic_name,
        )
        assert proc.returncode == 0, (pattern, proc.stderr)
        assert json.loads(proc.stdout)["forwarded"] == 1, (pattern, proc.stdout)


def test_a_source_given_twice_is_read_once_and_an_internal_topic_is_no_destination(
    kafka_bootstrap: str, topic_name: str
) -> None:
    """``--from-topic T --from-topic T`` (a script joining its lists) stopped the bridge with a
    bare ``KafkaException: Failed to set subscription: ... Invalid argument`` (librdkafka refuses
    a topic twice in one subscription): it reads T once. ``--to-topic __consumer_offsets`` ran
    until its first transaction failed with a fatal ``INVALID_TXN_STATE``: a usage error, as for
    a source."""
    route = make_route(kafka_bootstrap, topic_name)
    prepare(route, source_partitions=1)
    source = route.source_topics[0]
    produce(
        kafka_bootstrap, source, [(b"", json.dumps(make_tweet(i, "en")).encode()) for i in range(5)]
    )
    at = ("--bootstrap-servers", kafka_bootstrap, "--no-database", "--group", route.group_id)
    proc = cli(
        *at,
        *("--from-topic", source, "--from-topic", source, "--to-topic", route.docs_topic),
        *TWEET_FIELDS,
        *("--until-idle", "1", "--json"),
        SPARSEWATCH_KAFKA_TOPIC_PREFIX=topic_name,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["forwarded"] == 5
    for internal in ("__consumer_offsets", "__transaction_state"):
        proc = cli(*at, "--from-topic", source, "--to-topic", internal)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert f"--to-topic {internal} is Kafka's internal topic" in lines[0]
