"""Supervised fine-tuning jobs end to end: a real TRL run on the tiny models, reporting to a
recording HTTP server, with a temporary blob store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from akka_training.core.resolved import ResumePoint, SourcePin
from akka_training.engines.job import open_reporter, run_job
from akka_training.engines.snapshots import upload_snapshot
from akka_training.engines.trl import steps as steps_module
from tests.engines.conftest import ReportServer
from tests.engines.jobs import TOKEN, make_spec, put_dataset, run_in_process
from tests.engines.rows import chat_rows, image_rows, long_chat_rows

# Every test here trains a real job.
pytestmark = pytest.mark.slow

SFT: dict[str, Any] = {
    "method": "sft",
    "maxSeqLength": 64,
    "hyperparams": {
        "lora": {"rank": 4, "alpha": 8},
        "optimizer": {"learningRate": 5e-3},
        "training": {"maxSteps": 4, "batchSize": 4, "validationFrequencySteps": 2},
    },
}


def test_sft_completes_and_the_adapter_changes_the_model(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    model = catalog["tiny-chat"]
    spec = make_spec(
        model=model,
        dataset=put_dataset(store, "maths", chat_rows(16)),
        eval_dataset=put_dataset(store, "maths-eval", chat_rows(4, seed=1)),
        config=SFT,
        trainer_url=report_server.url,
        store=store,
        execution={"saveEvery": 2},
    )

    assert run_in_process(spec, tmp_path / "job") == 0

    kinds = report_server.kinds()
    assert kinds[0] == "started" and kinds[1] == "training" and kinds[-1] == "finished"
    steps = report_server.of("steps")
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert all(s["totalSteps"] == 4 for s in steps)
    assert [s["step"] for s in report_server.of("snapshots")] == [2, 4]
    finished = report_server.of("finished")[0]
    assert finished["adapter"] == "runs/run-1/adapter/"
    assert store.list("runs/run-1/adapter/") == [
        "runs/run-1/adapter/adapter_config.json",
        "runs/run-1/adapter/adapter_model.safetensors",
    ]
    adapter = store.local_path("runs/run-1/adapter")
    base = AutoModelForCausalLM.from_pretrained(model["path"])
    tokenizer = AutoTokenizer.from_pretrained(model["path"])
    ids = tokenizer("What is 1 + 2?", return_tensors="pt")
    with torch.no_grad():
        before = base(**ids).logits
        tuned = PeftModel.from_pretrained(base, str(adapter))
        after = tuned(**ids).logits
    assert not torch.allclose(before, after)
    print(steps[-1])


def test_pause_then_resume_continues_the_same_loss_curve(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    config = {
        **SFT,
        "hyperparams": {**SFT["hyperparams"], "training": {"maxSteps": 6, "batchSize": 2}},
    }
    dataset = put_dataset(store, "maths", chat_rows(12))

    def spec(run_id: str, attempt: int = 1, resume: ResumePoint | None = None) -> Any:
        made = make_spec(
            model=catalog["tiny-chat"],
            dataset=dataset,
            config=config,
            trainer_url=report_server.url,
            store=store,
            run_id=run_id,
            attempt=attempt,
            resume=resume,
            execution={"saveEvery": 100},
        )
        # Each step reports and asks on its own, so the scripted pause lands at step 2.
        made.telemetry.report_seconds = 0
        return made

    assert run_in_process(spec("straight"), tmp_path / "straight") == 0
    straight = _losses(report_server, "straight")

    # The service answers step 2's report with a pause (save, then stop).
    report_server.script = lambda kind, body, reports: (
        "save-and-stop" if kind == "steps" and body["step"] >= 2 else "continue"
    )
    report_server.reports.clear()
    assert run_in_process(spec("paused"), tmp_path / "paused-1") == 0
    snapshot = report_server.of("snapshots")[-1]
    assert report_server.kinds()[-2:] == ["snapshots", "stopped"]
    assert report_server.of("stopped")[0]["step"] == snapshot["step"] < 6

    report_server.script = lambda kind, body, reports: "continue"
    report_server.reports.clear()
    resume = ResumePoint(
        snapshot=snapshot["name"],
        step=snapshot["step"],
        weights=snapshot["weights"],
        training_state=snapshot["trainingState"],
    )
    assert run_in_process(spec("paused", attempt=2, resume=resume), tmp_path / "paused-2") == 0
    resumed = _losses(report_server, "paused")

    assert sorted(resumed) == list(range(snapshot["step"] + 1, 7))
    for step, loss in resumed.items():
        assert abs(loss - straight[step]) < 1e-4, (step, loss, straight[step])


def test_a_pause_asked_for_during_a_step_saves_at_the_end_of_that_step(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    spec = _short_steps(catalog, report_server, store, steps=8, save_every=100)
    # Each step asks on its own (a job whose steps are this short asks about once every
    # `report-seconds` by default: tests/engines/test_reporter.py).
    spec.telemetry.report_seconds = 0
    # The pause arrives while step 3 trains (after step 2 was reported); the service answers
    # with it from then on, the background heartbeat being seconds away.
    report_server.script = lambda kind, body, reports: (
        "save-and-stop" if kind == "heartbeat" and (body.get("step") or 0) >= 2 else "continue"
    )
    assert run_in_process(spec, tmp_path / "job") == 0
    assert [s["step"] for s in report_server.of("snapshots")] == [3]
    assert report_server.of("stopped")[0]["step"] == 3


def test_a_pause_that_comes_during_a_periodic_save_stops_at_that_step_and_reports_it(
    catalog: dict[str, dict[str, Any]],
    report_server: ReportServer,
    store: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Step 4 saves (`saveEvery` 2); the pause reaches the job while that save
    # uploads, after the step's end hook read the directive. The snapshot just taken is the
    # pause's: the job reports step 4 and stops there (it once saved again at step 5 and
    # never reported step 4: the demo's run lost its step 20 so).
    spec = _short_steps(catalog, report_server, store, steps=8, save_every=2)
    spec.telemetry.report_seconds = 0
    reporter = open_reporter(spec, TOKEN)
    upload = upload_snapshot

    def upload_then_pause(*args: Any) -> Any:
        report = upload(*args)
        if report.step == 4:
            report_server.script = lambda kind, body, reports: "save-and-stop"
            reporter.refresh_action()
            assert reporter.action == "save-and-stop"
        return report

    monkeypatch.setattr(steps_module, "upload_snapshot", upload_then_pause)
    workdir = tmp_path / "job"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    try:
        assert run_job(spec, reporter, workdir) == 0
    finally:
        reporter.close()

    assert [s["step"] for s in report_server.of("steps")] == [1, 2, 3, 4]
    assert [s["step"] for s in report_server.of("snapshots")] == [2, 4]
    assert report_server.of("stopped")[0]["step"] == 4


def test_short_steps_are_each_reported_once_in_fewer_requests_and_a_pause_still_saves(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    # Steps of a few hundredths of a second, under the default `report-seconds` (1 s): the
    # job sends several steps in one request, each step once and in order, and a pause still
    # saves. (How many requests go per interval is the reporter's, pinned under a held clock
    # in tests/engines/test_reporter.py: here it would depend on how busy the machine is.)
    spec = _short_steps(catalog, report_server, store, steps=200, save_every=1000)
    assert spec.telemetry.report_seconds == 1.0
    report_server.script = lambda kind, body, reports: (
        "save-and-stop"
        if any(r.kind == "steps" and r.body["step"] >= 5 for r in reports)
        else "continue"
    )
    assert run_in_process(spec, tmp_path / "job") == 0

    stopped = report_server.of("stopped")[0]["step"]
    assert [s["step"] for s in report_server.of("snapshots")] == [stopped]
    assert 5 <= stopped < 200
    assert [s["step"] for s in report_server.of("steps")] == list(range(1, stopped + 1))
    with report_server.lock:
        requests = [k for k in report_server.requests if k in ("steps", "batch", "heartbeat")]
    assert "batch" in requests


def _short_steps(
    catalog: dict[str, dict[str, Any]],
    report_server: ReportServer,
    store: Any,
    steps: int,
    save_every: int,
) -> Any:
    """An SFT job of `steps` steps of a few hundredths of a second."""
    config = {
        **SFT,
        "hyperparams": {**SFT["hyperparams"], "training": {"maxSteps": steps, "batchSize": 2}},
    }
    return make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(12)),
        config=config,
        trainer_url=report_server.url,
        store=store,
        execution={"saveEvery": save_every},
    )


def _losses(server: ReportServer, run_id: str) -> dict[int, float]:
    return {s["step"]: s["metrics"]["loss"] for s in server.of("steps")}


def test_an_image_text_run_adapts_the_language_model_only(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    config = {
        **SFT,
        "maxSeqLength": 128,
        "hyperparams": {**SFT["hyperparams"], "training": {"maxSteps": 2, "batchSize": 2}},
    }
    spec = make_spec(
        model=catalog["tiny-vision"],
        dataset=put_dataset(store, "colours", image_rows(4)),
        config=config,
        trainer_url=report_server.url,
        store=store,
    )

    assert run_in_process(spec, tmp_path / "job") == 0

    modules = report_server.of("training")[0]["adapterModules"]
    assert modules and all(m.startswith("model.language_model.layers.") for m in modules)
    assert not any("vision" in m or "audio" in m or "projector" in m for m in modules)
    # all-linear over the language backbone: 7 projections in each of the 2 layers.
    assert len(modules) == 14
    assert report_server.of("finished")[0]["adapterModules"] == modules
    assert [s["step"] for s in report_server.of("steps")] == [1, 2]


def test_a_warm_start_trains_on_from_the_source_adapter(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    dataset = put_dataset(store, "maths", chat_rows(16))
    first = make_spec(
        model=catalog["tiny-chat"],
        dataset=dataset,
        config=SFT,
        trainer_url=report_server.url,
        store=store,
        run_id="source",
    )
    assert run_in_process(first, tmp_path / "source") == 0
    source_losses = [s["metrics"]["loss"] for s in report_server.of("steps")]
    report_server.reports.clear()

    warm = make_spec(
        model=catalog["tiny-chat"],
        dataset=dataset,
        config=SFT,
        trainer_url=report_server.url,
        store=store,
        run_id="warm",
        source=SourcePin(
            kind="warm-start", run="source", snapshot=None, step=4, weights="runs/source/adapter/"
        ),
    )
    assert run_in_process(warm, tmp_path / "warm") == 0

    warm_losses = [s["metrics"]["loss"] for s in report_server.of("steps")]
    # Same seed, same data: both runs' first step takes the same batch. The warm start meets it
    # with the source's trained adapter, so its loss there is lower.
    assert warm_losses[0] < source_losses[0] - 0.1
    assert (
        report_server.of("training")[0]["adapterModules"]
        == report_server.of("finished")[0]["adapterModules"]
    )


def test_step_figures_on_cpu(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", long_chat_rows(16)),
        eval_dataset=put_dataset(store, "maths-eval", chat_rows(4, seed=1)),
        config={**SFT, "maxSeqLength": 48},
        trainer_url=report_server.url,
        store=store,
        execution={"saveEvery": 2},
    )

    assert run_in_process(spec, tmp_path / "job") == 0

    steps = {s["step"]: s["metrics"] for s in report_server.of("steps")}
    every = {
        "loss",
        "learning_rate",
        "grad_norm",
        "tokens",
        "tokens_per_second",
        "timing/step",
        "padding_share",
        "memory/host_peak",
    }
    for figures in steps.values():
        assert every <= set(figures)
        # On CPU: no device split and no MFU (no known peak).
        assert not any(k.startswith("memory/") and k != "memory/host_peak" for k in figures)
        assert "mfu" not in figures
        assert figures["memory/host_peak"] > 50 * 2**20
        assert 0 <= figures["padding_share"] < 1
        assert figures["tokens_per_second"] == pytest.approx(
            figures["tokens"] / figures["timing/step"]
        )
    assert {"eval_loss", "timing/evaluation", "timing/save"} <= set(steps[2]) & set(steps[4])
    assert not {"eval_loss", "timing/save"} & set(steps[1])
    assert any(f["padding_share"] > 0 for f in steps.values())
    fit = report_server.of("training")[0]["dataFit"]
    assert fit["rows"] == 16 and fit["maxSeqLength"] == 48 and fit["rowsTruncated"] > 0


def test_a_continuation_carries_on_with_the_source_snapshots_training_state(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    config = {
        **SFT,
        "hyperparams": {**SFT["hyperparams"], "training": {"maxSteps": 4, "batchSize": 2}},
    }
    dataset = put_dataset(store, "maths", chat_rows(12))
    source = make_spec(
        model=catalog["tiny-chat"],
        dataset=dataset,
        config=config,
        trainer_url=report_server.url,
        store=store,
        run_id="source",
        execution={"saveEvery": 2},
    )
    assert run_in_process(source, tmp_path / "source") == 0
    source_losses = {s["step"]: s["metrics"]["loss"] for s in report_server.of("steps")}
    snapshot = next(s for s in report_server.of("snapshots") if s["step"] == 2)
    report_server.reports.clear()

    continued = make_spec(
        model=catalog["tiny-chat"],
        dataset=dataset,
        config={
            **config,
            "hyperparams": {**config["hyperparams"], "training": {"maxSteps": 2, "batchSize": 2}},
        },
        trainer_url=report_server.url,
        store=store,
        run_id="continued",
        source=SourcePin(
            kind="continue",
            run="source",
            snapshot="step-2",
            step=2,
            weights=snapshot["weights"],
            training_state=snapshot["trainingState"],
        ),
    )
    assert run_in_process(continued, tmp_path / "continued") == 0

    losses = {s["step"]: s["metrics"]["loss"] for s in report_server.of("steps")}
    assert sorted(losses) == [3, 4]
    for step, loss in losses.items():
        assert loss == pytest.approx(source_losses[step], abs=1e-4)


def test_liger_kernels_on_a_cpu_fail_the_job_at_its_start_with_what_to_change(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    config = {**SFT, "hyperparams": {**SFT["hyperparams"], "training": {"kernels": "liger"}}}
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(8)),
        config=config,
        trainer_url=report_server.url,
        store=store,
    )

    assert run_in_process(spec, tmp_path / "job") == 1

    failed = report_server.of("failed")[0]
    assert failed["code"] == "job-start-failed"
    assert failed["detail"] == (
        "config.hyperparams.training.kernels is liger, but this job runs on a CPU and Liger's "
        "kernels run on GPUs only: remove kernels from the plan or run it on a GPU pool"
    )
    assert "training" not in report_server.kinds()
