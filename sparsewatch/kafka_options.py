"""Command-line options shared by the commands that talk to Kafka (``replay``, ``ingest``,
``run``, ``status``, ``db forget-group``): the broker, waiting for it, stopping when idle,
checked topic names, and which input fields make a document
(:class:`~sparsewatch.consumers.field_mapping.FieldMapping`)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import click
from confluent_kafka import KafkaError, KafkaException

from sparsewatch.cli_types import FiniteFloatRange, not_blank
from sparsewatch.config import topic_name_problem
from sparsewatch.consumers.field_mapping import FieldMapping
from sparsewatch.consumers.kafka_admin import admin_client, ensure_topics
from sparsewatch.consumers.kafka_client import SecurityErrors
from sparsewatch.consumers.kafka_connection_failures import FailedConnections
from sparsewatch.consumers.messages import MAX_STREAM_CHARS, InvalidMessageError, storable_string
from sparsewatch.errors import SparsewatchError

# librdkafka takes its timeouts as a C int of milliseconds: longer ones overflowed into "cannot
# reach Kafka" with the broker up.
MAX_TIMEOUT_S = 2_000_000.0
BOOTSTRAP_OPTION = click.option(
    "--bootstrap-servers",
    default=None,
    callback=not_blank,
    help="Kafka bootstrap (default: configuration).",
)
KAFKA_TIMEOUT_OPTION = click.option(
    "--kafka-timeout",
    type=FiniteFloatRange(min=0.1, max=MAX_TIMEOUT_S),
    default=5.0,
    show_default=True,
    help="Seconds to wait for the broker.",
)
CONNECT_TIMEOUT_OPTION = click.option(
    "--connect-timeout",
    type=FiniteFloatRange(min=0, min_open=True, max=MAX_TIMEOUT_S),
    default=15.0,
    show_default=True,
    help="Seconds to wait for the broker before giving up.",
)
UNTIL_IDLE_OPTION = click.option(
    "--until-idle",
    type=FiniteFloatRange(min=0.1),
    default=None,
    help="Stop after this many seconds without input (default: run until signalled).",
)
SUMMARY_JSON_OPTION = click.option(
    "--json", "as_json", is_flag=True, help="Print the summary as JSON."
)

_FIRST_SLICE_S = 0.25
"""The first slice of :func:`broker_topics`'s wait: a wrong password is refused within 0.3 s
of connecting to a local broker (then at the end of the second slice, 0.75 s in)."""
# what list_topics raises when no broker answered within its timeout: none usable, or no reply
_UNANSWERED = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT})


class KafkaUnreachableError(SparsewatchError):
    """The broker at ``bootstrap`` did not answer, or refused the client: ``why``."""

    def __init__(self, bootstrap: str, why: str) -> None:
        super().__init__(f"cannot reach Kafka at {bootstrap}: {why}")
        self.why = why


def broker_topics(bootstrap: str, timeout: float) -> set[str]:
    """The topics the broker has; a broker that does not answer within ``timeout``, or that
    refuses the client (a wrong password, an untrusted certificate: :class:`SecurityErrors`), is
    a one-line :class:`KafkaUnreachableError` (the probe runs with librdkafka's own logging off,
    so nothing else reaches stderr).

    The requests (:func:`_ask_in_slices`) run on a thread of their own while the caller waits
    for their outcome: a signal's handler (SIGTERM at ``run``'s start, Ctrl-C) runs at once,
    where it ran only between two requests, up to 16 s later with a broker that did not answer
    (a C call holds the thread that makes it: SIGTERM 18 s into ``run``'s start was obeyed 13 s
    later). The thread is a daemon: left to its requests when the caller gives up, it does not
    keep the process."""
    outcome: Future[set[str]] = Future()
    args = (outcome, bootstrap, timeout)
    threading.Thread(target=_settle, args=args, name="kafka-probe", daemon=True).start()
    return outcome.result()


def _settle(outcome: Future[set[str]], bootstrap: str, timeout: float) -> None:
    """Settle ``outcome`` with :func:`_ask_in_slices`'s topics, or with what it raised (whatever
    it is: the caller waits for ``outcome`` without a timeout)."""
    try:
        outcome.set_result(_ask_in_slices(bootstrap, timeout))
    except BaseException as exc:
        outcome.set_exception(exc)


@contextmanager
def reporting_admin_client(
    bootstrap: str,
) -> Iterator[tuple[Any, SecurityErrors, FailedConnections]]:
    """An admin client whose error callback records security refusals
    (:class:`SecurityErrors`) and connection failures (:class:`FailedConnections`), served by
    its polls; yields the client and both records."""
    errors = SecurityErrors()
    failed = FailedConnections()

    def on_error(err: KafkaError) -> None:
        errors(err)
        failed(err)

    with admin_client(bootstrap, error_cb=on_error) as admin:
        yield admin, errors, failed


def _ask_in_slices(bootstrap: str, timeout: float) -> set[str]:
    """:func:`broker_topics`'s requests. librdkafka reports a refusal only to the error callback,
    which a request waiting for its whole timeout left unserved (``run`` said so after 30 s): the
    request is made in slices, from :data:`_FIRST_SLICE_S`, each twice as long as the last (a
    slow answer, a large or distant cluster's, still comes in: an answer that comes after its
    request's slice is lost), and a refusal reported meanwhile ends the wait at the end of its
    slice. When no broker answered within ``timeout``, the error names the connection failures
    reported meanwhile (:class:`FailedConnections`: a host that does not resolve, a refused
    connection), which the request's own error ("Broker transport failure") left unsaid.

    Those failures do not end the wait early, not even when no bootstrap host resolves: a broker
    starting with its clients (a container's, a Kubernetes service's name in DNS only once it
    is up) is neither resolved nor listening in the first seconds, and the wait is for it."""
    with reporting_admin_client(bootstrap) as (admin, errors, failed):
        deadline = time.monotonic() + timeout
        wait = _FIRST_SLICE_S
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            try:
                return set(admin.list_topics(timeout=min(wait, left)).topics)
            except Exception as exc:  # confluent-kafka raises several types: all said in one line
                why = errors.why(admin, str(exc))
                if errors.last or not _unanswered(exc):
                    raise KafkaUnreachableError(bootstrap, why) from None
                if left <= wait:  # no broker answered in time: its connection failures say why
                    if cause := failed.why():
                        why = f"{cause} ({exc.args[0].str()})"
                    raise KafkaUnreachableError(bootstrap, why) from None
            wait *= 2


def _unanswered(exc: Exception) -> bool:
    """Whether ``exc``, raised by ``list_topics``, says only that no broker answered in time."""
    return isinstance(exc, KafkaException) and exc.args[0].code() in _UNANSWERED


def create_missing_topics(bootstrap: str, partitions: dict[str, int], timeout: float) -> None:
    """Create the topics of ``partitions`` (name -> partition count) the broker lacks; a failure
    is a one-line error."""
    try:
        ensure_topics(bootstrap, partitions, timeout=timeout)
    except Exception as exc:  # as above
        raise SparsewatchError(f"cannot reach Kafka at {bootstrap}: {exc}") from None


def stream_id(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """``--stream``: a stream id the detector accepts (not blank, at most ``MAX_STREAM_CHARS``
    characters, no NUL character); a usage error otherwise."""
    if not value.strip():
        raise click.BadParameter("a stream id cannot be blank")
    if len(value) > MAX_STREAM_CHARS:
        raise click.BadParameter(f"a stream id has at most {MAX_STREAM_CHARS} characters")
    try:
        return storable_string(value, "stream")
    except InvalidMessageError as exc:
        raise click.BadParameter(exc.reason) from None


def topic_names(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
    """A topic option (one name, several, or none): names Kafka accepts; a usage error otherwise
    (the broker's refusal used to be reported as an unreachable broker)."""
    for name in value if isinstance(value, tuple) else (value,):
        problem = None if name is None else topic_name_problem(name)
        if problem:
            raise click.BadParameter(problem)
    return value


def source_topics(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
    """Topics to read: names Kafka accepts, or regular expressions starting with ``^``
    (librdkafka's pattern subscriptions); a usage error otherwise."""
    for name in value:
        if name.startswith("^"):
            try:
                re.compile(name)
            except re.error as exc:
                raise click.BadParameter(f"{name!r} is not a regular expression: {exc}") from None
            continue
        problem = topic_name_problem(name)
        if problem:
            raise click.BadParameter(problem)
    return value


def reads_topic(source: str, topic: str) -> bool:
    """Whether the source ``source`` (a name, or a ``^`` pattern) reads ``topic``."""
    if source.startswith("^"):
        return re.search(source, topic) is not None
    return source == topic


def text_field_names(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """``--text-field``: :func:`not_blank`, and no blank name among the alternatives of
    ``a|b`` (``'|'`` and ``'title|'`` passed, then every record, or every one without the first
    field, was rejected); a usage error otherwise."""
    for spec in not_blank(ctx, param, value):
        if any(not name.strip() for name in spec.split("|")):
            raise click.BadParameter(f"{spec!r}: a name between '|' cannot be blank", param=param)
    return value


_MAPPING_OPTIONS = (
    click.option(
        "--id-field",
        default=None,
        callback=not_blank,
        help="Field holding the document id (a.b: a nested field).",
    ),
    click.option(
        "--text-field",
        "text_fields",
        multiple=True,
        callback=text_field_names,
        help="Field(s) holding the text; repeat to join several (e.g. title and body); a|b: the "
        "first of a and b present.",
    ),
    click.option(
        "--timestamp-field",
        default=None,
        callback=not_blank,
        help="Field holding the event time: ISO-8601, an RFC 2822 date or a tweet's created_at, "
        "or epoch time (numbers).",
    ),
    click.option(
        "--timestamp-unit",
        type=click.Choice(["ms", "s"]),
        default="ms",
        show_default=True,
        help="What a numeric timestamp counts: epoch milliseconds or epoch seconds.",
    ),
    click.option(
        "--stream-field", default=None, callback=not_blank, help="Field holding the stream id."
    ),
    click.option(
        "--labels-field",
        default=None,
        callback=not_blank,
        help="Field holding labels (list or 'a;b').",
    ),
    click.option(
        "--stream",
        "default_stream",
        default="default",
        show_default=True,
        callback=stream_id,
        help="Stream id for records without one.",
    ),
)


def field_mapping_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The field-mapping options, in --help order; :func:`field_mapping` reads them."""
    for option in reversed(_MAPPING_OPTIONS):
        command = option(command)
    return command


def field_mapping(options: dict[str, Any]) -> FieldMapping:
    """The FieldMapping of the options :func:`field_mapping_options` added (popped from
    ``options``, a command's keyword arguments)."""
    return FieldMapping(
        id=options.pop("id_field"),
        text=options.pop("text_fields"),
        timestamp=options.pop("timestamp_field"),
        stream=options.pop("stream_field"),
        labels=options.pop("labels_field"),
        default_stream=options.pop("default_stream"),
        timestamp_unit_ms=1000 if options.pop("timestamp_unit") == "s" else 1,
    )
