"""`akka training runs`: start, read and steer runs."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import typer
import yaml

from akka_training.cli.output import details, duration, emit, human_bytes, section, table
from akka_training.cli.state import state
from akka_training.cli.training.rollouts import print_rollouts
from akka_training.core.errors import InvalidRequest

app = typer.Typer(help="Start, watch, pause, resume and branch runs.", no_args_is_help=True)


def read_plan(path: str) -> dict[str, Any]:
    text = sys.stdin.read() if path == "-" else _read_file(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidRequest(f"{path} is not valid YAML or JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidRequest(f"{path} does not hold a plan (a mapping with kind: run).")
    return data


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text()
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
) -> None:
    """Submit a run plan (or check it with --dry-run)."""
    plan = read_plan(file)
    result = state.client().start_run(plan, dry_run=dry_run)
    if dry_run:
        if state.output != "text":
            emit(result, lambda _: None)
        elif show_resolved:
            print_settings(result["settings"])
        elif not state.quiet:
            s = result["settings"]
            print(
                f"The plan is valid: {s['method']} on {s['baseModel']['id']} with "
                f"{s['dataset']['name']}:v{s['dataset']['version']}, {s['execution']['gpus']} GPU(s) "
                f"in pool {s['execution']['pool']}. Nothing was started."
            )
        return
    if state.output != "text" and not wait_:
        emit(result, lambda _: None)
        return
    if state.output == "text":
        word = "already submitted as" if result.get("existing") else "started:"
        print(f"Run {word} {result['id']} ({result['phase']})")
        if show_resolved:
            print_settings(result["settings"])
    if wait_:
        _wait(result["id"], None, exit_status)


@app.command("list")
def list_runs(
    project: str = typer.Option(None, "--project"),
    phase: str = typer.Option(None, "--phase", help="open, or a phase such as TRAINING."),
    limit: int = typer.Option(100, "--limit"),
) -> None:
    """Runs, newest first."""
    rows = state.client().runs(project, phase, limit)
    emit(rows, _print_list)


def _print_list(rows: list[dict[str, Any]]) -> None:
    table(
        ["RUN", "PROJECT", "METHOD", "BASE MODEL", "DATASET", "PHASE", "PROGRESS", "CREATED"],
        [
            [
                r["id"],
                r["project"],
                r["method"],
                r["baseModel"],
                r["dataset"],
                r["phase"],
                _progress(r["progress"]),
                r["createdAt"][:19].replace("T", " "),
            ]
            for r in rows
        ],
    )


@app.command()
def get(
    run: str,
    settings: bool = typer.Option(False, "--settings", help="Only the resolved settings."),
) -> None:
    """A run: state, results, data fit, memory, cost, failure."""
    data = state.client().run(run)
    if settings and state.output == "text":
        print_settings(data["settings"])
        return
    emit(data, print_run)


@app.command()
def wait(
    run: str,
    exit_status: bool = typer.Option(
        False, "--exit-status", help="Exit 1 unless the run completes."
    ),
    timeout: float = typer.Option(None, "--timeout", help="Give up after this many seconds."),
) -> None:
    """Follow a run's events until it ends (-o json: one JSON object a line)."""
    _wait(run, timeout, exit_status)


def _wait(run: str, timeout: float | None, exit_status: bool) -> None:
    final: dict[str, Any] | None = None
    for item in state.client().wait_run(run, timeout=timeout):
        if state.output == "json":
            print(json.dumps(item), flush=True)
        elif item["type"] == "event" and not state.quiet:
            print(f"{item['at'][11:19]}  {item['message']}", flush=True)
        elif item["type"] == "progress" and not state.quiet and item["step"]:
            total = f" of {item['totalSteps']}" if item.get("totalSteps") else ""
            print(f"          step {item['step']}{total}", flush=True)
        if item["type"] == "run":
            final = item
    if final is None:
        raise InvalidRequest("The trainer closed the stream before the run ended.")
    record = final["run"]
    if state.output == "yaml":
        sys.stdout.write(yaml.safe_dump(record, sort_keys=False))
    elif state.output == "text":
        line = f"Run {record['id']} {record['phase']}"
        if final.get("timedOut"):
            line += " (still running: timed out waiting)"
        if record.get("failure"):
            line += f": {record['failure']['reason']}"
        print(line)
    if exit_status and (record["phase"] != "COMPLETED" or final.get("timedOut")):
        raise typer.Exit(1)


@app.command()
def cancel(run: str) -> None:
    """Cancel a run (its job is stopped)."""
    data = state.client().cancel_run(run)
    emit(
        data,
        lambda d: print(
            f"Run {d['id']}: {'cancel requested' if d['requested'] == 'cancel' else d['phase']}."
        ),
    )


@app.command()
def pause(
    run: str,
    checkpoint: str = typer.Option(
        "save",
        "--checkpoint",
        help="save: snapshot at the next step; latest: stop at the last snapshot.",
    ),
) -> None:
    """Pause a run and release its devices."""
    data = state.client().pause_run(run, checkpoint)
    emit(data, lambda d: print(f"Run {d['id']} is {d['phase']}."))


@app.command()
def resume(run: str) -> None:
    """Resume a paused run from its last snapshot (a new attempt, same run)."""
    data = state.client().resume_run(run)
    emit(
        data,
        lambda d: print(
            f"Run {d['id']} is {d['phase']} (attempt {d['attempt'] + 1} will start from step {d['progress']['savedStep'] or 0})."
        ),
    )


@app.command()
def branch(
    run: str,
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
    data = state.client().branch_run(run, snapshot, steps, _overrides(overrides), dry_run)
    emit(
        data,
        lambda d: print(
            f"Run {d['id']} started from {run} {snapshot} ({d['phase']})."
            if "id" in d
            else "The branch is valid; nothing was started."
        ),
    )


@app.command("continue")
def continue_(
    run: str,
    snapshot: str = typer.Option(..., "--snapshot"),
    steps: int = typer.Option(..., "--steps", help="Steps to train beyond the snapshot."),
    overrides: str = typer.Option(None, "--overrides"),
    dry_run: bool = typer.Option(False, "--dry-run"),
) -> None:
    """A new run from a snapshot's full training state (optimizer, schedule, data position)."""
    data = state.client().continue_run(run, snapshot, steps, _overrides(overrides), dry_run)
    emit(
        data,
        lambda d: print(
            f"Run {d['id']} continues {run} from {snapshot} ({d['phase']})."
            if "id" in d
            else "The continuation is valid; nothing was started."
        ),
    )


@app.command()
def snapshots(run: str) -> None:
    """A run's snapshots."""
    rows = state.client().snapshots(run)
    emit(
        rows,
        lambda rs: table(
            ["SNAPSHOT", "STEP", "ATTEMPT", "WEIGHTS", "TRAINING STATE", "CREATED"],
            [
                [
                    s["name"],
                    s["step"],
                    s["attempt"],
                    "swept" if s["swept"] else "yes",
                    "swept" if s["swept"] else ("yes" if s["trainingState"] else "no"),
                    s["createdAt"][:19].replace("T", " "),
                ]
                for s in rs
            ],
        ),
    )


@app.command()
def metrics(
    run: str,
    fields: str = typer.Option(
        None, "--fields", help="Comma-separated figure names or prefixes (reward, memory/…)."
    ),
) -> None:
    """A run's per-step figures."""
    wanted = [f.strip() for f in fields.split(",")] if fields else None
    data = state.client().metrics(run, wanted)
    emit(data, _print_metrics)


def _print_metrics(d: dict[str, Any]) -> None:
    steps = d["steps"]
    if not steps:
        print("No steps reported yet.")
        return
    keys: list[str] = []
    for s in steps:
        keys.extend(k for k in s if k not in ("step", "attempt", "at") and k not in keys)
    table(
        ["STEP", *[k.upper() for k in keys]],
        [[s["step"], *[s.get(k) for k in keys]] for s in steps],
    )


@app.command()
def rollouts(
    run: str,
    step: int = typer.Option(None, "--step", help="The step to read (default: the latest kept)."),
    worst: int = typer.Option(None, "--worst", help="The N lowest-scored rollouts."),
    best: int = typer.Option(None, "--best", help="The N highest-scored rollouts."),
    limit: int = typer.Option(None, "--limit", help="At most N rollouts, in order."),
) -> None:
    """The rollouts a reinforcement run kept for one step."""
    chosen = [x for x in (worst, best, limit) if x is not None]
    if len(chosen) > 1:
        raise InvalidRequest("Give one of --worst, --best and --limit.")
    order = "worst" if worst is not None else "best" if best is not None else None
    data = state.client().rollouts(run, step, order, chosen[0] if chosen else None)
    emit(data, print_rollouts)


@app.command()
def logs(
    run: str,
    follow: bool = typer.Option(False, "--follow", "-F", help="Keep printing as the job writes."),
    attempt: int = typer.Option(None, "--attempt"),
) -> None:
    """The output of a run's job."""
    client = state.client()
    offset = 0
    while True:
        chunk = client.logs(run, offset, attempt)
        if chunk["text"]:
            sys.stdout.write(chunk["text"])
            sys.stdout.flush()
        offset = chunk["offset"]
        if not follow or not chunk["open"]:
            return
        time.sleep(1.0)


@app.command()
def grafana(run: str, project: str = typer.Option(None, "--project")) -> None:
    """A link to the run on the project's Grafana dashboard, valid until the printed expiry."""
    data = state.client().grafana_link(run, project)
    emit(
        data,
        lambda d: (
            print(d["url"]),
            print(
                f"Anyone with this link can view project {d['project']}'s Grafana until {d['expiresAt']}.",
                file=sys.stderr,
            ),
        ),
    )


@app.command()
def tree(run: str) -> None:
    """A run's lineage: the run it started from and the runs started from it."""
    data = state.client().tree(run)
    emit(data, lambda d: _print_tree(d["tree"], d["focus"], ""))


def _print_tree(node: dict[str, Any], focus: str, indent: str) -> None:
    origin = ""
    if node.get("from"):
        kind = node["from"]["kind"]
        origin = f"  <- {kind}" + (
            f" at {node['from']['snapshot']}" if node["from"].get("snapshot") else ""
        )
    mark = "*" if node["run"] == focus else " "
    name = f" {node['modelName']}" if node.get("modelName") else ""
    print(f"{indent}{mark} {node['run']}{name}  {node['method']}  {node['phase']}{origin}")
    for child in node["children"]:
        _print_tree(child, focus, indent + "    ")


def _overrides(path: str | None) -> dict[str, Any] | None:
    if not path:
        return None
    data = yaml.safe_load(_read_file(path)) or {}
    if not isinstance(data, dict):
        raise InvalidRequest(f"{path} must hold plan fields (a mapping).")
    return data


def _progress(progress: dict[str, Any]) -> str:
    step = progress.get("observedStep") or 0
    total = progress.get("totalSteps")
    return f"{step}/{total}" if total else str(step)


# --- runs get ---------------------------------------------------------------------------------------


def print_settings(settings: dict[str, Any]) -> None:
    """The resolved settings, printed the same way by --show-resolved and `runs get --settings`."""
    section("Resolved settings")
    text = yaml.safe_dump(settings, sort_keys=False, default_flow_style=False, width=100)
    for line in text.splitlines():
        print("  " + line)


def print_run(d: dict[str, Any]) -> None:
    progress = d["progress"]
    saved = progress.get("savedStep")
    section("State")
    rows: list[tuple[str, Any]] = [
        ("Run", d["id"]),
        ("Project", d["project"]),
        ("Method", d["method"]),
        ("Engine", d["engine"]),
        ("Base model", d["baseModel"]),
        ("Dataset", d["dataset"]),
        ("Phase", d["phase"] + (f" ({d['requested']} requested)" if d.get("requested") else "")),
        (
            "Progress",
            f"step {progress['observedStep']}"
            + (f" of {progress['totalSteps']}" if progress.get("totalSteps") else ""),
        ),
        ("Saved", f"step {saved}" if saved is not None else "no snapshot yet"),
    ]
    if d.get("source"):
        src = d["source"]
        rows.append(
            (
                "Started from",
                f"{src['run']} ({src['kind']}"
                + (f" at {src['snapshot']})" if src.get("snapshot") else ")"),
            )
        )
    if d.get("pipeline"):
        rows.append(("Pipeline", f"{d['pipeline']} stage {d['stage']}"))
    details(rows, indent="  ")
    if d.get("queue"):
        q = d["queue"]
        print()
        section("Queue")
        details(
            [
                ("Position", f"{q['position']} in pool {q['pool']}"),
                ("Waiting for", "; ".join(q["waitingFor"])),
            ],
            indent="  ",
        )
    results = d.get("results") or {}
    print()
    section("Results")
    result_rows: list[tuple[str, Any]] = [
        ("Model", d.get("modelName") or results.get("model") or "not yet")
    ]
    if d["method"] == "sft":
        result_rows.append(("Training loss", results.get("trainingLoss")))
    else:
        result_rows.append(("Reward", results.get("reward")))
    result_rows.append(("Adapter modules", _modules(results.get("adapterModules"))))
    details(result_rows, indent="  ")
    fit = d.get("dataFit")
    if fit:
        print()
        section("Data fit")
        rows_total = fit.get("rows")
        of = f" of {rows_total}" if rows_total is not None else ""
        fit_rows: list[tuple[str, Any]] = [
            ("Rows truncated at maxSeqLength", f"{fit.get('rowsTruncated', 0)}{of}"),
            ("Answers truncated", fit.get("answersTruncated", 0)),
            ("Rows dropped", fit.get("rowsDropped", 0)),
        ]
        if fit.get("paddingShare") is not None:
            fit_rows.append(("Padding share", f"{fit['paddingShare'] * 100:.1f}%"))
        if fit.get("promptsTruncated") is not None:
            fit_rows.append(("Prompts over the limit", fit["promptsTruncated"]))
        details(fit_rows, indent="  ")
    memory = d.get("memory")
    if memory:
        print()
        section("Memory")
        print_memory(memory)
    cost = d.get("cost") or {}
    print()
    section("Cost")
    phases = ", ".join(
        f"{k} {duration(v)}" for k, v in (cost.get("phaseSeconds") or {}).items() if v >= 0.5
    )
    tps = cost.get("tokensPerSecond")
    mfu = cost.get("mfu")
    details(
        [
            ("GPU seconds", cost.get("gpuSeconds")),
            (
                "Duration",
                f"{duration(cost.get('durationSeconds'))}" + (f" ({phases})" if phases else ""),
            ),
            ("Throughput", f"{tps:,.0f} tokens/s" if tps else "-"),
            ("MFU", f"{mfu * 100:.1f}%" if mfu else "not measured (unknown device peak)"),
        ],
        indent="  ",
    )
    if d.get("stalled"):
        print()
        section("Stalled")
        stalled = d["stalled"]
        details(
            [
                ("Since", stalled["since"][:19].replace("T", " ")),
                ("Threads and memory", stalled.get("dump") or "not recorded yet"),
            ],
            indent="  ",
        )
    if d.get("failure"):
        print()
        section("Failure")
        print("  " + d["failure"]["firstLine"])


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


def print_memory(memory: dict[str, Any]) -> None:
    if "reserved" not in memory:
        peak = memory.get("host_peak")
        details(
            [
                ("Device split", "not available on CPU"),
                ("Host peak", f"{human_bytes(peak)} (step {memory.get('step')})" if peak else "-"),
            ],
            indent="  ",
        )
        return
    rows: list[tuple[str, Any]] = [
        ("Step", memory.get("step")),
        ("Reserved", human_bytes(memory.get("reserved"))),
    ]
    rows += [(name.capitalize(), human_bytes(memory[name])) for name in _SPLIT if name in memory]
    details(rows, indent="  ")


def _modules(modules: list[str] | None) -> str:
    if not modules:
        return "-"
    short = sorted({m.split(".")[-1] for m in modules})
    return f"{len(modules)} modules ({', '.join(short)})"
