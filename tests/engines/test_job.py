"""The job entry point: its lifecycle reports, the service's directives and its failures."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from akka_training.core.resolved import SourcePin
from tests.engines.conftest import ReportServer
from tests.engines.jobs import TOKEN, make_spec, put_dataset, run_in_process
from tests.engines.rows import chat_rows

# Every test here runs the job entry point for real (in this process or as its own).
pytestmark = pytest.mark.slow

SRC = Path(__file__).resolve().parents[2] / "src"
SFT: dict[str, Any] = {
    "method": "sft",
    "maxSeqLength": 64,
    "hyperparams": {"lora": {"rank": 4}, "training": {"maxSteps": 6, "batchSize": 2}},
}

# Runs the entry point with the data segment limited to what the process holds once the training
# libraries are imported, plus MARGIN bytes: enough to load the tiny model and prepare the data,
# not enough for a step over long rows.
LIMITED = textwrap.dedent(
    """
    import resource, runpy, sys
    import datasets, peft, torch, transformers, trl
    import akka_training.engines.trl.sft
    data = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmData:"))
    limit = data + int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    sys.argv = ["akka_training.engines.job", sys.argv[2]]
    runpy.run_module("akka_training.engines.job", run_name="__main__")
    """
)


def test_a_stop_directive_stops_the_job_and_reports_where_it_ran(
    catalog: dict[str, dict[str, Any]],
    report_server: ReportServer,
    store: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAME", "trainer-job-abc")
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    report_server.script = lambda kind, body, reports: "stop" if kind == "steps" else "continue"
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(12)),
        config=SFT,
        trainer_url=report_server.url,
        store=store,
        execution={"saveEvery": 1},
    )

    assert run_in_process(spec, tmp_path / "job") == 0

    placement = report_server.of("started")[0]["placement"]
    assert (placement["pod"], placement["node"], placement["pid"]) == (
        "trainer-job-abc",
        "gpu-node-7",
        os.getpid(),
    )
    assert placement["gpus"] == []
    stopped = report_server.of("stopped")[0]["step"]
    assert report_server.kinds()[-1] == "stopped"
    assert 1 <= stopped < 6
    assert "finished" not in report_server.kinds()
    assert all(r.token == TOKEN for r in report_server.reports)


def test_a_malformed_dataset_fails_with_data_error(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    dataset = put_dataset(store, "maths", chat_rows(4))
    store.put_bytes(dataset.blob, store.get_bytes(dataset.blob) + b"{not json\n")
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=dataset,
        config=SFT,
        trainer_url=report_server.url,
        store=store,
    )

    assert run_in_process(spec, tmp_path / "job") == 1

    failed = report_server.of("failed")[0]
    assert failed["code"] == "data-error"
    assert "line 5" in failed["detail"]


def test_a_missing_source_adapter_fails_with_source_unavailable(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(4)),
        config=SFT,
        trainer_url=report_server.url,
        store=store,
        source=SourcePin(
            kind="warm-start", run="gone", snapshot=None, step=3, weights="runs/gone/adapter/"
        ),
    )

    assert run_in_process(spec, tmp_path / "job") == 1

    assert report_server.kinds() == ["started", "failed"]
    assert report_server.of("failed")[0]["code"] == "source-unavailable"


def test_running_out_of_host_memory_reports_host_oom(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    long_prompt = " ".join(["please"] * 200)
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"{long_prompt} {i}"},
                {"role": "assistant", "content": "ok"},
            ]
        }
        for i in range(8)
    ]
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "long", rows),
        config={
            "method": "sft",
            "maxSeqLength": 2048,
            "hyperparams": {"training": {"maxSteps": 1, "batchSize": 8}},
        },
        trainer_url=report_server.url,
        store=store,
    )
    job_json = tmp_path / "job.json"
    job_json.write_text(spec.model_dump_json(by_alias=True))

    done = subprocess.run(
        [sys.executable, "-c", LIMITED, str(200 * 2**20), str(job_json)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SRC), "AKKA_JOB_BOOTSTRAP": TOKEN},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 1, done.stderr[-3000:]
    assert report_server.kinds() == ["started", "training", "failed"]
    failed = report_server.of("failed")[0]
    assert failed["code"] == "host-oom"
    assert "host memory ran out" in failed["detail"]
    assert "config.hyperparams.training.batchSize 8" in failed["detail"]


def test_the_entry_point_refuses_to_run_without_its_bootstrap_credential(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "akka_training.engines.job", str(tmp_path / "job.json")],
        env={k: v for k, v in os.environ.items() if k != "AKKA_JOB_BOOTSTRAP"}
        | {"PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 2
    assert "AKKA_JOB_BOOTSTRAP is not set: the job cannot report to the service" in done.stderr


# Runs the entry point with the reporter's sending thread raising at the report of step 2, as
# it did when a NaN figure could not be written as JSON.
REPORTER_DIES = textwrap.dedent(
    """
    import runpy, sys
    from akka_training.engines import reporter
    send = reporter.HttpReporter._send_waiting
    def failing(self, waiting):
        if any(kind == "steps" and body["step"] >= 2 for kind, body, _ in waiting):
            raise ValueError("Out of range float values are not JSON compliant")
        return send(self, waiting)
    reporter.HttpReporter._send_waiting = failing
    sys.argv = ["akka_training.engines.job", sys.argv[1]]
    runpy.run_module("akka_training.engines.job", run_name="__main__")
    """
)


def test_a_job_whose_reporter_dies_ends_itself_and_reports_the_failure(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(12)),
        config={**SFT, "hyperparams": {**SFT["hyperparams"], "training": {"maxSteps": 2000}}},
        trainer_url=report_server.url,
        store=store,
    )
    job_json = tmp_path / "job.json"
    job_json.write_text(spec.model_dump_json(by_alias=True))

    done = subprocess.run(
        [sys.executable, "-c", REPORTER_DIES, str(job_json)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SRC), "AKKA_JOB_BOOTSTRAP": TOKEN},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 1, done.stderr[-3000:]
    assert report_server.kinds()[-1] == "failed"
    failed = report_server.of("failed")[0]
    assert failed["code"] == "training-error"
    assert (
        "the job's reporting thread failed (ValueError: Out of range float values are not "
        "JSON compliant), so the trainer could no longer hear of its steps; the job ended itself"
    ) in failed["detail"]
    # It stopped at the end of the step it was in, not at the end of its 2000 steps (a loaded
    # machine may let it run a few dozen steps before the sending thread is scheduled).
    assert "after step 2000" not in failed["detail"]
