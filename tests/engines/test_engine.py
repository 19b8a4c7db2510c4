"""The `Engine` protocol and its registry, and the entry point's one end report for whatever an
engine returns or raises."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest

from akka_training.blobstore import LocalBlobStore
from akka_training.core.catalog import engine_for
from akka_training.core.failures import FailureReason
from akka_training.core.plans import Method
from akka_training.engines.context import JobContext, Outcome
from akka_training.engines.engine import ENGINES, Engine, load_engine
from akka_training.engines.failures import DataError, RewardError
from akka_training.engines.job import run_engine
from akka_training.engines.reporter import HttpReporter
from tests.engines.conftest import ReportServer
from tests.engines.jobs import TOKEN, make_spec, put_dataset, run_in_process
from tests.engines.rows import chat_rows

SFT = {"method": "sft", "hyperparams": {"training": {"maxSteps": 1}}}


class Raises:
    """An engine that fails the way it is told to."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def run(self, job: JobContext) -> Outcome:
        raise self.error


class Returns:
    """An engine that ends with the outcome it is given."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def run(self, job: JobContext) -> Outcome:
        return self.outcome


@pytest.fixture
def job(
    catalog: dict[str, dict[str, Any]],
    report_server: ReportServer,
    store: LocalBlobStore,
    tmp_path: Path,
) -> Iterator[JobContext]:
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(4)),
        config=SFT,
        trainer_url=report_server.url,
        store=store,
    )
    reporter = HttpReporter(
        spec.trainer_url, spec.run_id, spec.attempt, TOKEN, patience=10, heartbeat_seconds=60
    )
    try:
        yield JobContext(spec=spec, reporter=reporter, store=store, workdir=tmp_path / "job")
    finally:
        reporter.close()


@pytest.mark.slow  # loading the engines imports the training stack
@pytest.mark.parametrize(("method", "engine"), sorted(ENGINES))
def test_every_registered_engine_satisfies_the_protocol(method: str, engine: str) -> None:
    loaded = load_engine(method, engine)

    assert isinstance(loaded, Engine)
    assert list(inspect.signature(loaded.run).parameters) == ["job"]


def test_every_method_the_service_resolves_has_an_engine() -> None:
    resolved = {
        (m, engine_for(m, rl_engine)) for m in get_args(Method) for rl_engine in ("trl", "verl")
    }

    assert resolved <= set(ENGINES)


def test_a_job_error_becomes_one_failed_report_with_its_reason_and_detail(
    job: JobContext, report_server: ReportServer
) -> None:
    error = RewardError("the judge at http://127.0.0.1:9 did not answer")

    assert run_engine(job, Raises(error)) == 1

    assert report_server.kinds() == ["failed"]
    failed = report_server.of("failed")[0]
    assert failed == {
        "code": "reward-error",
        "detail": "the judge at http://127.0.0.1:9 did not answer",
    }
    assert FailureReason(failed["code"]).sentence == "this run's reward could not be computed"


def test_a_job_error_keeps_its_reason_even_when_its_detail_mentions_memory(
    job: JobContext, report_server: ReportServer
) -> None:
    # The engine recognised the reason: a log line it quotes does not overrule it.
    error = DataError("row 3: the text 'CUDA out of memory' is not an answer")

    assert run_engine(job, Raises(error)) == 1

    assert report_server.of("failed") == [{"code": "data-error", "detail": str(error)}]


def test_any_other_exception_is_classified(job: JobContext, report_server: ReportServer) -> None:
    try:
        raise MemoryError("while tokenizing the prompts")
    except MemoryError as exc:
        error = RuntimeError("the step failed")
        error.__cause__ = exc

    assert run_engine(job, Raises(error)) == 1

    failed = report_server.of("failed")[0]
    assert failed["code"] == "host-oom"
    assert failed["detail"].startswith(
        "host memory ran out (an allocation of the job itself failed): MemoryError: while "
        "tokenizing"
    )
    assert "config.maxSeqLength" in failed["detail"]


def test_a_stopped_outcome_is_one_stopped_report(
    job: JobContext, report_server: ReportServer
) -> None:
    assert run_engine(job, Returns(Outcome(step=3, stopped=True))) == 0

    assert report_server.kinds() == ["stopped"]
    assert report_server.of("stopped") == [{"step": 3}]


def test_a_final_adapter_directory_is_uploaded_and_a_stored_one_reported_as_it_is(
    job: JobContext, report_server: ReportServer, store: LocalBlobStore, tmp_path: Path
) -> None:
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    uploaded = Outcome(step=4, adapter_dir=adapter, adapter_modules=["q_proj"])
    stored = Outcome(step=4, adapter_key="runs/run-1/snapshots/step-4/weights/")

    assert run_engine(job, Returns(uploaded)) == 0
    assert run_engine(job, Returns(stored)) == 0

    first, second = report_server.of("finished")
    assert first == {
        "adapter": "runs/run-1/adapter/",
        "step": 4,
        "adapterModules": ["q_proj"],
        "summary": {},
    }
    assert store.get_bytes("runs/run-1/adapter/adapter_model.safetensors") == b"weights"
    assert second["adapter"] == "runs/run-1/snapshots/step-4/weights/"


def test_an_outcome_without_an_adapter_fails_the_run(
    job: JobContext, report_server: ReportServer
) -> None:
    assert run_engine(job, Returns(Outcome(step=2))) == 1

    failed = report_server.of("failed")[0]
    assert failed["code"] == "training-error"
    assert "training ended without an adapter to save" in failed["detail"]
    assert "finished" not in report_server.kinds()


def test_a_plan_no_engine_trains_fails_saying_what_this_job_trains(
    catalog: dict[str, dict[str, Any]],
    report_server: ReportServer,
    store: LocalBlobStore,
    tmp_path: Path,
) -> None:
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(4)),
        config=SFT,
        trainer_url=report_server.url,
        store=store,
        engine="verl",
    )

    assert run_in_process(spec, tmp_path / "job") == 1

    assert report_server.kinds() == ["started", "failed"]
    failed = report_server.of("failed")[0]
    assert failed["code"] == "training-error"
    assert failed["detail"] == (
        "no engine trains sft on verl (this job trains sft on trl; dpo on trl; grpo on trl or "
        "verl; gspo on trl or verl): resubmit the run so that its plan is resolved again"
    )
