"""The verl engine's whole flow against a stand-in for verl's interpreter
(``fixtures/fake_verl.py``: verl's files, from fixtures verl's own code produced), a real
`HttpReporter` talking to a recording service on loopback (`smoke.RecordingService`), and a
local blob store. Each run goes through the job entry point's end-report path
(`job.run_engine`), so the end reports are the ones a job sends.

What verl itself does with the configuration is covered by test_verl_config.py; what a GPU run
does by scripts/gpu-smoke-verl.sh."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics.export import (
    DataPointT,
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)

from akka_training.blobstore.local import LocalBlobStore
from akka_training.core.clock import ManualClock
from akka_training.core.monitors import verdicts
from akka_training.core.plans import Monitors
from akka_training.engines.context import JobContext
from akka_training.engines.job import run_engine
from akka_training.engines.reporter import HttpReporter
from akka_training.engines.verl import snapshots
from akka_training.engines.verl.engine import VerlEngine
from akka_training.engines.verl.smoke import RecordingService
from akka_training.engines.watchdog import StallWatchdog
from akka_training.rewards.rollouts import read_step_file
from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.telemetry.otel import job_resource_from_spec
from akka_training.testing.app import InProcessTrainer
from tests.engines.verl.conftest import FIXTURES, make_spec
from tests.engines.verl.test_snapshots import CountingStore
from tests.server.routers.helpers import chat_rows, register, sft_plan

# Runs the fake verl job under the engine: its exit code and the store it wrote to.
Job = Callable[..., tuple[int, CountingStore]]

RUN_DIR = Path("jobs") / "run-1" / "verl"


@pytest.fixture
def service() -> Iterator[RecordingService]:
    s = RecordingService()
    yield s
    s.close()


def _histogram(points: Sequence[DataPointT]) -> list[HistogramDataPoint]:
    """A histogram's data points, as the SDK's reader holds them."""
    found = []
    for point in points:
        assert isinstance(point, HistogramDataPoint), point
        found.append(point)
    return found


@pytest.fixture
def job(tmp_path: Path, service: RecordingService, monkeypatch: pytest.MonkeyPatch) -> Job:
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {FIXTURES / "fake_verl.py"} "$@"\n')
    python.chmod(0o755)
    blobs = CountingStore(tmp_path / "blobs")
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} + {i}?"},
                {"role": "assistant", "content": f"#### {2 * i}"},
            ]
        }
        for i in range(16)
    ]
    blobs.put_bytes(
        "datasets/sha256/aa/train", "".join(json.dumps(r) + "\n" for r in rows).encode()
    )

    def run(
        mode: str = "",
        step_seconds: str = "0.05",
        telemetry: Any = None,
        watchdog: Any = None,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        **spec_kwargs: Any,
    ) -> tuple[int, CountingStore]:
        monkeypatch.setenv("FAKE_VERL_MODE", mode)
        monkeypatch.setenv("FAKE_VERL_STEP_SECONDS", step_seconds)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        # two prompts a step, four completions each: the fixtures' steps
        rl = {"promptsPerStep": 2, "generationsPerPrompt": 4, **spec_kwargs.pop("rl", {})}
        spec = make_spec(rows=16, model_path=str(FIXTURES / "tokenizer"), rl=rl, **spec_kwargs)
        reporter = HttpReporter(
            service.url, spec.run_id, spec.attempt, "token", patience=10, heartbeat_seconds=60
        )
        job = JobContext(
            spec=spec,
            reporter=reporter,
            store=blobs,
            # laid out as both backends lay out job directories: <jobs>/<run>/<attempt>
            workdir=tmp_path / "jobs" / spec.run_id / str(spec.attempt),
            telemetry=telemetry(spec) if telemetry else None,
            watchdog=watchdog(reporter) if watchdog else None,
        )
        try:
            code = run_engine(job, VerlEngine(verl_python=python, extra_overrides=extra))
        finally:
            reporter.close()
        return code, blobs

    return run


@pytest.mark.slow
def test_a_run_reports_steps_rollouts_snapshots_and_its_adapter(
    job: Job, service: RecordingService
) -> None:
    code, blobs = job(rl={"training": {"maxSteps": 4}})
    assert code == 0
    kinds = service.kinds()
    assert kinds[0] == "training" and kinds[-1] == "finished"
    assert [b["step"] for b in service.of("steps")] == [1, 2, 3, 4]
    assert [b["step"] for b in service.of("rollouts")] == [1, 2, 3, 4]
    assert [b["step"] for b in service.of("snapshots")] == [2, 4]
    # a step's rollouts follow its step report; a snapshot follows the step it saved
    assert kinds.index("snapshots") > [i for i, k in enumerate(kinds) if k == "steps"][1]
    training = service.of("training")[0]
    assert training["totalSteps"] == 4
    assert training["dataFit"] == {
        "rows": 16,
        "rowsWithoutAnswer": 0,
    }

    step = service.of("steps")[1]
    metrics = step["metrics"]
    assert step["totalSteps"] == 4
    assert metrics["policy_loss"] == -0.02  # verl's actor/pg_loss of the fixture's step 2
    assert metrics["timing/generation"] > 0 and metrics["timing/update"] > 0
    assert metrics["timing/reward"] > 0  # from our reward records: verl's V1 logs none
    assert metrics["reward/mean"] == pytest.approx(sum(r["score"] for r in fixture_dump(2)) / 8)
    assert "terms/correct/share_mean" in metrics and "terms/format/share_std" in metrics
    assert "rollouts/without_record" not in metrics

    rollouts_report = service.of("rollouts")[0]
    rollouts = read_step_file(blobs.get_bytes(rollouts_report["blob"]))
    assert rollouts_report["count"] == len(rollouts) == 8
    assert rollouts_report["bestScore"] == max(r.score for r in rollouts)
    assert rollouts[0].shares == {"correct": 1.0, "format": 0.2}

    last = service.of("snapshots")[-1]
    sizes = {k: last.pop(k) for k in ("weightsBytes", "trainingStateBytes")}
    assert last == {
        "name": "step-4",
        "step": 4,
        "weights": "runs/run-1/snapshots/step-4/weights/",
        "trainingState": "runs/run-1/snapshots/step-4/training-state/",
    }
    assert all(size > 0 for size in sizes.values())
    assert blobs.exists("runs/run-1/snapshots/step-4/weights/adapter_model.safetensors")
    assert blobs.exists(
        "runs/run-1/snapshots/step-4/training-state/actor/model_world_size_1_rank_0.pt"
    )
    finished = service.of("finished")[0]
    assert finished["adapter"] == last["weights"] and finished["step"] == 4
    assert finished["adapterModules"][0] == "base_model.model.model.layers.0.self_attn.q_proj"


@pytest.mark.slow
def test_health_figures_come_from_the_workers_rollouts_and_a_pause_on_monitor_pauses_the_run(
    job: Job, service: RecordingService, in_process_factory: Callable[..., InProcessTrainer]
) -> None:
    # The fixtures' steps end in 4 distinct final answers of 8 (0.5): at the threshold.
    monitors = {
        "pauseOn": ["answer-collapse"],
        "consecutiveSteps": 2,
        "thresholds": {"answerCollapse": 0.5},
    }
    code, _ = job(
        step_seconds="0.3", save_every=100, monitors=monitors, rl={"training": {"maxSteps": 12}}
    )
    assert code == 0
    steps = service.of("steps")
    first = steps[0]["metrics"]
    dump = fixture_dump(1)
    outputs = [r["output"] for r in dump]
    answers = [o.rsplit("####", 1)[-1].strip() for o in outputs]
    assert first["health/distinct_completions/step"] == len(set(outputs)) / 8
    assert first["health/distinct_answers/step"] == len(set(answers)) / 8 == 0.5
    by_prompt: dict[str, list[str]] = {}
    for r in dump:
        by_prompt.setdefault(r["uid"].rsplit("_", 2)[0], []).append(r["output"])
    assert first["health/distinct_completions/group"] == pytest.approx(
        sum(len(set(g)) / len(g) for g in by_prompt.values()) / len(by_prompt)
    )
    assert first["entropy"] > 0  # verl's actor/entropy, which entropy-collapse watches
    # What the service keeps as the run's Health: the figures the monitors watch.
    shown = {v.spec.name: v.crossed for v in verdicts(first, Monitors.model_validate(monitors))}
    assert shown["answer-collapse"] is True and "zero-spread" in shown

    # Past the threshold two steps in a row: step 2's report asks for the pause, in its words.
    assert steps[0]["pause"] is None
    pause = steps[1]["pause"]
    assert pause["monitor"] == "answer-collapse" and pause["step"] == 2
    assert pause["reason"].startswith(
        "The answer-collapse monitor paused the run at step 2: health/distinct_answers/step was "
        "0.5 (at or below 0.5) for 2 steps in a row"
    )
    assert [s["step"] for s in steps if s["pause"] is not None] == [2]
    # ... and the job saves a snapshot and stops, as a pause with --checkpoint save does.
    snapshot = service.of("snapshots")[-1]
    assert 2 <= snapshot["step"] < 12
    assert service.of("stopped") == [{"step": snapshot["step"]}]

    # The service keeps these step reports as they came: `runs get` shows Health and pauses.
    trainer = in_process_factory({"trainer": {"projects": [{"name": "maths"}]}})
    api = trainer.client()
    register(api, "maths/train", chat_rows(12))
    plan = sft_plan(config={"method": "grpo", "monitors": monitors})
    del plan["config"]["hyperparams"]
    rl = {"promptsPerStep": 2, "generationsPerPrompt": 4, "maxCompletionTokens": 16}
    plan["config"]["rlHyperparams"] = rl
    plan["config"]["reward"] = {"terms": [{"name": "correct", "kind": "match"}]}
    started = api.post("/v1/runs", json=plan)
    assert started.status_code == 200, started.text
    run_id = started.json()["id"]
    launch = trainer.admit(run_id)
    reporting = trainer.job_client(launch)
    for body in steps[:2]:
        url = f"/v1/jobs/{run_id}/attempts/{launch.attempt}/steps"
        assert reporting.post(url, json=body).status_code == 200
    run = api.get(f"/v1/runs/{run_id}").json()
    assert run["phase"] == "PAUSING"
    health = run["health"]
    assert health["step"] == 2 and health["pause"]["reason"] == pause["reason"]
    rows = {r["monitor"]: r for r in health["monitors"]}
    assert rows["answer-collapse"]["crossed"] is True and rows["answer-collapse"]["pausesRun"]
    assert rows["answer-collapse"]["value"] == 0.5


def fixture_dump(step: int) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in (FIXTURES / "rollouts" / f"{step}.jsonl").read_text().splitlines()
    ]


@pytest.mark.slow
def test_stop_ends_verl_and_reports_stopped(job: Job, service: RecordingService) -> None:
    service.decide = lambda kind, body: (
        "stop" if kind == "steps" and body["step"] >= 2 else "continue"
    )
    # No scheduled snapshot before the stop (its export takes seconds on a loaded machine, and
    # verl goes on meanwhile), and steps to spare for the answer to come back under load.
    code, _ = job(step_seconds="0.3", save_every=100, rl={"training": {"maxSteps": 40}})
    assert code == 0
    assert service.kinds()[-1] == "stopped"
    assert service.of("stopped")[0]["step"] < 40
    assert "finished" not in service.kinds()


@pytest.mark.slow
def test_save_and_stop_saves_at_the_next_step(job: Job, service: RecordingService) -> None:
    service.decide = lambda kind, body: "save-and-stop" if kind == "steps" else "continue"
    code, blobs = job(step_seconds="0.3", save_every=100, rl={"training": {"maxSteps": 40}})
    assert code == 0
    snapshot = service.of("snapshots")[-1]
    assert 1 < snapshot["step"] < 40  # saved on request, not by the schedule (every 100 steps)
    assert service.of("stopped") == [{"step": snapshot["step"]}]
    assert blobs.exists(f"{snapshot['weights']}/adapter_config.json")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "code", "fragment"),
    [
        ("crash:1", "training-error", "RuntimeError: the policy update diverged"),
        ("oom:1", "device-oom", "CUDA out of memory"),
    ],
)
def test_verl_failure_is_reported_with_its_reason(
    job: Job, service: RecordingService, mode: str, code: str, fragment: str
) -> None:
    exit_code, _ = job(mode=mode, rl={"training": {"maxSteps": 4}})
    assert exit_code == 1
    failed = service.of("failed")
    assert failed[0]["code"] == code and fragment in failed[0]["detail"]
    assert [b["step"] for b in service.of("steps")] == [1]  # the step before the failure was kept


def test_resume_on_another_gpu_count_fails_before_verl_starts(
    job: Job, service: RecordingService, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    checkpoint = tmp_path / "elsewhere" / "global_step_2"
    (checkpoint / "actor").mkdir(parents=True)
    snapshots.save_training_state(
        blobs, "runs/run-1/snapshots/step-2/training-state", checkpoint, step=2, gpus=2
    )
    code, _ = job(resume=True)
    assert code == 1
    failed = service.of("failed")[0]
    assert failed["code"] == "training-error" and "set execution.gpus to 2" in failed["detail"]
    assert service.kinds() == ["failed"]


def test_plan_outside_verl_rules_fails_with_every_problem(
    job: Job, service: RecordingService
) -> None:
    code, _ = job(rl={"generationsPerPrompt": 1, "lora": {"rank": 1024}})
    assert code == 1
    detail = service.of("failed")[0]["detail"]
    assert "generationsPerPrompt to 2 or more" in detail and "above 512" in detail


def test_missing_verl_environment(service: RecordingService, tmp_path: Path) -> None:
    spec = make_spec()
    reporter = HttpReporter(
        service.url, spec.run_id, spec.attempt, "token", patience=10, heartbeat_seconds=60
    )
    job = JobContext(
        spec=spec, reporter=reporter, store=LocalBlobStore(tmp_path), workdir=tmp_path / "run"
    )
    try:
        code = run_engine(job, VerlEngine(verl_python=tmp_path / "nope"))
    finally:
        reporter.close()
    assert code == 1
    failed = service.of("failed")[0]
    assert failed["code"] == "job-start-failed" and "setup-verl-env.sh --gpu" in failed["detail"]


@pytest.mark.slow
def test_steps_reach_the_job_telemetry(job: Job, tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    made: list[JobTelemetry] = []

    def telemetry(spec: Any) -> JobTelemetry:
        made.append(
            JobTelemetry(
                job_resource_from_spec(spec),
                None,
                tmp_path / "artifacts",
                metric_readers=[reader],
                tensorboard=False,
            )
        )
        return made[0]

    code, _ = job(telemetry=telemetry, rl={"training": {"maxSteps": 3}})
    made[0].shutdown()
    assert code == 0
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        m.name: m.data.data_points
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    step_count = points["akka.optimize.training.rl.step.count"][0]
    assert isinstance(step_count, NumberDataPoint) and step_count.value == 3
    timing = {
        (p.attributes or {})["akka.optimize.training.reward.term"]: p.count
        for p in _histogram(points["akka.optimize.training.reward.term.timing"])
    }
    assert timing == {"correct": 24, "format": 24}  # 3 steps x 8 rollouts, each term
    assert _histogram(points["akka.optimize.training.rl.rollout.reward"])[0].count == 24
    phases = {
        (p.attributes or {})["akka.optimize.training.step.phase"]
        for p in _histogram(points["akka.optimize.training.rl.step.timing"])
    }
    assert phases == {"generation", "reward", "update"}
    lines = (tmp_path / "artifacts" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3 and "policy_loss" in lines[0]


@pytest.mark.slow
def test_verl_steps_keep_the_job_stall_watchdog_quiet(job: Job, tmp_path: Path) -> None:
    clock = ManualClock()
    made: list[StallWatchdog] = []

    def watchdog(reporter: HttpReporter) -> StallWatchdog:
        made.append(
            StallWatchdog(
                10.0,
                tmp_path / "artifacts",
                LocalBlobStore(tmp_path / "blobs"),
                lambda name: f"stall/{name}",
                reporter,
                clock=clock,
            )
        )
        made[0].progress()
        clock.advance(100.0)  # without a step from here on, the job would count as stalled
        return made[0]

    code, _ = job(watchdog=watchdog, rl={"training": {"maxSteps": 2}})
    assert code == 0
    assert made[0].check() is None and made[0].dumps == []


@pytest.mark.slow
def test_snapshots_survive_verl_saving_faster_than_they_export(
    job: Job, service: RecordingService, tmp_path: Path
) -> None:
    """verl saves every step while each export takes ten steps' time: no checkpoint vanishes
    under its export (verl's rotation is off), every snapshot is complete, and once stored the
    checkpoints before the latest one are removed from the node."""
    code, blobs = job(
        save_every=1, rl={"training": {"maxSteps": 5}}, env={"FAKE_VERL_EXPORT_SECONDS": "0.5"}
    )
    assert code == 0, service.of("failed")
    assert [s["step"] for s in service.of("snapshots")] == [1, 2, 3, 4, 5]
    for snapshot in service.of("snapshots"):
        state = snapshot["trainingState"]
        assert blobs.exists(f"{state}akka-verl.json") and blobs.exists(f"{state}data.pt")
        assert blobs.exists(f"{state}actor/model_world_size_1_rank_0.pt")
        assert blobs.exists(f"{snapshot['weights']}adapter_model.safetensors")
    # the finished run leaves only verl's logs and metrics on the node
    assert sorted(p.name for p in (tmp_path / RUN_DIR).iterdir()) == [
        "lock",
        "logs",
        "metrics",
        "pylib",
        "reward",
    ]


@pytest.mark.slow
def test_a_stopped_run_keeps_only_its_latest_stored_checkpoint_on_the_node(
    job: Job, service: RecordingService, tmp_path: Path
) -> None:
    service.decide = lambda kind, body: (
        "stop" if kind == "snapshots" and body["step"] >= 3 else "continue"
    )
    # Steps to spare: each snapshot's export takes seconds on a loaded machine, and verl goes
    # on meanwhile; it must still be training when the third snapshot's answer stops it.
    code, _ = job(save_every=1, step_seconds="0.3", rl={"training": {"maxSteps": 60}})
    assert code == 0 and service.kinds()[-1] == "stopped"
    stored = max(s["step"] for s in service.of("snapshots"))
    kept = sorted(
        int(p.name.removeprefix("global_step_"))
        for p in (tmp_path / RUN_DIR / "checkpoints").glob("global_step_*")
    )
    assert kept[0] == stored  # nothing older than the latest snapshot; later ones not stored
    assert list((tmp_path / RUN_DIR / "exports").iterdir()) == []  # no export scratch left


@pytest.mark.slow
def test_verl_rotating_its_own_checkpoints_would_lose_one_mid_export(
    job: Job, service: RecordingService
) -> None:
    """The stand-in rotates as verl does when max_actor_ckpt_to_keep is set: with it, the
    same run loses checkpoints before their snapshots (or fails mid-export), which is why the
    engine turns verl's rotation off."""
    code, _ = job(
        save_every=1,
        rl={"training": {"maxSteps": 5}},
        env={"FAKE_VERL_EXPORT_SECONDS": "0.5"},
        extra=("trainer.max_actor_ckpt_to_keep=2",),
    )
    snapshots = [s["step"] for s in service.of("snapshots")]
    if code == 1:
        assert "could not be saved" in service.of("failed")[0]["detail"]
    else:
        assert snapshots != [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_a_snapshot_holds_lora_weights_only_and_no_merged_model(
    job: Job, service: RecordingService, tmp_path: Path
) -> None:
    code, blobs = job(save_every=2, rl={"training": {"maxSteps": 2}, "lora": {"alpha": 32}})
    assert code == 0
    snapshot = service.of("snapshots")[0]
    weights = sorted(k.rsplit("/", 1)[-1] for k in blobs.list(snapshot["weights"]))
    assert weights == ["adapter_config.json", "adapter_model.safetensors"]
    config = json.loads(blobs.get_bytes(f"{snapshot['weights']}adapter_config.json"))
    assert (config["r"], config["lora_alpha"]) == (8, 32)
    shard = blobs.get_bytes(f"{snapshot['trainingState']}actor/model_world_size_1_rank_0.pt")
    import io

    import torch

    state = torch.load(io.BytesIO(shard))
    assert state and all("lora_" in key for key in state)  # no base weights
    manifest = json.loads(blobs.get_bytes(f"{snapshot['trainingState']}akka-verl.json"))
    assert manifest["files"]["actor/model_world_size_1_rank_0.pt"] == len(shard)
    # the report says what each part holds in the store (`runs snapshots` shows it)
    for part, size in (("weights", "weightsBytes"), ("trainingState", "trainingStateBytes")):
        assert snapshot[size] == sum(blobs.size(k) for k in blobs.list(snapshot[part]))


@pytest.mark.slow
def test_a_resume_on_the_same_node_reuses_the_checkpoint_left_there(
    job: Job, service: RecordingService, tmp_path: Path
) -> None:
    # attempt 1 stores the snapshot of step 2, then fails in step 3
    code, blobs = job(mode="crash:3", save_every=2, rl={"training": {"maxSteps": 6}})
    assert code == 1 and [s["step"] for s in service.of("snapshots")] == [2]
    # attempt 2 resumes from it, in its own job directory, from the copy on the node
    code, _ = job(resume=True, save_every=2, rl={"training": {"maxSteps": 6}})
    assert code == 0, service.of("failed")
    assert blobs.downloads == []  # neither the training state nor anything else downloaded
    log = (tmp_path / RUN_DIR / "logs" / "attempt-2.log").read_text()
    assert "fake verl: resuming from global_step_2" in log
    steps = [b["step"] for b in service.of("steps")]
    assert steps[-4:] == [3, 4, 5, 6]


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["finished", "save-and-stop"])
def test_verl_descendants_in_other_sessions_are_ended_on_a_normal_exit(
    job: Job, service: RecordingService, tmp_path: Path, ending: str
) -> None:
    """A child verl started in a session of its own (as Ray starts its raylet) outlives verl's
    normal exit; the job ends it, by its pid, whatever way verl ended."""
    if ending == "save-and-stop":
        service.decide = lambda kind, body: "save-and-stop" if kind == "steps" else "continue"
    child_file = tmp_path / "child.pid"
    code, _ = job(
        step_seconds="0.2",
        save_every=100,
        rl={"training": {"maxSteps": 3}},
        env={"FAKE_VERL_CHILD": str(child_file)},
    )
    assert code == 0
    assert service.kinds()[-1] == ("stopped" if ending == "save-and-stop" else "finished")
    pid = int(child_file.read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow
def test_a_resume_at_the_last_step_finishes_with_the_snapshots_adapter(
    job: Job, service: RecordingService
) -> None:
    """A run paused with a save at its last step has nothing left to train once resumed."""
    code, _ = job(save_every=2, rl={"training": {"maxSteps": 2}})
    assert code == 0
    code, _ = job(resume=True, save_every=2, rl={"training": {"maxSteps": 2}})
    assert code == 0, service.of("failed")
    finished = service.of("finished")[-1]
    assert finished["adapter"] == "runs/run-1/snapshots/step-2/weights/"
    assert finished["step"] == 2
    assert finished["adapterModules"][0] == "base_model.model.model.layers.0.self_attn.q_proj"


@pytest.mark.slow
def test_a_terminated_job_saves_at_its_step_and_ends_verl_and_its_descendants(
    service: RecordingService, tmp_path: Path
) -> None:
    """SIGTERM to the job process by pid (a node drain, a kill) is a save-and-stop: verl saves
    at the end of the step in progress, the job reports that snapshot and ``stopped`` (the run
    goes on from it), and verl and what it started in other sessions are gone when the job
    exits, instead of orphaned."""
    import os
    import signal
    import subprocess

    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {FIXTURES / "fake_verl.py"} "$@"\n')
    python.chmod(0o755)
    blobs = LocalBlobStore(tmp_path / "blobs")
    rows = [
        {
            "messages": [
                {"role": "user", "content": "1 + 1?"},
                {"role": "assistant", "content": "#### 2"},
            ]
        }
    ]
    blobs.put_bytes(
        "datasets/sha256/aa/train", "".join(json.dumps(r) + "\n" for r in rows * 16).encode()
    )
    spec = make_spec(
        rows=16,
        save_every=100,
        model_path=str(FIXTURES / "tokenizer"),
        rl={"promptsPerStep": 2, "generationsPerPrompt": 4, "training": {"maxSteps": 200}},
    ).model_copy(update={"trainer_url": service.url, "storage_url": f"file://{tmp_path / 'blobs'}"})
    job_dir = tmp_path / "jobs" / spec.run_id / str(spec.attempt)
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(spec.model_dump_json(by_alias=True))
    child_file = tmp_path / "child.pid"
    env = {
        **os.environ,
        "AKKA_JOB_BOOTSTRAP": "token",
        "AKKA_VERL_PYTHON": str(python),
        "FAKE_VERL_STEP_SECONDS": "0.3",
        "FAKE_VERL_CHILD": str(child_file),
        "FAKE_VERL_MODE": "",
    }
    job = subprocess.Popen(
        [sys.executable, "-m", "akka_training.engines.job", str(job_dir / "job.json")],
        cwd=job_dir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert service.wait_for("steps", timeout=120), (service.kinds(), service.of("failed"))
        child = psutil.Process(int(child_file.read_text()))
        verl = [
            p for p in psutil.Process(job.pid).children() if "fake_verl" in " ".join(p.cmdline())
        ]
        assert child.is_running() and verl
        step_at_signal = service.of("steps")[-1]["step"]
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=20) == 0, service.kinds()[-6:]
        snapshot = service.of("snapshots")[-1]
        # saved on request at the step verl was in (reports trail verl by a few steps), not by
        # the schedule (every 100 steps) nor at the end (step 200)
        assert step_at_signal <= snapshot["step"] < 100
        assert service.of("stopped") == [{"step": snapshot["step"]}]
        assert blobs.exists(f"{snapshot['weights']}/adapter_config.json")
        child.wait(timeout=5)  # raises if verl's descendant outlived the job
        verl[0].wait(timeout=5)
    finally:
        if job.poll() is None:
            job.kill()


@pytest.mark.slow
def test_a_continuation_trains_exactly_the_steps_asked_from_its_snapshot(
    job: Job, service: RecordingService, tmp_path: Path
) -> None:
    code, blobs = job(rl={"training": {"maxSteps": 4}, "optimizer": {"warmupRatio": 0.5}})
    assert code == 0
    manifest = json.loads(
        blobs.get_bytes("runs/run-1/snapshots/step-2/training-state/akka-verl.json")
    )
    assert manifest["scheduleSteps"] == 4  # the schedule a continuation keeps
    service.reports.clear()
    # The continuation is another run, with job directories of its own: only the store is shared.
    shutil.rmtree(tmp_path / "jobs")
    source = {
        "kind": "continue",
        "run": "run-1",
        "snapshot": "step-2",
        "step": 2,
        "weights": "runs/run-1/snapshots/step-2/weights/",
        "trainingState": "runs/run-1/snapshots/step-2/training-state/",
    }
    # `runs continue run-1 --snapshot step-2 --steps 1`: one step, step 3, and no more
    code, _ = job(
        rl={"training": {"maxSteps": 1}, "optimizer": {"warmupRatio": 0.5}}, source=source
    )
    assert code == 0
    assert [b["step"] for b in service.of("steps")] == [3]
    assert service.of("training")[0]["totalSteps"] == 3
    assert service.of("finished")[0]["step"] == 3
