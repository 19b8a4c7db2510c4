"""`runs start --dry-run --preview N` and `pipelines start --dry-run --preview N`: a plan's
reward terms (each reinforcement stage's, for a pipeline) scored on N of its dataset's rows by a
preview task on the cluster, and what each term gave the reference answers, an empty completion
and the prompt, with the terms that look wrong flagged."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from akka_training.cli.output import emit, table
from akka_training.cli.state import state
from akka_training.core.errors import AkkaError, InvalidRequest

if TYPE_CHECKING:
    from akka_training.api.base import ResponseBody
    from akka_training.api.regrades import PipelinePreview
    from akka_training.api.tasks import TaskRecord

KINDS = ("reference", "empty", "prompt")


def preview_needs_dry_run(preview: int | None, dry_run: bool) -> None:
    """Refuse ``--preview`` without ``--dry-run``."""
    if preview is not None and not dry_run:
        raise InvalidRequest("--preview goes with --dry-run: add --dry-run.")


def show_previewed(
    checked: ResponseBody,
    previewed: ResponseBody,
    print_checked: Callable[[], None],
    print_previewed: Callable[[], None],
) -> None:
    """A dry run's answer with its reward preview, the one flow of `runs start` and
    `pipelines start`: under -o json|yaml one document, the dry run's with the preview under
    ``preview``; for people the dry run's words (not with -q), then the preview's."""
    if state.output != "text":
        emit({**checked.to_json(), "preview": previewed.to_json()}, lambda _: None)
        return
    if not state.quiet:
        print_checked()
        print()
    print_previewed()


def run_preview(plan: dict[str, Any], rows: int) -> TaskRecord:
    return follow(state.client().preview_reward(plan, rows))


def run_pipeline_preview(plan: dict[str, Any], rows: int) -> PipelinePreview:
    """The pipeline's preview, each stage's task followed to its end."""
    preview = state.client().preview_pipeline_reward(plan, rows)
    for stage in preview.stages:
        if stage.task is not None:
            stage.task = follow(stage.task, f"stage {stage.name}: ")
    return preview


def print_pipeline_preview(preview: PipelinePreview) -> None:
    for i, stage in enumerate(preview.stages):
        if i:
            print()
        if stage.task is None:
            print(f"Stage {stage.name} ({stage.method}): not previewed: it {stage.omitted}.")
            continue
        print(f"Stage {stage.name} ({stage.method}):")
        print_preview(stage.task)


def follow(task: TaskRecord, label: str = "") -> TaskRecord:
    client = state.client()
    for update in client.wait_task(task.id, timeout=600):
        task = update
        if state.output == "text" and not state.quiet:
            print(f"{label}preview {task.id}: {task.state}", file=sys.stderr, flush=True)
    if task.state != "SUCCEEDED":
        reason = task.failure or f"the task was {task.state}"
        raise AkkaError(f"The reward preview {task.state} (task {task.id}): {reason}")
    return task


def print_preview(task: TaskRecord) -> None:
    result = task.result or {}
    print(
        f"Reward preview on {result.get('rows')} rows ({result.get('withReference')} with a "
        "reference answer): each term's raw value, mean (min-max)"
    )
    rows = []
    for term in result.get("terms") or []:
        cells = []
        for kind in KINDS:
            v = term["values"].get(kind)
            cells.append("-" if v is None else f"{v['mean']:.2f} ({v['min']:.2f}-{v['max']:.2f})")
        rows.append([term["name"], f"{term['weight']:g}", *cells])
    table(["TERM", "WEIGHT", "REFERENCE", "EMPTY", "PROMPT"], rows)
    flagged = [(t["name"], f) for t in result.get("terms") or [] for f in t.get("flags", [])]
    print()
    if not flagged:
        print("No term looks wrong on these rows.")
    for name, flag in flagged:
        print(f"Flag: term {name!r} {flag}.")
    estimate = result.get("estimate")
    if estimate:
        print()
        print_estimate(estimate)


def print_estimate(e: dict[str, Any]) -> None:
    if e.get("unavailable"):
        print(f"No estimate of memory and step time: {e['unavailable']}.")
        return
    m = e["memory"]
    fits = e.get("fits")
    verdict = (
        ""
        if fits is None
        else f": {'fits within' if fits else 'does not fit in'} {e['deviceMemoryGib']:g} GiB"
    )
    print(
        f"Estimate: {_gib(m['totalGib'])} per GPU{verdict} (base weights {_gib(m['weightsGib'])}, "
        f"adapter {_gib(m['adapterGib'])}, activations {_gib(m['activationsGib'])})"
    )
    if e.get("stepSeconds") is not None:
        print(
            f"Estimate: {_seconds(e['stepSeconds'])} per policy update ({e['tokensPerStep']:,} tokens a step)"
        )
    print("The estimate rests on:")
    for line in e.get("restsOn") or []:
        print(f"  - {line}")


def _gib(value: float) -> str:
    return f"{value:.3g} GiB" if value >= 0.01 else f"{value * 1024:.3g} MiB"


def _seconds(value: float) -> str:
    return f"{value:.3g} s" if value >= 0.01 else f"{value * 1000:.3g} ms"
