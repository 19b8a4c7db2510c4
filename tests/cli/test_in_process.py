"""Commands against the real app in this process, as a user reads them: -q prints only what a
script captures (`EV=$(akka ... -q)`), refusals say what is wrong, confirmations are
sentences."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from akka_training.cli.main import main
from akka_training.cli.state import State
from akka_training.client import TrainerClient
from akka_training.testing.app import BASE_URL, InProcessTrainer
from tests.server.routers.helpers import chat_rows, register
from tests.server.routers.test_adapters import completed_run
from tests.server.routers.test_evaluation_claims import evaluation_plan

Akka = Callable[..., tuple[int, str, str]]


@pytest.fixture
def trainer(in_process_factory: Callable[..., InProcessTrainer]) -> InProcessTrainer:
    trainer = in_process_factory({"trainer": {"projects": [{"name": "maths"}]}})
    register(trainer.client(), "maths/train", chat_rows(12))
    return trainer


@pytest.fixture
def akka(
    trainer: InProcessTrainer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Akka]:
    client = TrainerClient(BASE_URL, trainer.admin_token)
    client._http = trainer.client()  # the real client, over the app in this process
    monkeypatch.setattr(State, "client", lambda self: client)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    yield run
    client.close()


def plan_file(tmp_path: Path) -> str:
    path = tmp_path / "evaluation.json"
    path.write_text(json.dumps(evaluation_plan()))
    return str(path)


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_quiet_prints_only_the_id_an_evaluation_got_and_the_tasks_ids(
    akka: Akka, tmp_path: Path
) -> None:
    code, out, _ = akka("training", "evaluations", "start", "-f", plan_file(tmp_path), "-q")
    assert code == 0
    evaluation = out.strip()
    assert out == f"{evaluation}\n" and evaluation.startswith("ev")
    code, out, _ = akka("training", "tasks", "list", "-q")
    assert (code, out) == (0, f"{evaluation}\n")
    code, out, _ = akka("training", "evaluations", "list", "--project", "maths", "-q")
    assert (code, out) == (0, f"{evaluation}\n")


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_cancelling_an_evaluation_answers_a_sentence(akka: Akka, tmp_path: Path) -> None:
    _, out, _ = akka("training", "evaluations", "start", "-f", plan_file(tmp_path), "-q")
    evaluation = out.strip()
    code, out, _ = akka("training", "evaluations", "cancel", evaluation, "--force")
    assert code == 0
    assert out in (
        f"Evaluation {evaluation}: cancel requested; its job is being stopped.\n",
        f"Evaluation {evaluation} is CANCELLED: there was nothing left to cancel.\n",
    )


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_download_with_quiet_prints_where_it_wrote(
    akka: Akka, trainer: InProcessTrainer, tmp_path: Path
) -> None:
    run_id = completed_run(trainer.client(), trainer, modelName="maths-sft")
    target = tmp_path / "adapter"
    code, out, _ = akka("training", "runs", "download", run_id, "-d", str(target), "-q")
    assert (code, out) == (0, f"{target}\n")
    assert (target / "adapter_config.json").is_file()


@pytest.mark.skipif(os.getuid() == 0, reason="root may create a directory anywhere")
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_download_to_a_directory_that_cannot_be_made_says_so(
    akka: Akka, trainer: InProcessTrainer, tmp_path: Path
) -> None:
    run_id = completed_run(trainer.client(), trainer, modelName="maths-sft")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    target = locked / "adapter"
    code, out, err = akka("training", "runs", "download", run_id, "-d", str(target))
    assert code == 1 and out == ""
    assert err == (
        f"error: Cannot create {target}: Permission denied; give a directory you can write "
        "with -d.\n"
    )


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_download_under_a_file_says_it_cannot_be_made(
    akka: Akka, trainer: InProcessTrainer, tmp_path: Path
) -> None:
    run_id = completed_run(trainer.client(), trainer, modelName="maths-sft")
    (tmp_path / "file").write_text("x")
    target = tmp_path / "file" / "adapter"
    code, _, err = akka("training", "runs", "download", run_id, "-d", str(target))
    assert code == 1
    assert err == (
        f"error: Cannot create {target}: Not a directory; give a directory you can write with -d.\n"
    )


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_metrics_refuse_a_field_the_run_does_not_have(
    akka: Akka, trainer: InProcessTrainer
) -> None:
    run_id = completed_run(trainer.client(), trainer, modelName="maths-sft")
    code, out, _ = akka("training", "runs", "metrics", run_id, "--fields", "loss", "-o", "json")
    assert code == 0 and [s["loss"] for s in json.loads(out)["steps"]] == [4.0, 2.0, 4 / 3, 1.0]
    code, out, err = akka("training", "runs", "metrics", run_id, "--fields", "loss,nosuch")
    assert code == 1 and out == ""
    assert err.startswith(
        f"error: Run {run_id} has no figure named 'nosuch' (nor one under it); its figures: "
    )
    assert "loss" in err
