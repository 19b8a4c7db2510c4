"""An evaluation plan is refused with every problem at once, as a run plan is: the document's
own (an unknown metric, pass@k on one sample) and what the checks find in the rest (a claim
over the pool's limit, a source run of another project)."""

from __future__ import annotations

from collections.abc import Callable

from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, error, register, sft_plan

SETTINGS = {
    "trainer": {
        "projects": [{"name": "maths"}, {"name": "other"}],
        "pools": [
            {
                "name": "default",
                "accelerator": "cpu",
                "devices": 1,
                "max-claim": 1,
                "host-ram-gib": 16,
            }
        ],
    }
}


def test_an_unknown_metric_hides_none_of_the_plans_other_problems(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory(SETTINGS)
    api = trainer.client()
    register(api, "maths/train", chat_rows(8))
    register(api, "other/train", chat_rows(8))
    started = api.post(
        "/v1/runs", json=sft_plan(project="other", config={"dataset": "other/train"})
    )
    assert started.status_code == 200, started.text
    theirs = started.json()["id"]
    plan = {
        "kind": "evaluation",
        "project": "maths",
        "baseModel": "tiny-chat",
        "dataset": "maths/train",
        "source": {"run": theirs},
        "metrics": [
            {"name": "b", "kind": "bleu"},
            {"name": "c", "kind": "match"},
            {"name": "pass", "kind": "pass@k", "term": "c"},
        ],
        "execution": {"gpus": 2},
    }
    problems = [
        (
            "metrics[0].kind",
            "metrics[0]: there is no metric 'bleu'; set kind to one of: match, regex, length, "
            "judge, http, rule, loss, pass@k, preference.",
        ),
        (
            "metrics[2]",
            "pass@k needs more than one sample of each prompt; set generation.samplesPerPrompt "
            "above 1 (it is 1).",
        ),
        (
            "execution.gpus",
            "The evaluation claims 2 devices, more than pool default accepts (MAX CLAIM 1); set "
            "execution.gpus to 1 or less, or choose another execution.pool (`akka training "
            "capacity`).",
        ),
        (
            "source.run",
            f"Run {theirs} belongs to project other, not maths; evaluate it in its own project "
            "(project: other).",
        ),
    ]
    lines = "".join(f"\n  - {message}" for _, message in problems)
    refusal = error(
        "plan-refused",
        f"The evaluation plan was refused (4 problems):{lines}",
        [{"field": field, "message": message} for field, message in problems],
    )

    assert answer(api.post("/v1/evaluations", params={"dry_run": "true"}, json=plan)) == (
        422,
        refusal,
    )
    assert answer(api.post("/v1/evaluations", json=plan)) == (422, refusal)
    assert api.get("/v1/evaluations", params={"project": "maths"}).json() == []


def test_a_broken_metric_keeps_the_positions_of_the_others(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory(SETTINGS)
    api = trainer.client()
    register(api, "maths/train", chat_rows(8))
    plan = {
        "kind": "evaluation",
        "project": "maths",
        "baseModel": "tiny-chat",
        "dataset": "maths/train",
        "generation": {"samplesPerPrompt": "many"},
        "metrics": [
            {"name": "shape", "kind": "regex"},
            {"name": "c", "kind": "match"},
            {"name": "pass", "kind": "pass@k", "term": "c", "k": 0},
            {"name": "c", "kind": "length", "maxTokens": 4},
        ],
    }
    answered = api.post("/v1/evaluations", params={"dry_run": "true"}, json=plan)
    assert answered.status_code == 422
    assert [(p["field"], p["message"]) for p in answered.json()["error"]["problems"]] == [
        (
            "generation.samplesPerPrompt",
            "generation.samplesPerPrompt is 'many'; set a whole number.",
        ),
        ("metrics[0].pattern", "metrics[0].pattern is required; set it."),
        ("metrics[2].k", "metrics[2].k is 0; set it to at least 1."),
        ("metrics[3].name", "Two metrics are named 'c'; rename one."),
    ]
