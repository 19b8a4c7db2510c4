"""`akka training pipelines`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from akka_training.cli.arguments import PIPELINE
from akka_training.cli.output import confirm, details, emit, say, section, table, when
from akka_training.cli.state import state
from akka_training.cli.training.runs import print_settings, read_plan
from akka_training.core.errors import InvalidRequest

if TYPE_CHECKING:
    from akka_training.api.pipelines import (
        Pipeline,
        PipelineDryRun,
        PipelineEndLine,
        PipelineProgressLine,
    )

app = typer.Typer(
    help="Pipelines: ordered train stages (each a linked run) and evaluate stages.",
    no_args_is_help=True,
)


@app.command()
def start(
    file: str = typer.Option(..., "-f", "--file", help="The pipeline plan; - reads stdin."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check every stage, start nothing."),
    show_resolved: bool = typer.Option(
        False, "--show-resolved", help="Print each resolvable stage's settings."
    ),
    wait_: bool = typer.Option(False, "--wait", help="Wait for the pipeline to end."),
    preview: int = typer.Option(
        None,
        "--preview",
        min=1,
        help="With --dry-run: score N dataset rows of each grpo or gspo stage with that "
        "stage's reward terms (a short task per stage), and flag terms that look wrong.",
    ),
) -> None:
    """Submit a pipeline plan (or check it with --dry-run)."""
    plan = read_plan(file)
    if preview is not None:
        from akka_training.cli.training.preview import preview_needs_dry_run

        preview_needs_dry_run(preview, dry_run)
    client = state.client()
    if dry_run:
        checked = client.start_pipeline(plan, dry_run=True)
        if preview is not None:
            from akka_training.cli.training.preview import (
                print_pipeline_preview,
                run_pipeline_preview,
                show_previewed,
            )

            previewed = run_pipeline_preview(plan, preview)
            show_previewed(
                checked,
                previewed,
                lambda: _print_dry_run(checked, show_resolved),
                lambda: print_pipeline_preview(previewed),
            )
            return
        emit(checked, lambda d: _print_dry_run(d, show_resolved))
        return
    pipeline = client.start_pipeline(plan)
    if state.output != "text" and not wait_:
        emit(pipeline, lambda _: None)
        return
    if state.output == "text":
        say(f"Pipeline {pipeline.id} started ({len(pipeline.stages)} stages).", pipeline.id)
    if wait_:
        _wait(pipeline.id, None)


def _print_dry_run(d: PipelineDryRun, show_resolved: bool) -> None:
    if not show_resolved:
        print(f"The pipeline is valid: {len(d.stages)} stage(s). Nothing was started.")
        return
    for i, stage in enumerate(d.stages):
        if i:
            print()
        print(f"Stage {stage.name}:")
        if stage.settings:
            settings = dict(stage.settings)
            if stage.source_stage and settings.get("source") is None:
                # Pinned only once that stage completes: say where it comes from.
                settings["source"] = (
                    f"@{stage.source_stage} (the final adapter of stage {stage.source_stage}, "
                    "pinned when it completes)"
                )
            print_settings(settings)
        else:
            print(f"  omitted: it {stage.omitted or 'has no registered dataset to resolve'}.")


@app.command("list")
def list_pipelines(project: str = typer.Option(None, "--project")) -> None:
    """Pipelines, newest first."""
    emit(state.client().pipelines(project), _print_pipelines)


def _print_pipelines(rows: list[Pipeline]) -> None:
    table(
        ["PIPELINE", "PROJECT", "NAME", "STATE", "STAGES", "CREATED"],
        [
            [
                p.id,
                p.project,
                p.name,
                p.state,
                " > ".join(f"{s.name}:{s.phase}" for s in p.stages),
                when(p.created_at),
            ]
            for p in rows
        ],
    )


@app.command()
def get(pipeline: str = PIPELINE) -> None:
    """A pipeline and its stages."""
    emit(state.client().pipeline(pipeline), _print_pipeline)


def _print_pipeline(p: Pipeline) -> None:
    details(
        [
            ("Pipeline", p.id),
            ("Project", p.project),
            ("Name", p.name),
            ("State", p.state),
            ("Failure", p.failure),
        ]
    )
    print()
    section("Stages")
    table(
        ["STAGE", "METHOD", "RUN", "PHASE", "STEP"],
        [
            [s.name, s.method, s.run, s.phase, s.progress.observed_step if s.progress else None]
            for s in p.stages
        ],
        indent="  ",
    )


@app.command()
def wait(pipeline: str = PIPELINE, timeout: float = typer.Option(None, "--timeout")) -> None:
    """Follow a pipeline until it ends."""
    _wait(pipeline, timeout)


def _wait(ref: str, timeout: float | None) -> None:
    final: PipelineProgressLine | PipelineEndLine | None = None
    for line in state.client().wait_pipeline(ref, timeout):
        if state.output == "json":
            print(json.dumps(line.to_json()), flush=True)
        elif not state.quiet and line.type == "progress":
            stages = ", ".join(f"{s.name} {s.phase}" for s in line.pipeline.stages)
            print(f"Pipeline {line.pipeline.id}: {stages}", flush=True)
        final = line
    if final is None:
        raise InvalidRequest("The trainer closed the stream before the pipeline ended.")
    p = final.pipeline
    if state.output == "text":
        print(f"Pipeline {p.id} {p.state}" + (f": {p.failure}" if p.failure else ""))
    if p.state != "COMPLETED":
        raise typer.Exit(1)


@app.command()
def cancel(pipeline: str = PIPELINE) -> None:
    """Cancel a pipeline and its running stage. On a terminal it asks first; --force does not."""
    confirm(f"Cancel pipeline {pipeline} and its running stage?")
    emit(
        state.client().cancel_pipeline(pipeline), lambda p: say(f"Pipeline {p.id} {p.state}.", p.id)
    )


@app.command()
def resume(pipeline: str = PIPELINE) -> None:
    """Run a failed or cancelled pipeline again from the stage that did not complete."""
    emit(
        state.client().resume_pipeline(pipeline), lambda p: say(f"Pipeline {p.id} {p.state}.", p.id)
    )
