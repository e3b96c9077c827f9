"""``sparsewatch run`` (the workers) and ``sparsewatch demo`` (everything end to end)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sparsewatch.cli_types import command_config, not_blank
from sparsewatch.config import MAX_INT64, Config
from sparsewatch.kafka_options import UNTIL_IDLE_OPTION
from sparsewatch.logs import setup_logging

if TYPE_CHECKING:
    from sparsewatch.demo import DemoResult


# (shared with `ingest`; a blank address is a usage error: it would mean every interface)
METRICS_ADDRESS_OPTION = click.option(
    "--metrics-address",
    default=None,
    callback=not_blank,
    help="The address the metrics and probes are served on: an IPv4 or IPv6 address or a host "
    "name (0.0.0.0 or :: for every interface; overrides metrics_address, default 127.0.0.1).",
)


@click.command()
@click.argument("role", type=click.Choice(["detector", "anomaly", "all"]))
@UNTIL_IDLE_OPTION
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics and the /healthz and /readyz probes on port PORT of "
    "metrics_address (127.0.0.1 by default; overrides metrics_port).",
)
@METRICS_ADDRESS_OPTION
@click.pass_context
def run(
    ctx: click.Context,
    role: str,
    until_idle: float | None,
    metrics_port: int | None,
    metrics_address: str | None,
) -> None:
    """Run the detector worker, the anomaly worker, or both.

    With --until-idle, `all` stops the anomaly worker only once the detector has stopped and its
    scores have been read."""
    from sparsewatch.runner import run_workers

    config = command_config(ctx)
    if metrics_port is not None:
        config.metrics_port = metrics_port
    if metrics_address is not None:
        config.metrics_address = metrics_address
    setup_logging(config.log_level)
    roles = ["detector", "anomaly"] if role == "all" else [role]
    # SIGTERM and SIGINT since the program started, before the workers' own handlers
    # (sparsewatch.cli.EarlySignals; none in-process, where no handler was set)
    early = ctx.obj.get("early_signals")
    run_workers(config, roles, until_idle, early.received if early is not None else [])


# The demo holds its generated stream and, for the plot, every stored document in memory
# (about 1 kB each) and processes some 1,500 documents/s on 2 cores: this many take about 3
# minutes; a larger stream is a job for `replay` and `run`.
MAX_DEMO_DOCS = 200_000


@click.command()
@click.option(
    "--documents",
    type=click.IntRange(500, MAX_DEMO_DOCS),
    default=4000,
    show_default=True,
    help="Documents in the generated stream.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    callback=not_blank,
    help="Folder for the demo database and plot (default: DATA_DIR/demo).",
)
@click.option(
    "--top",
    type=click.IntRange(1, MAX_INT64),
    default=10,
    show_default=True,
    help="Alerts to print per kind.",
)
@click.pass_context
def demo(ctx: click.Context, documents: int, out: str | None, top: int) -> None:
    """Replay a generated stream through Kafka and the workers; print alerts and topics.

    The anomaly worker runs unless ``anomaly.enabled`` is false.
    """
    from sparsewatch.demo import demo_folder, run_demo

    config = command_config(ctx)
    # Small windows and a short idle close so a few thousand documents make a lively demo.
    config.windows.size = "1h" if config.windows.size == "1d" else config.windows.size
    config.windows.idle_timeout_s = min(config.windows.idle_timeout_s, 3.0)
    setup_logging("WARNING")
    out_dir = Path(out) if out else config.data_path() / "demo"
    with demo_folder(out_dir):  # until its results are printed: another demo would replace them
        click.echo(f"replaying {documents} generated documents through Kafka ...")
        result = run_demo(config, documents, out_dir)
        _print_demo(config, result, top)


def _print_demo(config: Config, result: DemoResult, top: int) -> None:
    """The demo's top ``top`` alerts of each kind, dead letters, and where its results are."""
    from sparsewatch.storage.store import Store

    kinds = ["novel_document", "emerging_topic"]
    if config.anomaly.enabled:
        kinds.append("anomaly")
    with Store.open(result.database_url) as store:
        for kind in kinds:
            alerts = store.alerts(kinds=[kind], limit=None)
            alerts.sort(key=lambda a: -(a["score"] or 0.0))
            click.echo(f"\n== top {kind} alerts ({len(alerts)} in total)")
            if kind == "anomaly" and not alerts:
                click.echo(
                    f"  (none: the anomaly worker fits DL-OCSVM on its first "
                    f"{config.anomaly.reference_documents} documents, anomaly.reference_documents,"
                    " then scores those after them)"
                )
            for a in alerts[:top]:
                subject = a["subject_id"]
                if kind == "emerging_topic":  # the W of the `documents --window W` hint below
                    subject = f"{subject} window {a['window_seq']}"
                click.echo(f"  {a['score']:8.4f}  {subject:<28} {a['summary'][:90]}")
                if kind == "novel_document" and a["terms"]:  # why, and the story's size
                    more = a["n_documents"] - 1
                    story = f" (and {more} more of this story in its window)" if more else ""
                    new = ", ".join(t for t, _ in a["terms"])
                    click.echo(f"{'':12}new: {new}{story}")
                if kind == "emerging_topic":  # two of its documents, as --topic lists them
                    topic = int(a["subject_id"].removeprefix("topic-"))
                    for d in store.documents(
                        streams=[a["stream"]], window_seq=a["window_seq"], topic=topic, limit=2
                    ):
                        click.echo(f"{'':12}{' '.join(d['text'].split())[:98]}")
        n_docs = sum(s["documents"] for s in store.status()["streams"])
        reasons = store.dead_letter_reasons(limit=None)
    click.echo(f"\n== dead letters by reason ({sum(r['count'] for r in reasons)} in total)")
    for r in reasons:
        click.echo(f"  {r['count']:8d}  {r['reason'][:100]}")
    if not config.anomaly.enabled:
        click.echo(
            "\n== no anomaly alerts: the anomaly worker is disabled (anomaly.enabled = false)"
        )
    click.echo(
        f"\n{n_docs} documents stored, {result.n_malformed} malformed messages sent to the "
        f"dead-letter topic, {result.seconds:.0f}s in all"
    )
    click.echo(f"database: {result.database_url}")
    click.echo(
        f"documents of emerging topic topic-ID of window W: sparsewatch documents --database-url "
        f"{result.database_url} --window W --topic ID"
    )
    click.echo(f"refused messages: sparsewatch dead-letters --database-url {result.database_url}")
    click.echo(f"overview: sparsewatch status --database-url {result.database_url} --no-kafka")
    click.echo(f"topics:   {result.topic_prefix}.docs / .scores / .alerts / .dlq")
    click.echo(f"plot:     {result.plot}")
