"""`akka training evaluations`: score an adapter (or a base model) on a held-out dataset, read
its metrics and samples, and compare two evaluations."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import typer
import yaml

from akka_training.cli.arguments import EVALUATION
from akka_training.cli.output import confirm, details, emit, say, section, table, when
from akka_training.cli.state import state
from akka_training.cli.training.runs import read_plan
from akka_training.core.errors import InvalidRequest

if TYPE_CHECKING:
    from akka_training.api.evaluations import (
        EvaluationComparison,
        EvaluationRecord,
        EvaluationSamples,
        MetricComparison,
        MetricValue,
    )

app = typer.Typer(
    help="Score adapters on held-out datasets and compare the scores.", no_args_is_help=True
)


@app.command()
def start(
    file: str = typer.Option(
        ..., "-f", "--file", help="The evaluation plan (YAML or JSON); - reads stdin."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check everything, start nothing."),
    show_resolved: bool = typer.Option(
        False, "--show-resolved", help="With --dry-run: print the resolved parameters."
    ),
    wait_: bool = typer.Option(False, "--wait", help="Wait for the evaluation to end."),
) -> None:
    """Submit an evaluation plan (kind: evaluation), or check it with --dry-run."""
    plan = read_plan(file)
    client = state.client()
    if dry_run:
        checked = client.check_evaluation(plan)
        if state.output != "text":
            emit(checked, lambda _: None)
        elif show_resolved:
            sys.stdout.write(yaml.safe_dump(checked.resolved, sort_keys=False))
        else:
            say("The evaluation plan is valid; nothing was started.")
        return
    evaluation = client.start_evaluation(plan)
    if not wait_:
        emit(evaluation, lambda e: say(f"Evaluation started: {e.id}", e.id))
        return
    say(f"Evaluation started: {evaluation.id}")
    _wait(evaluation.id, None, False)


@app.command("list")
def list_evaluations(
    project: str = typer.Option(None, "--project"),
    limit: int = typer.Option(100, "--limit", min=1),
) -> None:
    """Evaluations, newest first."""
    emit(state.client().evaluations(project, limit), _print_list)


@app.command()
def get(evaluation: str = EVALUATION) -> None:
    """An evaluation: what it scores, its state, and each metric with its 95% interval."""
    emit(state.client().evaluation(evaluation), _print_evaluation)


@app.command()
def wait(
    evaluation: str = EVALUATION,
    exit_status: bool = typer.Option(
        False, "--exit-status", help="Exit 1 unless the evaluation succeeds."
    ),
    timeout: float = typer.Option(None, "--timeout", help="Give up after this many seconds."),
) -> None:
    """Follow an evaluation until it ends, then print its metrics."""
    _wait(evaluation, timeout, exit_status)


@app.command()
def cancel(evaluation: str = EVALUATION) -> None:
    """Cancel an evaluation (its job is stopped). On a terminal it asks first; --force does not."""
    confirm(f"Cancel evaluation {evaluation}?")
    emit(
        state.client().cancel_evaluation(evaluation),
        lambda e: say(_cancelled(e.id, e.requested, e.state), e.id),
    )


@app.command()
def results(
    evaluation: str = EVALUATION,
    best: bool = typer.Option(False, "--best", help="Best first (the default is worst first)."),
    metric: str = typer.Option(None, "--metric", help="Order by this metric instead of score."),
    limit: int = typer.Option(10, "--limit", min=1, help="How many samples."),
) -> None:
    """The evaluation's scored samples, worst (or best) first."""
    answer = state.client().evaluation_samples(
        evaluation, "best" if best else "worst", metric, limit
    )
    emit(answer, _print_samples)


@app.command()
def compare(a: str = EVALUATION, b: str = EVALUATION) -> None:
    """Two evaluations' metrics side by side, B minus A, and whether it is beyond noise."""
    emit(state.client().compare_evaluations(a, b), _print_comparison)


def _wait(evaluation: str, timeout: float | None, exit_status: bool) -> None:
    last: EvaluationRecord | None = None
    for record in state.client().wait_evaluation(evaluation, timeout=timeout):
        last = record
        if state.output == "json":
            print(json.dumps(record.to_json()), flush=True)
        elif state.output == "text" and not state.quiet:
            progress = f": {record.progress.message}" if record.progress else ""
            print(f"{record.state}{progress}", file=sys.stderr, flush=True)
    if last is None:
        raise InvalidRequest("The trainer answered nothing about the evaluation.")
    if state.output == "yaml":
        sys.stdout.write(yaml.safe_dump(last.to_json(), sort_keys=False))
    elif state.output == "text":
        _print_evaluation(last)
    if exit_status and last.state != "SUCCEEDED":
        raise typer.Exit(1)


def _print_list(rows: list[EvaluationRecord]) -> None:
    if state.quiet:
        for e in rows:
            print(e.id)
        return
    table(
        ["EVALUATION", "PROJECT", "NAME", "MODEL", "SOURCE", "DATASET", "STATE", "CREATED"],
        [
            [
                e.id,
                e.project,
                e.name,
                e.base_model,
                _source(e),
                e.dataset,
                e.state,
                when(e.created_at),
            ]
            for e in rows
        ],
    )


def _source(e: EvaluationRecord) -> str:
    if e.source is None:
        return "base model"
    return e.source.run + (f" @{e.source.snapshot}" if e.source.snapshot else "")


def _print_evaluation(e: EvaluationRecord) -> None:
    rows = [
        ("Evaluation", e.id),
        ("Name", e.name),
        ("Project", e.project),
        ("State", e.state + (f" ({e.requested} requested)" if e.requested else "")),
        ("Base model", e.base_model),
        ("Source", _source(e)),
        ("Dataset", e.dataset),
        ("Devices", f"{e.gpus} of pool {e.pool}" + (f" ({e.claim})" if e.claim else "")),
        ("Samples", e.sample_count),
        ("Generated by", e.engine),
        ("Progress", e.progress.message if e.progress and e.state == "RUNNING" else None),
        ("Created", when(e.created_at)),
        ("Ended", when(e.ended_at)),
    ]
    if e.queue:
        rows.append(("Waiting for", "; ".join(e.queue.waiting_for)))
    if e.failure:
        rows.append(("Failure", e.failure))
    details(rows)
    if e.metrics:
        section("Metrics (95% confidence interval)")
        table(
            ["METRIC", "KIND", "MEAN", "INTERVAL", "N"],
            [[m.name, m.kind, _n(m.mean), _interval(m), m.count] for m in e.metrics],
        )
        for m in e.metrics:
            if m.reference:
                print(f"{m.name} is measured against {m.reference}.")


def _print_samples(answer: EvaluationSamples) -> None:
    print(f"{answer.order.capitalize()} {len(answer.samples)} of {answer.total} samples")
    for s in answer.samples:
        values = ", ".join(f"{k}={_n(v)}" for k, v in s.get("values", {}).items())
        print(f"\nrow {s['index']} sample {s['sample']}  score {_n(s['score'])}  {values}")
        print(f"  prompt:     {s['prompt']}")
        print(f"  completion: {s['completion']}")
        print(f"  expected:   {s['expected']}")
        for term, cause in s.get("failures", {}).items():
            print(f"  {term} failed ({cause}): {s.get('explanations', {}).get(term, '')}")


def _print_comparison(c: EvaluationComparison) -> None:
    rows = []
    for m in c.metrics:
        noise = None
        if m.beyond_noise is not None:
            noise = "yes" if m.beyond_noise else "no (within noise)"
        difference = None if m.difference is None else f"{m.difference:+.4g}"
        rows.append(
            [
                m.name,
                _value(m.a),
                _value(m.b),
                difference,
                noise,
            ]
        )
    table(["METRIC", f"A {c.a}", f"B {c.b}", "B - A", "BEYOND NOISE"], rows)
    for m in c.metrics:
        note = _references(m)
        if note:
            print(note)


def _references(m: MetricComparison) -> str | None:
    """What a preference metric's two values were measured against, and a warning when the
    two differ (each is a share against its own reference, not one scale)."""
    a = m.a.reference if m.a else None
    b = m.b.reference if m.b else None
    if a is None and b is None:
        return None
    if a == b:
        return f"{m.name}: both measured against {a}."
    return (
        f"{m.name}: A is measured against {a or '-'}, B against {b or '-'}: each value is the "
        "share of pairs its model ranks better than its own reference does. To put both on one "
        "scale, evaluate both with reference: base-model."
    )


def _value(m: MetricValue | None) -> str | None:
    return None if m is None else f"{_n(m.mean)} {_interval(m)}"


def _interval(m: MetricValue) -> str:
    return f"[{_n(m.low)}, {_n(m.high)}]"


def _n(value: float) -> str:
    return f"{value:.4g}"


def _cancelled(evaluation: str, requested: str | None, task_state: str) -> str:
    """What `evaluations cancel` answers, as a sentence."""
    if requested == "cancel":
        return f"Evaluation {evaluation}: cancel requested; its job is being stopped."
    return f"Evaluation {evaluation} is {task_state}: there was nothing left to cancel."
