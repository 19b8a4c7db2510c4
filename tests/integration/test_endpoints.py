"""Endpoints through the real service, its controller and the local backend, called with the
official `openai` SDK: a run's adapter and the base model served by one endpoint, answered
whole and streamed (usage in the last chunk), greedy answers equal to PEFT's own generation,
503 with Retry-After while the endpoint starts, 404 for another project's token, and the
endpoint deleted; `akka training chat` with a temporary endpoint, and 429 when a quota cannot
admit an endpoint."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests.integration.helpers import ensure_project, register_dataset, sft_plan, start_run

pytestmark = pytest.mark.slow

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory, dev_models: Path) -> Any:
    t = TrainerProcess(
        tmp_path_factory.mktemp("endpoints"),
        {
            "trainer": {
                "dev-models-dir": str(dev_models),
                "controller": {"interval-seconds": 0.2},
                "pools": [{"name": "default", "accelerator": "cpu", "devices": 2}],
            }
        },
    ).start()
    ensure_project(t, "demo")
    ensure_project(t, "other")
    register_dataset(t, "demo/sums")
    yield t
    t.close()


@pytest.fixture(scope="module")
def run_id(trainer: TrainerProcess) -> str:
    run = start_run(trainer, sft_plan("demo", "demo/sums", steps=4))
    trainer.cli("training", "runs", "wait", run, timeout=600)
    return run


def tokens(trainer: TrainerProcess) -> dict[str, str]:
    with trainer.client() as admin:
        return {p: admin.create_token(f"{p}-key", [p]).token for p in ("demo", "other")}


def test_an_endpoint_serves_a_run_and_its_base_through_the_openai_sdk(
    trainer: TrainerProcess, run_id: str
) -> None:
    keys = tokens(trainer)
    created = trainer.cli_json(
        "training",
        "endpoints",
        "create",
        "chat",
        "--base",
        "tiny-chat",
        "--adapter",
        run_id,
        "--project",
        "demo",
    )
    assert created["phase"] in ("QUEUED", "STARTING")
    assert [a["name"] for a in created["adapters"]] == [run_id]

    # While it starts, a request is told to come back.
    early = httpx.post(
        f"{trainer.url}/openai/v1/chat/completions",
        headers={"Authorization": f"Bearer {keys['demo']}"},
        json={"model": run_id, "messages": QUESTION},
    )
    if early.status_code == 503:
        assert early.headers["Retry-After"] == "5"
        assert "is starting" in early.json()["error"]["message"]

    until(
        lambda: (
            trainer.cli_json("training", "endpoints", "get", "chat", "--project", "demo")["phase"]
            == "READY"
        ),
        what="the endpoint to be READY",
        timeout=180,
        detail=lambda: trainer.log()[-3000:],
    )
    # No vLLM environment named (trainer.endpoints.vllm-python): transformers serves.
    got = trainer.cli_json("training", "endpoints", "get", "chat", "--project", "demo")
    assert got["engine"] == "transformers"
    client = openai.OpenAI(base_url=f"{trainer.url}/openai/v1", api_key=keys["demo"])

    whole = client.chat.completions.create(
        model=run_id,
        messages=QUESTION,
        max_tokens=8,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    assert whole.model == run_id
    assert whole.usage is not None and whole.usage.completion_tokens > 0
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    content = whole.choices[0].logprobs
    assert content is not None and content.content is not None
    assert all(len(t.top_logprobs) == 2 for t in content.content)

    # Streamed, the same greedy answer arrives in pieces, the usage in the last chunk.
    pieces, last = [], None
    stream = client.chat.completions.create(
        model=run_id, messages=QUESTION, max_tokens=8, temperature=0, stream=True
    )
    for chunk in stream:
        assert isinstance(chunk, ChatCompletionChunk)
        last = chunk
        pieces += [c.delta.content or "" for c in chunk.choices]
    assert "".join(pieces) == whole.choices[0].message.content
    assert last is not None and last.usage is not None
    assert last.usage.completion_tokens == whole.usage.completion_tokens

    # `akka training chat` streams the same answer; a conversation reads lines from stdin.
    said = trainer.cli(
        "training",
        "chat",
        run_id,
        "-m",
        "What is 2 + 3?",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
    )
    assert said.stdout == whole.choices[0].message.content + "\n"
    talk = trainer.cli(
        "training",
        "chat",
        run_id,
        "--temperature",
        "0",
        "--max-tokens",
        "4",
        input="What is 2 + 3?\nAnd 3 + 4?\n",
    )
    assert len(talk.stdout.splitlines()) == 2
    unknown = trainer.cli("training", "chat", "nosuchmodel", "-m", "hi", check=False)
    assert unknown.returncode != 0
    assert (
        "The model 'nosuchmodel' is not a base model, a run or a run's modelName, and no "
        "endpoint of your projects serves it" in unknown.stderr
    )

    # The base model answers too, and differently from the adapter.
    base = client.completions.create(model="tiny-chat", prompt="2 + 3 =", max_tokens=6, n=2)
    assert len(base.choices) == 2
    models = {m.id for m in client.models.list()}
    assert {"tiny-chat", run_id} <= models

    # Another project's token finds no such model.
    other = openai.OpenAI(base_url=f"{trainer.url}/openai/v1", api_key=keys["other"])
    with pytest.raises(openai.NotFoundError) as refused:
        other.chat.completions.create(model=run_id, messages=QUESTION)
    assert "no endpoint of your projects serves it" in str(refused.value)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{trainer.url}/openai/v1", api_key="nope").models.list()
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=run_id, messages=QUESTION, temperature=-1)
    assert "temperature must be 0 or more" in str(bad.value)

    trainer.cli("training", "endpoints", "delete", "chat", "--project", "demo")
    until(
        lambda: trainer.cli_json("training", "endpoints", "list", "--all")[0]["phase"] == "STOPPED",
        what="the endpoint to stop",
        timeout=60,
    )
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model=run_id, messages=QUESTION)


def peft_greedy_text(trainer: TrainerProcess, run: str, prompt_ids: list[int], tokens: int) -> str:
    """What PEFT's own greedy generation says with the run's downloaded adapter."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = trainer.home / f"download-{run}"
    trainer.cli("training", "runs", "download", run, "--dir", str(target))
    base = Path(trainer.cli_json("training", "base-models", "get", "tiny-chat")["path"])
    model: Any = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(base)), str(target)
    )
    ids = torch.tensor([prompt_ids])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=tokens
    )
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    return str(tokenizer.decode(out[0, len(prompt_ids) :], skip_special_tokens=True))


def job_process(trainer: TrainerProcess, endpoint_id: str) -> psutil.Process:
    """The endpoint's job: the newest launch's child of the local runner."""
    launches = sorted((trainer.home / "jobs" / endpoint_id).glob("*/handle.json"))
    runner = psutil.Process(json.loads(launches[-1].read_text())["pid"])
    children = runner.children(recursive=True)
    assert children, "the runner has no job process"
    return children[0]


def test_adapters_come_and_go_and_a_killed_job_comes_back(
    trainer: TrainerProcess, run_id: str
) -> None:
    keys = tokens(trainer)
    created = trainer.cli_json(
        "training", "endpoints", "create", "live", "--base", "tiny-chat", "--project", "demo"
    )

    def ready() -> bool:
        got = trainer.cli_json("training", "endpoints", "get", "live", "--project", "demo")
        return bool(got["phase"] == "READY")

    until(ready, what="the endpoint to be READY", timeout=180, detail=lambda: trainer.log()[-3000:])
    client = openai.OpenAI(base_url=f"{trainer.url}/openai/v1", api_key=keys["demo"], max_retries=0)

    # An adapter added while the endpoint serves answers once its job has loaded it, with what
    # PEFT's own greedy generation gives.
    added = trainer.cli_json(
        "training", "endpoints", "add-adapter", "live", run_id, "--project", "demo"
    )
    assert [a["name"] for a in added["adapters"]] == [run_id]
    answer = until(
        lambda: client.completions.create(
            model=run_id, prompt="What is 2 + 3?", max_tokens=8, temperature=0
        ),
        what="the added adapter to answer",
        ignoring=(openai.NotFoundError,),
        timeout=60,
    )
    prompt_ids = _prompt_ids(trainer, "What is 2 + 3?")
    assert answer.choices[0].text == peft_greedy_text(trainer, run_id, prompt_ids, 8)

    removed = trainer.cli_json(
        "training", "endpoints", "remove-adapter", "live", run_id, "--project", "demo"
    )
    assert removed["adapters"] == []
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model=run_id, prompt="hi", max_tokens=2)

    # `akka training sample`: every row's completions beside it, and a second run resumes.
    prompts = trainer.home / "prompts.jsonl"
    rows = [
        {"id": 1, "prompt": "2 + 3 ="},
        {"id": 2, "messages": [{"role": "user", "content": "What is 1 + 1?"}]},
        {"id": 3, "prompt": "4 + 4 ="},
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = trainer.home / "out.jsonl"
    args = ["training", "sample", "tiny-chat", "-f", str(prompts), "--out", str(out)]
    args += ["--n", "2", "--temperature", "0", "--max-tokens", "4"]
    first = trainer.cli(*args)
    assert "3 rows in" in first.stdout and "(3 new)" in first.stdout
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [w["id"] for w in written] == [1, 2, 3]
    assert all(len(w["outputs"]) == 2 and w["outputs"][0] == w["outputs"][1] for w in written)
    assert written[1]["messages"] == rows[1]["messages"]
    assert all(w["usage"]["completionTokens"] > 0 for w in written)
    # Cut after the first row, with a torn second line: the rest is done again, the same.
    lines = out.read_text().splitlines()
    out.write_text(lines[0] + "\n" + lines[1][:10])
    resumed = trainer.cli(*args)
    assert "(2 new)" in resumed.stdout
    assert [json.loads(line) for line in out.read_text().splitlines()] == written
    prompts.write_text('{"id": 1, "prompt": "x"}\n')
    bad = trainer.cli(*args, check=False)
    assert bad.returncode != 0
    assert "holds 3 rows, more than the 1 of" in bad.stderr
    prompts.write_text('{"text": "x"}\n')
    out.unlink()
    bad = trainer.cli(*args, check=False)
    assert 'has neither "prompt" (text) nor "messages" (a list).' in bad.stderr

    # kill -9 of the endpoint's job: the controller launches it again; meanwhile a request is
    # told to retry, and afterwards it is answered.
    job_process(trainer, created["id"]).kill()
    refused = until(
        lambda: _status_of(trainer, keys["demo"]),
        what="a request during the restart to get 503",
        timeout=60,
    )
    assert refused.headers["Retry-After"] == "5"
    until(ready, what="the endpoint to be READY again", timeout=180)
    again = client.completions.create(model="tiny-chat", prompt="hi", max_tokens=2)
    assert again.usage is not None and again.usage.completion_tokens > 0
    trainer.cli("training", "endpoints", "delete", "live", "--project", "demo")


def _status_of(trainer: TrainerProcess, key: str) -> httpx.Response | None:
    response = httpx.post(
        f"{trainer.url}/openai/v1/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "tiny-chat", "prompt": "hi", "max_tokens": 2},
    )
    return response if response.status_code == 503 else None


def _prompt_ids(trainer: TrainerProcess, text: str) -> list[int]:
    from transformers import AutoTokenizer

    base = trainer.cli_json("training", "base-models", "get", "tiny-chat")["path"]
    return [int(i) for i in AutoTokenizer.from_pretrained(base)(text)["input_ids"]]


def test_an_idle_endpoint_gives_its_devices_back_and_a_request_brings_it_back(
    trainer: TrainerProcess,
) -> None:
    keys = tokens(trainer)
    created = trainer.cli_json(
        "training",
        "endpoints",
        "create",
        "sleepy",
        "--base",
        "tiny-chat",
        "--idle-minutes",
        "0.05",
        "--project",
        "demo",
    )
    assert created["idleMinutes"] == 0.05

    def phase() -> str:
        got = trainer.cli_json("training", "endpoints", "get", "sleepy", "--project", "demo")
        return str(got["phase"])

    until(lambda: phase() == "IDLE", what="the endpoint to go idle", timeout=180)

    def claimed() -> list[str]:
        capacity = httpx.get(
            f"{trainer.url}/v1/capacity",
            headers={"Authorization": f"Bearer {trainer.admin_token}"},
        ).json()
        return [c["for"] for c in capacity["claims"]]

    until(lambda: created["id"] not in claimed(), what="the idle endpoint's claim to go")

    # The next request is told to come back while the endpoint starts again, then answered.
    first = httpx.post(
        f"{trainer.url}/openai/v1/completions",
        headers={"Authorization": f"Bearer {keys['demo']}"},
        json={"model": "tiny-chat", "prompt": "hi", "max_tokens": 2},
    )
    assert first.status_code == 503
    assert first.headers["Retry-After"] == "5"
    client = openai.OpenAI(base_url=f"{trainer.url}/openai/v1", api_key=keys["demo"], max_retries=0)
    answered = until(
        lambda: client.completions.create(model="tiny-chat", prompt="hi", max_tokens=2),
        what="the woken endpoint to answer",
        ignoring=(openai.APIStatusError,),
        timeout=180,
    )
    assert answered.usage is not None and answered.usage.completion_tokens > 0
    trainer.cli("training", "endpoints", "delete", "sleepy", "--project", "demo")
    listed = trainer.cli_json("training", "endpoints", "list", "--project", "demo")
    assert {e["name"]: e["phase"] for e in listed}.get("sleepy", "STOPPED") == "STOPPED"


def set_quota(trainer: TrainerProcess, project: str, quota: int | None) -> None:
    answered = httpx.put(
        f"{trainer.url}/v1/projects/{project}/quota",
        headers={"Authorization": f"Bearer {trainer.admin_token}"},
        json={"quota": quota},
    )
    assert answered.status_code == 200, answered.text


def temporary_name(stderr: str, model: str) -> str:
    said = re.search(
        rf"No endpoint serves {re.escape(model)}: started temporary endpoint "
        r"(chat-[0-9a-f]{6}) in project demo \(base tiny-chat, adapter "
        rf"{re.escape(model)}; 1 device\(s\) of pool default\); it is deleted "
        r"when this chat ends\.",
        stderr,
    )
    assert said is not None, stderr
    return said.group(1)


def phases(trainer: TrainerProcess) -> dict[str, str]:
    listed = trainer.cli_json("training", "endpoints", "list", "--all", "--project", "demo")
    return {e["name"]: e["phase"] for e in listed}


def test_chat_starts_a_temporary_endpoint_and_deletes_it_when_the_chat_ends(
    trainer: TrainerProcess, run_id: str
) -> None:
    keys = tokens(trainer)
    # An interactive chat, interrupted with Ctrl-C: its temporary endpoint goes with it.
    talk = subprocess.Popen(
        [sys.executable, "-m", "akka_training.cli", "training", "chat", run_id],
        env=trainer.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        name = until(
            lambda: next((n for n, p in phases(trainer).items() if p == "READY"), None),
            what="the chat's temporary endpoint to be READY",
            timeout=180,
            detail=lambda: trainer.log()[-3000:],
        )
        # Meanwhile it serves the run to the OpenAI SDK too.
        client = openai.OpenAI(base_url=f"{trainer.url}/openai/v1", api_key=keys["demo"])
        greedy = client.chat.completions.create(
            model=run_id, messages=QUESTION, max_tokens=8, temperature=0
        )
        talk.send_signal(signal.SIGINT)
        _, stderr = talk.communicate(timeout=60)
    finally:
        if talk.poll() is None:
            talk.kill()
            talk.wait()
    assert talk.returncode == 130
    assert temporary_name(stderr, run_id) == name
    assert f"Temporary endpoint {name} deleted." in stderr
    assert "Traceback" not in stderr
    assert phases(trainer)[name] == "STOPPED"

    # With -m: one answer, streamed from a new temporary endpoint, deleted after it.
    said = trainer.cli(
        "training",
        "chat",
        run_id,
        "-m",
        "What is 2 + 3?",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
    )
    assert said.stdout == f"{greedy.choices[0].message.content}\n"
    other = temporary_name(said.stderr, run_id)
    assert other != name
    assert f"Temporary endpoint {other} deleted." in said.stderr
    assert phases(trainer)[other] == "STOPPED"


def test_an_endpoint_a_quota_cannot_admit_is_answered_429(
    trainer: TrainerProcess, run_id: str
) -> None:
    set_quota(trainer, "demo", 0)
    try:
        # chat's temporary endpoint: the quota's words, no traceback, and the endpoint deleted.
        refused = trainer.cli("training", "chat", run_id, "-m", "hi", check=False)
        assert refused.returncode == 1
        name = temporary_name(refused.stderr, run_id)
        assert (
            "Project demo's quota is 0 device(s) and it holds 0: the endpoint serving "
            f"{run_id} needs 1 more to start. Free some (`akka training capacity --project "
            "demo` shows what holds them; delete an endpoint or cancel a run) or ask an admin "
            "to raise the quota."
        ) in refused.stderr
        assert f"Temporary endpoint {name} deleted." in refused.stderr
        assert "Traceback" not in refused.stderr
        assert phases(trainer)[name] == "STOPPED"

        # The OpenAI SDK gets the same words as a RateLimitError (429).
        trainer.cli(
            "training",
            "endpoints",
            "create",
            "capped",
            "--base",
            "tiny-chat",
            "--project",
            "demo",
        )
        keys = tokens(trainer)
        client = openai.OpenAI(
            base_url=f"{trainer.url}/openai/v1", api_key=keys["demo"], max_retries=0
        )
        with pytest.raises(openai.RateLimitError) as limited:
            client.completions.create(model="tiny-chat", prompt="hi", max_tokens=2)
        assert limited.value.code == "insufficient_quota"
        assert "Project demo's quota is 0 device(s) and it holds 0" in str(limited.value)
    finally:
        set_quota(trainer, "demo", None)
    answered = until(
        lambda: client.completions.create(model="tiny-chat", prompt="hi", max_tokens=2),
        what="the endpoint to answer once the quota admits it",
        ignoring=(openai.APIStatusError,),
        timeout=180,
    )
    assert answered.usage is not None and answered.usage.completion_tokens > 0
    trainer.cli("training", "endpoints", "delete", "capped", "--project", "demo")
