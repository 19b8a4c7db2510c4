"""`akka training runs`: start, read and steer runs."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer
import yaml

from akka_training.cli.arguments import RUN
from akka_training.cli.output import (
    confirm,
    details,
    duration,
    emit,
    human_bytes,
    say,
    section,
    table,
    when,
)
from akka_training.cli.state import state
from akka_training.cli.training.rollouts import print_rollouts
from akka_training.cli.training.task_follow import follow_task
from akka_training.cli.training.verification import print_verification, verification_of
from akka_training.cli.watching import Watcher
from akka_training.core.errors import InvalidRequest
from akka_training.core.limits import MAX_PLAN_BYTES
from akka_training.core.safe_yaml import load_document

if TYPE_CHECKING:
    from akka_training.api.runs import (
        DryRun,
        Health,
        MemorySplit,
        Metrics,
        Preference,
        Progress,
        RunEndLine,
        RunRecord,
        RunSummary,
        Snapshot,
        TreeNode,
    )

app = typer.Typer(help="Start, watch, pause, resume and branch runs.", no_args_is_help=True)


def read_plan(path: str) -> dict[str, Any]:
    """The plan in a file (or ``-``: standard input), read with the limits of
    `core.safe_yaml` (no duplicate keys, no alias bombs, no .nan)."""
    data = read_document(path)
    if not isinstance(data, dict):
        raise InvalidRequest(f"{path} does not hold a plan (a mapping with kind: run).")
    return data


def read_document(path: str) -> Any:
    """What a YAML or JSON file (or ``-``) holds, under the limits of `core.safe_yaml`."""
    return load_document(_read_bytes(path), path)


def _read_bytes(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read(MAX_PLAN_BYTES + 1)
    try:
        with Path(path).open("rb") as f:
            # One byte past the limit is enough to refuse a file too large.
            return f.read(MAX_PLAN_BYTES + 1)
    except OSError as exc:
        raise InvalidRequest(f"Cannot read {path}: {exc.strerror}.") from exc


@app.command()
def start(
    file: str = typer.Option(
        ..., "-f", "--file", help="The run plan (YAML or JSON); - reads stdin."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check everything, start nothing."),
    show_resolved: bool = typer.Option(
        False, "--show-resolved", help="Print the settings the run trains under."
    ),
    wait_: bool = typer.Option(False, "--wait", help="Wait for the run to end."),
    exit_status: bool = typer.Option(
        False, "--exit-status", help="With --wait: exit 1 unless the run completes."
    ),
    preview: int = typer.Option(
        None,
        "--preview",
        min=1,
        help="With --dry-run: score N dataset rows' reference answers, an empty completion "
        "and the prompt with the reward terms (a short task), and flag terms that look wrong.",
    ),
) -> None:
    """Submit a run plan (or check it with --dry-run)."""
    plan = read_plan(file)
    if preview is not None:
        from akka_training.cli.training.preview import preview_needs_dry_run

        preview_needs_dry_run(preview, dry_run)
    client = state.client()
    if dry_run:
        checked = client.start_run(plan, dry_run=True)
        if preview is not None:
            from akka_training.cli.training.preview import (
                print_preview,
                run_preview,
                show_previewed,
            )

            task = run_preview(plan, preview)
            show_previewed(
                checked, task, lambda: _print_valid(checked), lambda: print_preview(task)
            )
            return
        if state.output != "text":
            emit(checked, lambda _: None)
        elif show_resolved:
            print_settings(checked.settings)
        elif not state.quiet:
            _print_valid(checked)
        return
    run = client.start_run(plan)
    if state.output != "text" and not wait_:
        emit(run, lambda _: None)
        return
    if state.output == "text":
        word = "already submitted as" if run.existing else "started:"
        say(f"Run {word} {run.id} ({run.phase})", run.id)
        if show_resolved:
            print_settings(run.settings)
    if wait_:
        _wait(run.id, None, exit_status)


def _print_valid(checked: DryRun) -> None:
    s = checked.settings
    print(
        f"The plan is valid: {s['method']} on {s['baseModel']['id']} with "
        f"{s['dataset']['name']}:v{s['dataset']['version']}, {s['execution']['gpus']} GPU(s) "
        f"in pool {s['execution']['pool']}. Nothing was started."
    )


@app.command("list")
def list_runs(
    project: str = typer.Option(None, "--project"),
    phase: str = typer.Option(None, "--phase", help="open, or a phase such as TRAINING."),
    limit: int = typer.Option(100, "--limit", min=1),
) -> None:
    """Runs, newest first (-q: their ids only)."""
    emit(state.client().runs(project, phase, limit), _print_list)


def _print_list(rows: list[RunSummary]) -> None:
    if state.quiet:
        for r in rows:
            print(r.id)
        return
    table(
        ["RUN", "PROJECT", "METHOD", "BASE MODEL", "DATASET", "PHASE", "PROGRESS", "CREATED"],
        [
            [
                r.id,
                r.project,
                r.method,
                r.base_model,
                r.dataset,
                r.phase,
                _progress(r.progress),
                when(r.created_at),
            ]
            for r in rows
        ],
    )


@app.command()
def get(
    run: str = RUN,
    settings: bool = typer.Option(False, "--settings", help="Only the resolved settings."),
) -> None:
    """A run: state, results, data fit, memory, cost, failure."""
    record = state.client().run(run)
    if settings and state.output == "text":
        print_settings(record.settings)
        return
    emit(record, print_run)


@app.command()
def wait(
    run: str = RUN,
    exit_status: bool = typer.Option(
        False, "--exit-status", help="Exit 1 unless the run completes."
    ),
    timeout: float = typer.Option(None, "--timeout", help="Give up after this many seconds."),
) -> None:
    """Follow a run's events until it ends (-o json: one JSON object a line)."""
    _wait(run, timeout, exit_status)


def _wait(run: str, timeout: float | None, exit_status: bool) -> None:
    final: RunEndLine | None = None
    watcher = Watcher(quiet=state.quiet or state.output != "text", no_color=state.no_color)
    try:
        for line in state.client().wait_run(run, timeout=timeout):
            if state.output == "json":
                print(json.dumps(line.to_json()), flush=True)
            elif line.type == "event":
                watcher.event(line)
            elif line.type == "progress":
                watcher.step(line)
            if line.type == "run":
                final = line
    finally:
        watcher.close()
    if final is None:
        raise InvalidRequest("The trainer closed the stream before the run ended.")
    record = final.run
    if state.output == "yaml":
        sys.stdout.write(yaml.safe_dump(record.to_json(), sort_keys=False))
    elif state.output == "text":
        text = f"Run {record.id} {record.phase}"
        if final.timed_out:
            text += " (still running: timed out waiting)"
        if record.failure:
            text += f": {record.failure.reason}"
        print(text)
    if exit_status and (record.phase != "COMPLETED" or final.timed_out):
        raise typer.Exit(1)


@app.command()
def cancel(run: str = RUN) -> None:
    """Cancel a run (its job is stopped). On a terminal it asks first; --force does not."""
    confirm(f"Cancel run {run}? Its job is stopped and it cannot be resumed.")
    emit(
        state.client().cancel_run(run),
        lambda r: say(
            f"Run {r.id}: {'cancel requested' if r.requested == 'cancel' else r.phase}.", r.id
        ),
    )


@app.command()
def pause(
    run: str = RUN,
    checkpoint: str = typer.Option(
        "save",
        "--checkpoint",
        help="save: snapshot at the next step; latest: stop at the last snapshot.",
    ),
) -> None:
    """Pause a run and release its devices."""
    emit(
        state.client().pause_run(run, checkpoint), lambda r: say(f"Run {r.id} is {r.phase}.", r.id)
    )


@app.command()
def resume(run: str = RUN) -> None:
    """Resume a paused run from its last snapshot (a new attempt, same run)."""
    emit(
        state.client().resume_run(run),
        lambda r: say(
            f"Run {r.id} is {r.phase} (attempt {r.attempt + 1} will start from step "
            f"{r.progress.saved_step or 0}).",
            r.id,
        ),
    )


@app.command()
def branch(
    run: str = RUN,
    snapshot: str = typer.Option(
        ..., "--snapshot", help="The snapshot whose weights the new run starts from."
    ),
    steps: int = typer.Option(None, "--steps", help="Steps the new run trains."),
    overrides: str = typer.Option(
        None, "--overrides", help="A YAML file of plan fields to change."
    ),
    dry_run: bool = typer.Option(False, "--dry-run"),
) -> None:
    """A new run from a snapshot's weights (optimizer, schedule and data position reset)."""
    client = state.client()
    changes = _overrides(overrides)
    if dry_run:
        checked = client.branch_run(run, snapshot, steps, changes, dry_run=True)
        emit(checked, lambda _: print("The branch is valid; nothing was started."))
        return
    branched = client.branch_run(run, snapshot, steps, changes)
    emit(branched, lambda r: say(f"Run {r.id} started from {run} {snapshot} ({r.phase}).", r.id))


@app.command("continue")
def continue_(
    run: str = RUN,
    snapshot: str = typer.Option(..., "--snapshot"),
    steps: int = typer.Option(..., "--steps", help="Steps to train beyond the snapshot."),
    overrides: str = typer.Option(None, "--overrides"),
    dry_run: bool = typer.Option(False, "--dry-run"),
) -> None:
    """A new run from a snapshot's full training state (optimizer, schedule, data position)."""
    client = state.client()
    changes = _overrides(overrides)
    if dry_run:
        checked = client.continue_run(run, snapshot, steps, changes, dry_run=True)
        emit(checked, lambda _: print("The continuation is valid; nothing was started."))
        return
    continued = client.continue_run(run, snapshot, steps, changes)
    emit(continued, lambda r: say(f"Run {r.id} continues {run} from {snapshot} ({r.phase}).", r.id))


@app.command()
def snapshots(run: str = RUN) -> None:
    """A run's snapshots."""
    emit(state.client().snapshots(run), _print_snapshots)


def _print_snapshots(rows: list[Snapshot]) -> None:
    table(
        ["SNAPSHOT", "STEP", "ATTEMPT", "WEIGHTS", "TRAINING STATE", "CREATED"],
        [
            [
                s.name,
                s.step,
                s.attempt,
                "swept" if s.swept else _stored(s.weights_bytes),
                "swept"
                if s.swept
                else (_stored(s.training_state_bytes) if s.training_state else "no"),
                when(s.created_at),
            ]
            for s in rows
        ],
    )


def _stored(size: int | None) -> str:
    """A snapshot part that is stored: its size when the job measured it."""
    return "yes" if size is None else human_bytes(size)


@app.command()
def metrics(
    run: str = RUN,
    fields: str = typer.Option(
        None, "--fields", help="Comma-separated figure names or prefixes (reward, memory/…)."
    ),
) -> None:
    """A run's per-step figures."""
    wanted = [f.strip() for f in fields.split(",")] if fields else None
    emit(state.client().metrics(run, wanted), _print_metrics)


def _print_metrics(m: Metrics) -> None:
    if not m.steps:
        print("No steps reported yet.")
        return
    keys: list[str] = []
    for s in m.steps:
        keys.extend(k for k in s.figures if k not in keys)
    table(
        ["STEP", *[k.upper() for k in keys]],
        [[s.step, *[s.figures.get(k) for k in keys]] for s in m.steps],
    )


@app.command()
def rollouts(
    run: str = RUN,
    step: int = typer.Option(None, "--step", help="The step to read (default: the latest kept)."),
    worst: int = typer.Option(None, "--worst", min=1, help="The N lowest-scored rollouts."),
    best: int = typer.Option(None, "--best", min=1, help="The N highest-scored rollouts."),
    limit: int = typer.Option(None, "--limit", min=1, help="At most N rollouts, in order."),
) -> None:
    """The rollouts a reinforcement run kept for one step."""
    chosen = [x for x in (worst, best, limit) if x is not None]
    if len(chosen) > 1:
        raise InvalidRequest("Give one of --worst, --best and --limit.")
    order: Literal["worst", "best"] | None = (
        "worst" if worst is not None else "best" if best is not None else None
    )
    emit(state.client().rollouts(run, step, order, chosen[0] if chosen else None), print_rollouts)


@app.command()
def verify(
    run: str = RUN,
    timeout: float = typer.Option(
        None, "--timeout", help="Give up waiting for the verification after this many seconds."
    ),
) -> None:
    """Check each step's figures and rollouts again; exit 1 on any difference.

    Every figure a step published (rewards, term shares, lengths, tokens, health monitors) is
    counted again from its kept rollouts, and each rollout scored again with the run's reward,
    as a task on the training cluster. Prints each figure and rollout that differs. On a run
    still training, only the steps whose report and rollouts are both in are checked."""
    client = state.client()
    task = follow_task(
        client,
        client.verify(run),
        f"The verification of run {run}",
        timeout,
        lambda p: f"{p.done or 0:g} of {p.total or 0:g} steps",
    )
    result = verification_of(task)
    emit(result, print_verification)
    if result.differences or result.rollouts:
        raise typer.Exit(1)


@app.command()
def logs(
    run: str = RUN,
    follow: bool = typer.Option(False, "--follow", "-F", help="Keep printing as the job writes."),
    attempt: int = typer.Option(None, "--attempt"),
) -> None:
    """The output of a run's job (-o json: one object a chunk, with the offset to read on)."""
    client = state.client()
    offset = 0
    while True:
        chunk = client.logs(run, offset, attempt)
        if state.output == "text":
            if chunk.text:
                sys.stdout.write(chunk.text)
        elif chunk.text or not follow or not chunk.open:
            # A chunk with text, or the last one: what a program needs to read on later.
            if state.output == "json":
                sys.stdout.write(json.dumps(chunk.to_json()) + "\n")
            else:
                sys.stdout.write("---\n" + yaml.safe_dump(chunk.to_json(), sort_keys=False))
        sys.stdout.flush()
        offset = chunk.offset
        if not follow or not chunk.open:
            return
        time.sleep(1.0)


@app.command()
def grafana(run: str = RUN, project: str = typer.Option(None, "--project")) -> None:
    """A link to the run on the project's Grafana dashboard, valid until the printed expiry."""
    emit(
        state.client().grafana_link(run, project),
        lambda link: (
            print(link.url),
            print(
                f"Anyone with this link can view project {link.project}'s Grafana until "
                f"{link.expires_at.isoformat()}.",
                file=sys.stderr,
            ),
        ),
    )


@app.command()
def tree(run: str = RUN) -> None:
    """A run's lineage: the run it started from and the runs started from it."""
    emit(state.client().tree(run), lambda t: _print_tree(t.tree, t.focus, ""))


def _print_tree(node: TreeNode, focus: str, indent: str) -> None:
    origin = ""
    if node.origin:
        snapshot = node.origin.snapshot
        origin = f"  <- {node.origin.kind}" + (f" at {snapshot}" if snapshot else "")
    mark = "*" if node.run == focus else " "
    name = f" {node.model_name}" if node.model_name else ""
    print(f"{indent}{mark} {node.run}{name}  {node.method}  {node.phase}{origin}")
    for child in node.children:
        _print_tree(child, focus, indent + "    ")


def _overrides(path: str | None) -> dict[str, Any] | None:
    if not path:
        return None
    data = load_document(_read_bytes(path), path) or {}
    if not isinstance(data, dict):
        raise InvalidRequest(f"{path} must hold plan fields (a mapping).")
    return data


def _progress(progress: Progress) -> str:
    step = progress.observed_step or 0
    total = progress.total_steps
    return f"{step}/{total}" if total else str(step)


# --- runs get ---------------------------------------------------------------------------------------


def print_settings(settings: dict[str, Any]) -> None:
    """The resolved settings, printed the same way by --show-resolved and `runs get --settings`."""
    section("Resolved settings")
    text = yaml.safe_dump(settings, sort_keys=False, default_flow_style=False, width=100)
    for line in text.splitlines():
        print("  " + line)


def print_run(r: RunRecord) -> None:
    progress = r.progress
    section("State")
    rows: list[tuple[str, Any]] = [
        ("Run", r.id),
        ("Project", r.project),
        ("Method", r.method),
        ("Engine", r.engine),
        ("Base model", r.base_model),
        ("Dataset", r.dataset),
        ("Phase", r.phase + (f" ({r.requested} requested)" if r.requested else "")),
        (
            "Progress",
            f"step {progress.observed_step}"
            + (f" of {progress.total_steps}" if progress.total_steps else ""),
        ),
        ("Saved", _saved(r)),
    ]
    if r.source:
        src = r.source
        rows.append(
            (
                "Started from",
                f"{src.run} ({src.kind}" + (f" at {src.snapshot})" if src.snapshot else ")"),
            )
        )
    if r.pipeline:
        rows.append(("Pipeline", f"{r.pipeline} stage {r.stage}"))
    details(rows, indent="  ")
    if r.queue:
        q = r.queue
        print()
        section("Queue")
        details(
            [
                ("Position", f"{q.position} in pool {q.pool}"),
                ("Waiting for", "; ".join(q.waiting_for)),
            ],
            indent="  ",
        )
    results = r.results
    print()
    section("Results")
    result_rows: list[tuple[str, Any]] = [("Model", r.model_name or results.model or "not yet")]
    if r.method in ("sft", "dpo"):
        result_rows.append(("Training loss", results.training_loss))
    else:
        result_rows.append(("Reward", results.reward))
    result_rows.append(("Adapter modules", _modules(results.adapter_modules)))
    details(result_rows, indent="  ")
    fit = r.data_fit
    if fit:
        print()
        section("Data fit")
        of = f" of {fit.rows}" if fit.rows is not None else ""
        fit_rows: list[tuple[str, Any]] = [
            ("Rows truncated at maxSeqLength", f"{fit.rows_truncated or 0}{of}"),
            ("Answers truncated", fit.answers_truncated or 0),
            ("Rows dropped", fit.rows_dropped or 0),
        ]
        if fit.padding_share is not None:
            fit_rows.append(("Padding share", f"{fit.padding_share * 100:.1f}%"))
        if fit.prompts_truncated is not None:
            fit_rows.append(("Prompts over the limit", fit.prompts_truncated))
        details(fit_rows, indent="  ")
    if r.memory:
        print()
        section("Memory")
        print_memory(r.memory)
    cost = r.cost
    print()
    section("Cost")
    phases = ", ".join(f"{k} {duration(v)}" for k, v in cost.phase_seconds.items() if v >= 0.5)
    tps = cost.tokens_per_second
    mfu = cost.mfu
    details(
        [
            ("GPU seconds", cost.gpu_seconds),
            ("Duration", f"{duration(cost.duration_seconds)}" + (f" ({phases})" if phases else "")),
            ("Throughput", f"{tps:,.0f} tokens/s" if tps else "-"),
            ("MFU", f"{mfu * 100:.1f}%" if mfu else "not measured (unknown device peak)"),
        ],
        indent="  ",
    )
    if r.stalled:
        print()
        section("Stalled")
        details(
            [
                ("Since", when(r.stalled.since)),
                ("Threads and memory", r.stalled.dump or "not recorded yet"),
            ],
            indent="  ",
        )
    if r.health:
        print()
        section("Health")
        print_health(r.health)
    if r.preference:
        print()
        section("Preference")
        print_preference(r.preference)
    if r.failure:
        print()
        section("Failure")
        print("  " + r.failure.first_line)


def print_preference(p: Preference) -> None:
    """A dpo run's preference figures at its latest step."""

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.4g}"

    accuracy = p.rewards_accuracies
    details(
        [
            ("Step", p.step),
            ("Reward chosen", number(p.rewards_chosen)),
            ("Reward rejected", number(p.rewards_rejected)),
            ("Margin", number(p.rewards_margins)),
            ("Pairs ranked right", "-" if accuracy is None else f"{accuracy * 100:.1f}%"),
            ("Log-prob chosen", number(p.logps_chosen)),
            ("Log-prob rejected", number(p.logps_rejected)),
            ("Reference", p.reference or "-"),
        ],
        indent="  ",
    )


def print_health(health: Health) -> None:
    """Each monitor's figure at the latest step against its threshold, and the pause one
    caused."""
    past = {"below": "<=", "above": ">=", "away": ">="}
    rows: list[tuple[str, Any]] = []
    for m in health.monitors:
        verdict = "PAST THRESHOLD" if m.crossed else "ok"
        pauses = ", pauses the run" if m.pauses_run else ""
        limit = f"{past[m.direction]} {m.threshold:g}"
        if m.direction == "away":
            limit += f" or <= {1 / m.threshold:.3g}"
        rows.append((m.monitor, f"{m.value:.4g} {verdict} (trips at {limit}{pauses})"))
    if health.step is not None:
        rows.insert(0, ("At step", health.step))
    details(rows, indent="  ")
    if health.pause:
        print("  " + health.pause.reason)


_SPLIT = (
    "weights",
    "adapter",
    "gradients",
    "optimizer",
    "activations",
    "generation",
    "allocator",
    "driver",
)


def print_memory(memory: MemorySplit) -> None:
    if memory.reserved is None:
        peak = memory.host_peak
        details(
            [
                ("Device split", "not available on CPU"),
                ("Host peak", f"{human_bytes(peak)} (step {memory.step})" if peak else "-"),
            ],
            indent="  ",
        )
        return
    rows: list[tuple[str, Any]] = [
        ("Step", memory.step),
        ("Reserved", human_bytes(memory.reserved)),
    ]
    for name in _SPLIT:
        value = getattr(memory, name)
        if value is not None:
            rows.append((name.capitalize(), human_bytes(value)))
    details(rows, indent="  ")


def _saved(r: RunRecord) -> str:
    """What the run has saved: its final adapter once it completed, else its last snapshot."""
    saved = r.progress.saved_step
    if r.results.model and r.phase == "COMPLETED":
        final = f"the final adapter at step {r.progress.observed_step}"
        return final + (f" (last snapshot: step {saved})" if saved is not None else "")
    return f"step {saved}" if saved is not None else "no snapshot yet"


def _modules(modules: list[str] | None) -> str:
    if not modules:
        return "-"
    short = sorted({m.split(".")[-1] for m in modules})
    return f"{len(modules)} modules ({', '.join(short)})"
