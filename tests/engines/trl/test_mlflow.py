"""A run tracked in a real MLflow server (started on loopback by the test): a paused first
attempt and its resumed second attempt are one MLflow run, with the resolved settings as
params, every step's figures, the adapter and its model card, the TensorBoard files of each
attempt, and tags for the project, the lineage and the attempt. The TensorBoard files are also
kept with the run in the blob store."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from akka_training.core.resolved import ResumePoint
from tests.engines.conftest import ReportServer
from tests.engines.jobs import make_spec, put_dataset, run_in_process
from tests.engines.rows import chat_rows

pytestmark = pytest.mark.slow

mlflow = pytest.importorskip("mlflow", reason="the dev extra installs the MLflow server")

SFT = {
    "method": "sft",
    "maxSeqLength": 64,
    "hyperparams": {"lora": {"rank": 4, "alpha": 8}, "training": {"maxSteps": 4, "batchSize": 4}},
}


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """`mlflow server` on a free loopback port, with a SQLite store and served artifacts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or "mlflow"
    root = tmp_path / "mlflow"
    root.mkdir()
    process = subprocess.Popen(
        [
            command,
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MLFLOW_HOST": "127.0.0.1"},
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    drain: threading.Thread | None = None
    try:
        # The server says when it listens; its output is read as it comes (no polling).
        assert process.stdout is not None
        said: list[str] = []
        for line in process.stdout:
            said.append(line)
            if "Uvicorn running on" in line:
                break
        else:
            raise RuntimeError("mlflow server ended:\n" + "".join(said[-50:]))
        # The rest of its output is read too, so that it never waits on a full pipe.
        drain = threading.Thread(target=_drain, args=(process.stdout,), daemon=True)
        drain.start()
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        yield url
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=30)
        if drain is not None:
            drain.join(timeout=30)  # the pipe ends with the server
        if process.stdout is not None:
            process.stdout.close()


def _drain(stream: IO[str]) -> None:
    for _ in stream:
        pass


def test_the_attempts_of_a_run_are_one_mlflow_run(
    mlflow_server: str,
    catalog: dict[str, dict[str, Any]],
    report_server: ReportServer,
    store: Any,
    tmp_path: Path,
) -> None:
    dataset = put_dataset(store, "maths", chat_rows(16))

    def spec(attempt: int, resume: ResumePoint | None = None) -> Any:
        made = make_spec(
            model=catalog["tiny-chat"],
            dataset=dataset,
            config=SFT,
            trainer_url=report_server.url,
            store=store,
            run_id="run-tracked",
            attempt=attempt,
            resume=resume,
            execution={"saveEvery": 100},
        )
        made.telemetry.mlflow_uri = mlflow_server
        # Each step reports and asks on its own, so the scripted pause lands at step 2.
        made.telemetry.report_seconds = 0
        return made

    # The first attempt is paused after step 2 (saved, then stopped).
    report_server.script = lambda kind, body, reports: (
        "save-and-stop" if kind == "steps" and body["step"] >= 2 else "continue"
    )
    assert run_in_process(spec(1), tmp_path / "attempt-1") == 0
    snapshot = report_server.of("snapshots")[-1]
    client = mlflow.tracking.MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("akka-training/test")
    (paused,) = client.search_runs([experiment.experiment_id])
    assert paused.info.status == "KILLED"
    assert paused.data.tags["akka.attempt"] == "1"

    report_server.script = lambda kind, body, reports: "continue"
    resume = ResumePoint(
        snapshot=snapshot["name"],
        step=snapshot["step"],
        weights=snapshot["weights"],
        training_state=snapshot["trainingState"],
    )
    assert run_in_process(spec(2, resume), tmp_path / "attempt-2") == 0

    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == paused.info.run_id  # the second attempt continued it
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["akka.project"] == "test"
    assert tags["akka.run.id"] == "run-tracked"
    assert tags["akka.attempt"] == "2"
    assert tags["akka.lineage"] == "a fresh adapter (no source run)"
    assert tags["akka.method"] == "sft"
    params = run.data.params
    assert params["method"] == "sft"
    assert params["config.hyperparams.lora.rank"] == "4"
    assert params["baseModel.id"] == "tiny-chat"
    losses = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in losses) == [1, 2, 3, 4]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "adapter")}
    assert {
        "adapter/adapter_config.json",
        "adapter/adapter_model.safetensors",
        "adapter/README.md",
    } <= artifacts
    card = Path(client.download_artifacts(run.info.run_id, "adapter/README.md", str(tmp_path)))
    assert "run-tracked" in card.read_text()
    boards = {a.path for a in client.list_artifacts(run.info.run_id, "tensorboard")}
    assert boards == {"tensorboard/attempt-1", "tensorboard/attempt-2"}

    # The TensorBoard files are kept with the run in the store, per attempt.
    for attempt in (1, 2):
        kept = store.list(f"runs/run-tracked/attempts/{attempt}/tensorboard/")
        assert any("tfevents" in key for key in kept), (attempt, kept)


def test_a_tracking_server_that_does_not_answer_leaves_training_alone(
    catalog: dict[str, dict[str, Any]],
    store: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from akka_training.telemetry.tracking import MlflowTracking

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once closed
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(4)),
        config=SFT,
        trainer_url="http://127.0.0.1:9",
        store=store,
    )
    with caplog.at_level("WARNING"):
        assert MlflowTracking.open(url, spec) is None
    assert f"MLflow tracking is off: {url} did not answer as MLflow" in caplog.text
