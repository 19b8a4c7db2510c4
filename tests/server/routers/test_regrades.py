"""A regrade's reward is refused with every problem at once, as a run plan's is: the schema's,
a duplicate term name, a pattern that does not compile, and for an unknown field the fields of
the term's own kind."""

from __future__ import annotations

from typing import Any

import httpx

from akka_training.rewards.rollouts import Rollout, step_file_bytes
from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, error, grpo_plan, register


def kept_rollouts(api: httpx.Client, trainer: InProcessTrainer) -> str:
    """A new grpo run whose job reported one step and its rollouts; the run's id."""
    register(api, "maths/train", chat_rows(12))
    run_id: str = api.post("/v1/runs", json=grpo_plan()).json()["id"]
    launch = trainer.admit(run_id)
    job = trainer.job_client(launch)
    base = f"/v1/jobs/{run_id}/attempts/{launch.attempt}"
    assert job.post(f"{base}/started", json={"placement": {"host": "h", "pid": 1}}).is_success
    key = f"runs/{run_id}/rollouts/step-1.parquet"
    rollout = Rollout(
        step=1,
        index=0,
        group=0,
        prompt="What is 1 + 1?",
        completion="#### 2",
        expected="#### 2",
        score=1.0,
        shares={"correct": 1.0},
        values={"correct": 1.0},
        completion_tokens=3,
        finish_reason="stop",
        weights={"correct": 1.0},
    )
    trainer.ctx.blobs.put_bytes(key, step_file_bytes([rollout]))
    body = {"step": 1, "blob": key, "count": 1, "bestScore": 1.0, "worstScore": 1.0}
    assert job.post(f"{base}/rollouts", json=body).is_success
    return run_id


def test_a_reward_is_refused_with_every_problem_at_once(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    run_id = kept_rollouts(api, trainer)
    reward: dict[str, Any] = {
        "terms": [
            {"name": "correct", "kind": "match"},
            {"name": "shape", "kind": "regex", "patern": "^####"},
            {"name": "correct", "kind": "length", "maxTokens": 8, "slack": 2},
            {"name": "broken", "kind": "regex", "pattern": "(["},
        ]
    }
    problems = [
        ("terms[1].pattern", "terms[1].pattern is required; set it."),
        (
            "terms[1].patern",
            "terms[1].patern is not a known field in terms[1]; remove it or check its spelling "
            "(known fields: name, weight, kind, pattern).",
        ),
        (
            "terms[2].slack",
            "terms[2].slack is not a known field in terms[2]; remove it or check its spelling "
            "(known fields: name, weight, kind, minTokens, maxTokens, slackTokens).",
        ),
        ("terms", "Term names must be unique; correct appear more than once."),
        (
            "terms[3].pattern",
            "terms[3].pattern '([' is not a valid regular expression (unterminated character "
            "set at position 1); fix the pattern.",
        ),
    ]
    lines = "".join(f"\n  - {message}" for _, message in problems)

    response = api.post(f"/v1/runs/{run_id}/regrades", json={"reward": reward})

    assert answer(response) == (
        422,
        error(
            "plan-refused",
            f"The reward was refused (5 problems):{lines}",
            [{"field": field, "message": message} for field, message in problems],
        ),
    )
    assert api.get("/v1/tasks").json() == []
