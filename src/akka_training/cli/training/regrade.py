"""`akka training runs regrade`: a run's kept rollouts scored again with another reward
definition, as a task on the trainer's cluster, and each step's old and new figures side by
side. Registered on the `runs` group."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import typer

from akka_training.cli.arguments import RUN
from akka_training.cli.output import emit, table
from akka_training.cli.state import state
from akka_training.cli.training.runs import read_document
from akka_training.cli.training.task_follow import follow_task
from akka_training.core.errors import InvalidRequest

if TYPE_CHECKING:
    from akka_training.api.tasks import TaskRecord

_STEPS = re.compile(r"^\s*(\d+)?\s*(-)?\s*(\d+)?\s*$")


def regrade(
    run: str = RUN,
    reward: str = typer.Option(
        ...,
        "--reward",
        help="The new reward (YAML or JSON): what a plan's config.reward holds (terms, "
        "maxConcurrency), or a whole run plan, whose config.reward is taken.",
    ),
    steps: str = typer.Option(
        None, "--steps", help="The steps to regrade: N, A-B, A- or -B (default: every kept step)."
    ),
    timeout: float = typer.Option(
        None, "--timeout", help="Give up waiting for the regrade after this many seconds."
    ),
) -> None:
    """Score a run's kept rollouts again with another reward, and compare.

    The scoring runs as a task on the training cluster; the run is not changed. Prints per
    step the old and new reward mean and each term's mean share; the result stays readable
    with `akka training tasks get TASK -o json`."""
    first, last = parse_steps(steps)
    document = read_reward(reward)
    client = state.client()
    task = client.regrade_run(run, document, first, last)
    task = follow_task(
        client,
        task,
        f"The regrade of run {run}",
        timeout,
        lambda p: f"{p.done or 0:g} of {p.total or 0:g} steps",
    )
    emit(task, print_regrade)


def read_reward(path: str) -> dict[str, Any]:
    """The reward a file holds: a reward itself, or a plan's config.reward."""
    document = read_document(path)
    if not isinstance(document, dict):
        raise InvalidRequest(
            f"{path} does not hold a reward (a mapping with terms, as a plan's config.reward)."
        )
    config = document.get("config")
    if isinstance(config, dict):
        if not isinstance(config.get("reward"), dict):
            raise InvalidRequest(f"{path} is a plan without config.reward: it holds no reward.")
        return dict(config["reward"])
    if isinstance(document.get("reward"), dict):
        return dict(document["reward"])
    return document


def parse_steps(text: str | None) -> tuple[int | None, int | None]:
    if text is None:
        return None, None
    match = _STEPS.match(text)
    if not match or not (match.group(1) or match.group(3)):
        raise typer.BadParameter(
            f"give a step or a range of steps (N, A-B, A- or -B), not {text!r}.",
            param_hint="'--steps'",
        )
    first = int(match.group(1)) if match.group(1) else None
    last = int(match.group(3)) if match.group(3) else None
    if not match.group(2):
        return first, first
    return first, last


def print_regrade(task: TaskRecord) -> None:
    result = task.result or {}
    old_weights: dict[str, float] = result.get("oldWeights") or {}
    new_weights: dict[str, float] = result.get("newWeights") or {}
    terms = list(old_weights) + [n for n in new_weights if n not in old_weights]
    print(f"Regrade of run {task.run} (task {task.id}): old and new reward, mean per rollout")
    print(f"  old weights: {_weights(old_weights)}")
    print(f"  new weights: {_weights(new_weights)}")
    print()
    headers = ["STEP", "ROLLOUTS", "OLD MEAN", "NEW MEAN", *(f"{t} (old -> new)" for t in terms)]
    rows = []
    for s in result.get("steps") or []:
        cells = [
            f"{_share(s['oldShares'], t)} -> {_share(s['newShares'], t)}"
            + (f" ({s['newFailures'][t]} failed)" if s.get("newFailures", {}).get(t) else "")
            for t in terms
        ]
        rows.append([s["step"], s["count"], f"{s['oldMean']:.3f}", f"{s['newMean']:.3f}", *cells])
    table(headers, rows)
    print()
    print(
        f"All steps: {result.get('oldMean', 0.0):.3f} -> {result.get('newMean', 0.0):.3f}. "
        f"The new rollouts are kept under {result.get('output')}; the run is unchanged."
    )
    print(f"Read this again with `akka training tasks get {task.id} -o json`.")


def _share(shares: dict[str, float], term: str) -> str:
    return f"{shares[term]:.3f}" if term in shares else "-"


def _weights(weights: dict[str, float]) -> str:
    return ", ".join(f"{n} {w:g}" for n, w in weights.items()) or "-"
