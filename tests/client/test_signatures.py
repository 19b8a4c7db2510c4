"""Every public call of the client answers with the API's models, never a bare mapping."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Iterator

from akka_training.api.base import ResponseBody
from akka_training.client import TrainerClient
from akka_training.client.base import BaseClient

PLUMBING = {name for name in vars(BaseClient) if not name.startswith("_")}


def calls() -> dict[str, typing.Any]:
    return {
        name: member
        for name, member in inspect.getmembers(TrainerClient, inspect.isfunction)
        if not name.startswith("_") and name not in PLUMBING
    }


def models_in(annotation: typing.Any) -> list[typing.Any]:
    """The types an annotation is made of, through lists, iterators and unions."""
    origin = typing.get_origin(annotation)
    if origin in (list, Iterator, typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in models_in(arg)]
    return [annotation]


def test_every_call_answers_with_api_models() -> None:
    found = calls()
    assert len(found) >= 40, sorted(found)
    for name, call in found.items():
        answer = typing.get_type_hints(call)["return"]
        for part in models_in(answer):
            assert isinstance(part, type) and issubclass(part, ResponseBody), (name, answer)


def test_the_calls_the_cli_and_the_guide_use_are_there() -> None:
    found = calls()
    for name in (
        "info", "capacity", "base_models", "projects", "create_project", "register_dataset",
        "datasets", "dataset", "start_run", "run", "runs", "wait_run", "rollouts", "metrics",
        "pause_run", "resume_run", "branch_run", "continue_run", "start_pipeline",
        "wait_pipeline", "register_bundle", "create_token", "whoami",
    ):  # fmt: skip
        assert name in found, name


def test_the_client_imports_a_nouns_models_when_a_call_first_needs_them() -> None:
    """Importing the client defines no model: `api.runs` and the others are imported when a
    call (or a type hint, as above) first reaches them."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from akka_training.client import TrainerClient\n"
        "from akka_training import api\n"
        "print(sorted(m for m in sys.modules if m.startswith('akka_training.api.')))\n"
        "api.runs.RunSummary\n"
        "print(sorted(m for m in sys.modules if m.startswith('akka_training.api.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = out.stdout.strip().splitlines()
    assert before == "[]"
    assert after == "['akka_training.api.base', 'akka_training.api.runs']"


def test_api_runs_re_exports_the_run_plan_when_asked_for_it() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import akka_training.api.runs as runs\n"
        "print('akka_training.core.plans' in sys.modules)\n"
        "from akka_training.api.runs import RunPlan\n"
        "from akka_training.core.plans import RunPlan as plan\n"
        "print(RunPlan is plan is runs.RunPlan)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
