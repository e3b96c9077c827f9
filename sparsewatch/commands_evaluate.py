"""``sparsewatch evaluate``: offline novelty evaluation of a labelled corpus in time steps.

Wire it into the CLI with ``cli.add_command(evaluate)`` (group ``cli`` in ``sparsewatch.cli``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from sparsewatch.cli_types import command_config
from sparsewatch.config import MAX_INT64
from sparsewatch.errors import SparsewatchError

DEFAULT_METHODS = "online,batch,l2-batch,nn-exact,nn-lsh,detector"
# The longest synthetic stream: it is generated in memory (about 1.4 kB a document, 14 GB at
# this length), and 10**20 failed with "ValueError: Maximum allowed dimension exceeded", naming
# no option.
MAX_SYNTHETIC_DOCS = 10_000_000
# Counts of documents and steps are compared with numpy's 64-bit document positions (a --step of
# 2**63 failed with "OverflowError: Python int too large to convert to C long").
COUNT = click.IntRange(1, MAX_INT64)


# the options only the synthetic corpus reads, by parameter name
SYNTHETIC_ONLY = {"n_docs": "--docs", "kind": "--kind", "seed": "--seed"}


def _check_corpus_options(ctx: click.Context, corpus: str, path: Path | None) -> None:
    """A usage error for an option the corpus does not read: ``--path`` without ``--corpus``
    evaluated the synthetic stream, in silence, instead of the file; ``--docs``, ``--kind`` or
    ``--seed`` with a file were ignored."""
    if corpus == "synthetic" and path is not None:
        raise click.BadParameter(
            "the synthetic corpus is generated, not read (--corpus jsonl or reuters reads a file)",
            param_hint="'--path'",
        )
    if corpus == "synthetic":
        return
    for name, option in SYNTHETIC_ONLY.items():
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            raise click.BadParameter(
                f"only for --corpus synthetic, not {corpus}", param_hint=f"'{option}'"
            )


@click.command("evaluate")
@click.option(
    "--corpus",
    type=click.Choice(["synthetic", "reuters", "jsonl"]),
    default="synthetic",
    show_default=True,
    help="synthetic stream, Reuters-21578 JSONL(.gz), or any labelled JSONL or CSV (.gz) file.",
)
@click.option(
    "--path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Corpus file (reuters: default ../shared/data/reuters21578.jsonl.gz; jsonl: required).",
)
@click.option(
    "--warmup",
    type=COUNT,
    default=1000,
    show_default=True,
    help="Warm-up documents.",
)
@click.option(
    "--step",
    "step_size",
    type=COUNT,
    default=1000,
    show_default=True,
    help="Step size.",
)
@click.option("--max-steps", type=COUNT, default=7, show_default=True, help="Steps evaluated.")
@click.option(
    "--methods",
    default=DEFAULT_METHODS,
    show_default=True,
    help="Comma-separated method names; detector: the product's, as configured ([detector]).",
)
@click.option(
    "--docs",
    "n_docs",
    type=click.IntRange(1, MAX_SYNTHETIC_DOCS),
    default=8000,
    show_default=True,
    help="synthetic: stream length.",
)
@click.option(
    "--kind",
    type=click.Choice(["tweet", "news", "mixed"]),
    default="tweet",
    show_default=True,
    help="synthetic: document length.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, MAX_INT64),
    default=0,
    show_default=True,
    help="synthetic: seed.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for <corpus>.json and ROC/step PNGs (default: print JSON only).",
)
@click.pass_context
def evaluate(
    ctx: click.Context,
    corpus: str,
    path: Path | None,
    warmup: int,
    step_size: int,
    max_steps: int,
    methods: str,
    n_docs: int,
    kind: str,
    seed: int,
    out: Path | None,
) -> None:
    """Score a labelled corpus step by step; report ROC AUC, SRE and time per method."""
    _check_corpus_options(ctx, corpus, path)
    from sparsewatch.consumers.detector_core import build_models
    from sparsewatch.replay.eval_methods import SharedTfidf, build_methods
    from sparsewatch.replay.evaluate import (
        evaluate_corpus,
        load_jsonl,
        load_reuters,
        make_corpus,
        plot_results,
        to_json,
    )
    from sparsewatch.replay.synthetic import generate_stream

    names = [n.strip() for n in methods.split(",") if n.strip()]
    if not names:
        raise click.BadParameter("name at least one method", param_hint="'--methods'")
    # the configuration is read (and a bad one refused) as by every command; the product's
    # detector is evaluated as the workers would build it
    config = command_config(ctx)
    configured = build_models(config.detector).detector
    detector = {"features": configured.features, "model": configured.model}
    # unknown names are an error before the corpus is read
    evaluated = build_methods(names, {"detector": detector})
    if out is not None:
        # made before the run: a folder that cannot be made was an error only after all of it
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot create {str(out)!r}: {exc.strerror or exc}", param_hint="'--out'"
            ) from None
    if corpus == "synthetic":
        docs = generate_stream(n_docs, kind=kind, seed=seed)  # type: ignore[arg-type]
    elif corpus == "reuters":
        path = path or Path.cwd().parent / "shared" / "data" / "reuters21578.jsonl.gz"
        docs = load_reuters(path)
    else:
        if path is None:
            raise SparsewatchError("--corpus jsonl needs --path")
        docs = load_jsonl(path)
    data = make_corpus(corpus, docs, warmup, step_size, max_steps)
    synthetic = corpus == "synthetic"
    arguments: dict[str, Any] = {
        "corpus": corpus,
        "path": None if path is None else str(path.absolute()),
        "docs": n_docs if synthetic else None,
        "kind": kind if synthetic else None,
        "seed": seed if synthetic else None,
        "warmup": warmup,
        "step": step_size,
        "max_steps": max_steps,
        "methods": names,
        "detector": asdict(config.detector) if "detector" in names else None,
    }
    # what defines the run, in its JSON (runs with another --seed or --kind into one --out
    # wrote the same file with nothing telling them apart); "detector": the configuration's
    # [detector] section, which the product's detector is built from
    data.protocol["arguments"] = arguments
    result = evaluate_corpus(
        data, evaluated, SharedTfidf(), progress=lambda s: click.echo(s, err=True)
    )
    payload = to_json(result)
    if out is not None:
        (out / f"{corpus}.json").write_text(json.dumps(payload, indent=1))
        for png in plot_results(result, out / corpus):
            click.echo(f"wrote {png}", err=True)
    # (the stratified AUC first: the headline measure, benchmarks/novelty_quality.md)
    shown = ("stratified_auc_none", "stratified_auc_any", "pooled_auc_none", "pooled_auc_any")
    summary = {
        name: {k: m[k] for k in (*shown, "mean_auc_any")} | {"total_time_s": sum(m["time_s"])}
        for name, m in payload["methods"].items()
    }
    click.echo(json.dumps(payload if out is None else summary, indent=1))
