"""`akka training pipelines`."""

from __future__ import annotations

import json
from typing import Any

import typer

from akka_training.cli.output import details, emit, section, table
from akka_training.cli.state import state
from akka_training.cli.training.runs import print_settings, read_plan
from akka_training.core.errors import InvalidRequest

app = typer.Typer(help="Pipelines: ordered train stages, each a linked run.", no_args_is_help=True)


@app.command()
def start(
    file: str = typer.Option(..., "-f", "--file", help="The pipeline plan; - reads stdin."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check every stage, start nothing."),
    show_resolved: bool = typer.Option(
        False, "--show-resolved", help="Print each resolvable stage's settings."
    ),
    wait_: bool = typer.Option(False, "--wait", help="Wait for the pipeline to end."),
) -> None:
    """Submit a pipeline plan (or check it with --dry-run)."""
    result = state.client().start_pipeline(read_plan(file), dry_run=dry_run)
    if dry_run:
        emit(result, lambda d: _print_dry_run(d, show_resolved))
        return
    if state.output != "text" and not wait_:
        emit(result, lambda _: None)
        return
    if state.output == "text":
        print(f"Pipeline {result['id']} started ({len(result['stages'])} stages).")
    if wait_:
        _wait(result["id"], None)


def _print_dry_run(d: dict[str, Any], show_resolved: bool) -> None:
    if not show_resolved:
        print(f"The pipeline is valid: {len(d['stages'])} stage(s). Nothing was started.")
        return
    for i, stage in enumerate(d["stages"]):
        if i:
            print()
        print(f"Stage {stage['name']}:")
        if stage.get("settings"):
            print_settings(stage["settings"])
        else:
            print(f"  omitted: it {stage.get('omitted', 'has no registered dataset to resolve')}.")


@app.command("list")
def list_pipelines(project: str = typer.Option(None, "--project")) -> None:
    """Pipelines, newest first."""
    rows = state.client().pipelines(project)
    emit(
        rows,
        lambda rs: table(
            ["PIPELINE", "PROJECT", "NAME", "STATE", "STAGES", "CREATED"],
            [
                [
                    p["id"],
                    p["project"],
                    p["name"],
                    p["state"],
                    " > ".join(f"{s['name']}:{s['phase']}" for s in p["stages"]),
                    p["createdAt"][:19].replace("T", " "),
                ]
                for p in rs
            ],
        ),
    )


@app.command()
def get(pipeline: str) -> None:
    """A pipeline and its stages."""
    emit(state.client().pipeline(pipeline), _print_pipeline)


def _print_pipeline(d: dict[str, Any]) -> None:
    details(
        [
            ("Pipeline", d["id"]),
            ("Project", d["project"]),
            ("Name", d["name"]),
            ("State", d["state"]),
            ("Failure", d["failure"]),
        ]
    )
    print()
    section("Stages")
    table(
        ["STAGE", "METHOD", "RUN", "PHASE", "STEP"],
        [
            [
                s["name"],
                s["method"],
                s["run"],
                s["phase"],
                (s["progress"] or {}).get("observedStep"),
            ]
            for s in d["stages"]
        ],
        indent="  ",
    )


@app.command()
def wait(pipeline: str, timeout: float = typer.Option(None, "--timeout")) -> None:
    """Follow a pipeline until it ends."""
    _wait(pipeline, timeout)


def _wait(ref: str, timeout: float | None) -> None:
    final = None
    for item in state.client().wait_pipeline(ref, timeout):
        if state.output == "json":
            print(json.dumps(item), flush=True)
        elif not state.quiet and item["type"] == "progress":
            stages = ", ".join(f"{s['name']} {s['phase']}" for s in item["pipeline"]["stages"])
            print(f"Pipeline {item['pipeline']['id']}: {stages}", flush=True)
        final = item
    if final is None:
        raise InvalidRequest("The trainer closed the stream before the pipeline ended.")
    if state.output == "text":
        p = final["pipeline"]
        print(
            f"Pipeline {p['id']} {p['state']}" + (f": {p['failure']}" if p.get("failure") else "")
        )
    if final["pipeline"]["state"] != "COMPLETED":
        raise typer.Exit(1)


@app.command()
def cancel(pipeline: str) -> None:
    """Cancel a pipeline and its running stage."""
    emit(
        state.client().cancel_pipeline(pipeline),
        lambda d: print(f"Pipeline {d['id']} {d['state']}."),
    )


@app.command()
def resume(pipeline: str) -> None:
    """Run a failed or cancelled pipeline again from the stage that did not complete."""
    emit(
        state.client().resume_pipeline(pipeline),
        lambda d: print(f"Pipeline {d['id']} {d['state']}."),
    )
