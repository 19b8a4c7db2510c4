"""Values the database cannot store, refused at submission with a reason (400 or 422, never a
500), through the real app on SQLite and on Postgres: numbers past a Postgres INTEGER, strings
past their column, lists past their limit, booleans and decimals where a whole number goes,
.nan, and dataset rows no tokenizer can read."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.server.routers.helpers import answer, chat_rows, error, register, sft_plan


@pytest.fixture
def dataset(api: httpx.Client) -> dict[str, Any]:
    return register(api, "maths/train", chat_rows(12))


def grpo_plan(terms: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    plan = sft_plan()
    plan["config"] = {
        "dataset": "maths/train",
        "method": "grpo",
        "maxSeqLength": 256,
        "rlHyperparams": {
            "promptsPerStep": 2,
            "generationsPerPrompt": 2,
            "maxCompletionTokens": 64,
        },
        "reward": {"terms": terms or [{"name": "correct", "kind": "match"}]},
    }
    return plan


def problems(response: httpx.Response) -> list[tuple[str, str]]:
    assert response.status_code in (400, 422), response.text
    return [(p["field"], p["message"]) for p in response.json()["error"]["problems"]]


def dry_run(api: httpx.Client, plan: dict[str, Any]) -> httpx.Response:
    return api.post("/v1/runs", params={"dry_run": "true"}, json=plan)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1e29, "config.hyperparams.training.maxSteps is 1e+29; set a whole number."),
        (True, "config.hyperparams.training.maxSteps is true; set a whole number."),
        (4.0, "config.hyperparams.training.maxSteps is 4; set a whole number."),
        (
            2**31,
            "config.hyperparams.training.maxSteps is 2147483648; set it to at most 2147483647.",
        ),
    ],
)
def test_a_step_count_that_is_not_a_storable_whole_number_is_refused(
    api: httpx.Client, dataset: Any, value: Any, message: str
) -> None:
    plan = sft_plan(config={"hyperparams": {"training": {"maxSteps": value}}})
    for response in (dry_run(api, plan), api.post("/v1/runs", json=plan)):
        assert answer(response) == (
            422,
            error(
                "plan-refused",
                f"The plan was refused (1 problem):\n  - {message}",
                [{"field": "config.hyperparams.training.maxSteps", "message": message}],
            ),
        )
    assert api.get("/v1/runs").json() == []


def test_a_model_name_and_a_description_longer_than_their_columns_are_refused(
    api: httpx.Client, dataset: Any
) -> None:
    plan = sft_plan(modelName="m" * 129, description="d" * 5000)
    assert problems(api.post("/v1/runs", json=plan)) == [
        ("modelName", "modelName is 129 characters long; it holds at most 128. Shorten it."),
        (
            "description",
            "description is 5000 characters long; it holds at most 4096. Shorten it.",
        ),
    ]
    assert api.get("/v1/runs").json() == []


def test_absurd_hyperparameters_are_refused_all_at_once(api: httpx.Client, dataset: Any) -> None:
    # A learning rate of 1e308 was accepted, and the run's gradients were NaN at step 2.
    sft = sft_plan(config={"hyperparams": {"optimizer": {"learningRate": 1e308, "weightDecay": 2}}})
    assert problems(dry_run(api, sft)) == [
        (
            "config.hyperparams.optimizer.learningRate",
            "config.hyperparams.optimizer.learningRate is 1e+308; set it to at most 1.",
        ),
        (
            "config.hyperparams.optimizer.weightDecay",
            "config.hyperparams.optimizer.weightDecay is 2; set it to at most 1.",
        ),
    ]
    grpo = grpo_plan()
    grpo["config"]["rlHyperparams"] |= {
        "optimizer": {"learningRate": 5},
        "temperature": 100,
        "klBeta": 1e9,
        "clip": {"low": 1.5, "high": 20},
    }
    field = "config.rlHyperparams"
    assert problems(dry_run(api, grpo)) == [
        (f"{field}.temperature", f"{field}.temperature is 100; set it to at most 10."),
        (f"{field}.klBeta", f"{field}.klBeta is 1e+09; set it to at most 10."),
        (f"{field}.clip.low", f"{field}.clip.low is 1.5; set it to at most 1."),
        (f"{field}.clip.high", f"{field}.clip.high is 20; set it to at most 10."),
        (
            f"{field}.optimizer.learningRate",
            f"{field}.optimizer.learningRate is 5; set it to at most 1.",
        ),
    ]
    at_the_bounds = sft_plan(config={"hyperparams": {"optimizer": {"learningRate": 1}}})
    assert dry_run(api, at_the_bounds).status_code == 200


def test_nan_in_a_json_body_is_refused(api: httpx.Client, dataset: Any) -> None:
    # Python's JSON reader takes NaN; the plan may not hold it.
    body = json.dumps(grpo_plan()).replace('"generationsPerPrompt": 2', '"temperature": NaN')
    response = api.post("/v1/runs", content=body, headers={"content-type": "application/json"})
    assert problems(response) == [
        (
            "config.rlHyperparams.temperature",
            "config.rlHyperparams.temperature is .nan; set a finite number (not .nan or .inf).",
        )
    ]


def test_a_plan_with_100k_reward_terms_is_refused_at_once(api: httpx.Client, dataset: Any) -> None:
    terms = [{"name": f"t{i}", "kind": "match"} for i in range(100_000)]
    # In this process's CPU seconds (the app runs in it): the machine's load does not count.
    started = time.process_time()
    response = api.post("/v1/runs", json=grpo_plan(terms))
    elapsed = time.process_time() - started
    assert problems(response) == [
        ("config.reward.terms", "config.reward.terms has 100000 items; it holds at most 64.")
    ]
    # Parsing 100k terms is the cost; the quadratic duplicate check took minutes.
    assert elapsed < 20
    # 150k terms are more bytes than a plan may be: refused before they are parsed.
    terms = [{"name": f"t{i}", "kind": "match"} for i in range(150_000)]
    response = api.post("/v1/runs", json=grpo_plan(terms))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too-large"


def test_duplicate_reward_term_names_are_named(api: httpx.Client, dataset: Any) -> None:
    terms = [{"name": n, "kind": "match"} for n in ("b", "a", "b", "c", "a")]
    assert problems(dry_run(api, grpo_plan(terms))) == [
        (
            "config.reward.terms",
            "Reward term names must be unique; a, b appears more than once. Rename one.",
        )
    ]


@pytest.mark.parametrize(
    ("quota", "message"),
    [
        (2.28e28, "quota is 2.28e+28; set a whole number."),
        (99999999999, "quota is 99999999999; set it to at most 2147483647."),
        (True, "quota is true; set a whole number."),
    ],
)
def test_a_quota_the_database_cannot_store_is_refused(
    api: httpx.Client, quota: Any, message: str
) -> None:
    refused = (
        400,
        error(
            "invalid",
            f"The request is not valid:\n  - {message}",
            [{"field": "quota", "message": message}],
        ),
    )
    assert answer(api.post("/v1/projects", json={"name": "physics", "quota": quota})) == refused
    assert answer(api.put("/v1/projects/maths/quota", json={"quota": quota})) == refused
    assert [(p["name"], p["quota"]) for p in api.get("/v1/projects").json()] == [("maths", 2)]


def test_the_largest_quota_is_stored(api: httpx.Client) -> None:
    created = api.post("/v1/projects", json={"name": "physics", "quota": 2**31 - 1})
    assert created.status_code == 201, created.text
    assert api.get("/v1/projects/physics").json()["quota"] == 2**31 - 1
    assert answer(api.put("/v1/projects/maths/quota", json={"quota": -1})) == (
        400,
        error("invalid", "A quota is a number of devices, 0 or more."),
    )


def test_a_project_name_and_description_past_their_columns(api: httpx.Client) -> None:
    response = api.post("/v1/projects", json={"name": "p" * 65, "description": "d" * 4097})
    assert problems(response) == [
        ("name", "name is 65 characters long; it holds at most 64. Shorten it."),
        (
            "description",
            "description is 4097 characters long; it holds at most 4096. Shorten it.",
        ),
    ]


@pytest.mark.parametrize(
    ("days", "message"),
    [
        (-1, "expiresInDays is -1; set it to at least 0.0416667."),
        (1e-9, "expiresInDays is 1e-09; set it to at least 0.0416667."),
        (0, "expiresInDays is 0; set it to at least 0.0416667."),
        (1e9, "expiresInDays is 1e+09; set it to at most 3650."),
        (True, "expiresInDays is true; set a number."),
    ],
)
def test_a_token_expiry_that_is_not_a_future_date_is_refused(
    api: httpx.Client, days: Any, message: str
) -> None:
    response = api.post(
        "/v1/tokens", json={"name": "ci", "projects": ["maths"], "expiresInDays": days}
    )
    assert answer(response) == (
        400,
        error(
            "invalid",
            f"The request is not valid:\n  - {message}",
            [{"field": "expiresInDays", "message": message}],
        ),
    )
    assert [t["name"] for t in api.get("/v1/tokens").json() if t["name"] == "ci"] == []


def test_a_token_name_past_its_column_is_refused(api: httpx.Client) -> None:
    response = api.post("/v1/tokens", json={"name": "n" * 129, "projects": ["maths"]})
    assert problems(response) == [
        ("name", "name is 129 characters long; it holds at most 128. Shorten it.")
    ]


def test_a_dataset_row_with_a_5000_digit_number_is_refused_naming_the_line(
    api: httpx.Client,
) -> None:
    rows = chat_rows(2) + b'{"prompt": "q", "completion": "a", "n": ' + b"7" * 5000 + b"}\n"
    message = (
        "line 3: holds a number too long to read (more than 4300 digits); a row holds text, "
        "write the number as a string or remove it"
    )
    assert answer(api.post("/v1/datasets/maths/train", content=rows)) == (
        422,
        error(
            "invalid",
            f"The file was refused (1 problem):\n  - {message}",
            [{"field": "line 3", "message": message}],
        ),
    )
    assert api.get("/v1/datasets").json() == []


def test_a_dataset_row_with_a_lone_surrogate_is_refused_naming_the_line(
    api: httpx.Client,
) -> None:
    row = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "broken \\ud800 text"},
        ]
    }
    rows = chat_rows(1) + json.dumps(row).replace("\\\\", "\\").encode() + b"\n"
    message = (
        "line 2: messages[1].content holds a lone surrogate escape (such as \\ud800), which is "
        "not a character; remove it or write the character itself"
    )
    assert answer(api.post("/v1/datasets/maths/train", content=rows)) == (
        422,
        error(
            "invalid",
            f"The file was refused (1 problem):\n  - {message}",
            [{"field": "line 2 messages[1].content", "message": message}],
        ),
    )
    # A surrogate pair is one character (an emoji) and is kept.
    pair = json.dumps(row).replace("\\\\ud800", "\\ud83d\\ude00").encode() + b"\n"
    assert register(api, "maths/train", chat_rows(1) + pair)["rows"] == 2


def test_a_plan_nested_past_the_json_reader_is_refused(api: httpx.Client) -> None:
    body = '{"kind": "run", "description": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = api.post("/v1/runs", content=body, headers={"content-type": "application/json"})
    assert answer(response) == (
        400,
        error(
            "invalid",
            "The request body is JSON nested too deeply to read; a request is a few levels "
            "deep: check what sent it.",
        ),
    )


def test_a_dataset_version_past_an_integer_is_refused(api: httpx.Client, dataset: Any) -> None:
    for version in ("99999999999", "9" * 5000):
        response = api.get(f"/v1/datasets/maths/train:v{version}")
        assert response.status_code == 400, response.text
        shown = f"maths/train:v{version}"[:80]
        assert response.json()["error"]["message"] == (
            f"{shown!r} names a version past the largest there can be (2147483647); check the "
            "version number"
        )
    plan = sft_plan(config={"dataset": "maths/train:v99999999999"})
    assert [field for field, _ in problems(dry_run(api, plan))] == ["config.dataset"]


def test_a_pipeline_of_more_stages_than_the_limit_is_refused(api: httpx.Client) -> None:
    stage = {k: v for k, v in sft_plan().items() if k not in ("kind", "project")}
    stages = [{**stage, "name": f"s{i}"} for i in range(33)]
    plan = {"kind": "pipeline", "project": "maths", "stages": stages}
    assert problems(api.post("/v1/pipelines", json=plan)) == [
        ("stages", "stages has 33 items; it holds at most 32.")
    ]


def test_a_decimal_written_without_a_dot_is_still_a_number(api: httpx.Client, dataset: Any) -> None:
    # YAML 1.1 reads `learningRate: 1e-4` as the text "1e-4"; it was always taken as a number.
    plan = sft_plan(config={"hyperparams": {"optimizer": {"learningRate": "1e-4"}}})
    settings = dry_run(api, plan).json()["settings"]
    assert settings["config"]["hyperparams"]["optimizer"]["learningRate"] == 1e-4
    plan = sft_plan(config={"hyperparams": {"optimizer": {"learningRate": "nan"}}})
    assert problems(dry_run(api, plan)) == [
        (
            "config.hyperparams.optimizer.learningRate",
            "config.hyperparams.optimizer.learningRate is 'nan'; set a finite number (not .nan "
            "or .inf).",
        )
    ]


def test_a_wait_that_could_never_end_and_a_negative_log_offset_are_refused(
    api: httpx.Client, dataset: Any
) -> None:
    run = api.post("/v1/runs", json=sft_plan()).json()["id"]
    message = "timeout is 'nan'; set a finite number (not .nan or .inf)."
    assert answer(api.get(f"/v1/runs/{run}/wait", params={"timeout": "nan"})) == (
        400,
        error(
            "invalid",
            f"The request is not valid:\n  - {message}",
            [{"field": "timeout", "message": message}],
        ),
    )
    assert problems(api.get(f"/v1/runs/{run}/logs", params={"offset": -1})) == [
        ("offset", "offset is '-1'; set it to at least 0.")
    ]


def test_a_plan_body_past_the_limit_is_refused_while_it_arrives(api: httpx.Client) -> None:
    refused = (
        413,
        error(
            "too-large",
            "The plan is larger than the 4,194,304 bytes a plan may be; a plan this large is "
            "not a plan: check what sent it.",
        ),
    )
    body = json.dumps({**sft_plan(), "padding": "x" * (4 * 1024 * 1024)}).encode()
    headers = {"content-type": "application/json"}
    assert answer(api.post("/v1/runs", content=body, headers=headers)) == refused
    # Sent in pieces with no length ahead: counted as it arrives.
    pieces = (body[i : i + 65536] for i in range(0, len(body), 65536))
    assert answer(api.post("/v1/pipelines", content=pieces, headers=headers)) == refused
    assert api.get("/v1/runs").json() == []


def test_a_body_with_a_5000_digit_number_is_refused(api: httpx.Client) -> None:
    refused = (
        400,
        error(
            "invalid",
            "The request body holds a number of more than 4300 digits, larger than any field "
            "holds; check what sent it.",
        ),
    )
    headers = {"content-type": "application/json"}
    quota = b'{"name": "physics", "quota": ' + b"9" * 5000 + b"}"
    assert answer(api.post("/v1/projects", content=quota, headers=headers)) == refused
    plan = json.dumps(sft_plan(seed=0)).replace('"seed": 0', '"seed": ' + "9" * 5000)
    assert answer(api.post("/v1/runs", content=plan, headers=headers)) == refused


def test_a_refusal_lists_fifty_problems_and_counts_the_rest(
    api: httpx.Client, dataset: Any
) -> None:
    plan = sft_plan(**{f"extra{i}": 1 for i in range(70)})
    body = api.post("/v1/runs", json=plan).json()["error"]
    assert body["message"].startswith("The plan was refused (70 problems):\n")
    assert len(body["problems"]) == 50
    assert body["problems"][-1] == {"field": "", "message": "... and 21 more problems"}
    assert body["message"].endswith("\n  - ... and 21 more problems")
