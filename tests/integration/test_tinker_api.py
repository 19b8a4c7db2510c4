"""The Tinker API with the real `tinker` SDK against a live trainer: a supervised loop on the
tiny development model is an interactive run of the project, whose steps carry the SDK's
figures; another project's key cannot touch it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tinker
import torch
from peft import LoraConfig, PeftModel
from tinker import types
from transformers import AutoModelForCausalLM, AutoTokenizer

from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests.integration.helpers import ensure_project

pytestmark = [
    pytest.mark.slow,
    # The SDK opens a connection of its own to read the client config and never closes it; the
    # garbage collector's warning about it is the SDK's, not the trainer's.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

TEXTS = [f"What is {a} + {b}? #### {a + b}" for a in range(1, 4) for b in range(1, 3)]


@pytest.fixture(autouse=True)
def sdk_sockets_collected() -> Iterator[None]:
    """The SDK's sampling clients leave connections for the garbage collector too: collected
    here, inside the test, their warnings are filtered as above rather than raised at exit."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory, dev_models: Path) -> Iterator[TrainerProcess]:
    t = TrainerProcess(
        tmp_path_factory.mktemp("tinker"),
        {
            "trainer": {
                "dev-models-dir": str(dev_models),
                "controller": {"interval-seconds": 0.2, "report-seconds": 0.2},
                # Two training clients at once: two devices.
                "pools": [{"name": "default", "accelerator": "cpu", "devices": 2}],
            }
        },
    ).start()
    ensure_project(t, "demo")
    ensure_project(t, "other")
    yield t
    t.close()


def key(trainer: TrainerProcess, project: str) -> str:
    created = trainer.cli_json(
        "auth", "tokens", "create", f"{project}-tinker", "--project", project
    )
    return "tml-" + str(created["token"])


def datums(dev_models: Path) -> list[types.Datum]:
    tokenizer = AutoTokenizer.from_pretrained(str(dev_models / "tiny-chat"))
    out = []
    for text in TEXTS:
        tokens = tokenizer.encode(text)
        out.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": types.TensorData.from_numpy(np.array(tokens[1:])),
                    "weights": types.TensorData.from_numpy(
                        np.ones(len(tokens) - 1, dtype=np.float32)
                    ),
                },
            )
        )
    return out


def two_steps(training: tinker.TrainingClient, data: list[types.Datum]) -> list[float]:
    losses = []
    for _ in range(2):
        fwd = training.forward_backward(data, "cross_entropy")
        opt = training.optim_step(types.AdamParams(learning_rate=2e-2, weight_decay=0.01))
        losses.append(fwd.result().metrics["loss:sum"])
        opt.result()
    return losses


def test_a_supervised_loop_is_an_interactive_run(
    trainer: TrainerProcess, dev_models: Path, tmp_path: Path
) -> None:
    api_key = key(trainer, "demo")
    service = tinker.ServiceClient(base_url=f"{trainer.url}/tinker", api_key=api_key)
    rest = tinker.RestClient(base_url=f"{trainer.url}/tinker", api_key=api_key)
    models = rest.get_server_capabilities().result().supported_models
    assert "tiny-chat" in {m.model_name for m in models}
    training = service.create_lora_training_client(base_model="tiny-chat", rank=8, seed=0).result()
    run_id = training.model_id
    data = datums(dev_models)
    losses: list[float] = []
    steps: list[dict[str, float]] = []
    for _ in range(6):
        # Both queued before either is waited on: the job runs them in their order.
        fwd = training.forward_backward(data, "cross_entropy")
        opt = training.optim_step(types.AdamParams(learning_rate=2e-2, grad_clip_norm=1.0))
        losses.append(fwd.result().metrics["loss:sum"])
        steps.append(dict(opt.result().metrics or {}))
    assert losses[-1] < losses[0]
    logprobs = training.forward(data, "cross_entropy").result()
    assert len(logprobs.loss_fn_outputs) == len(data)

    listed = {r["id"]: r for r in trainer.cli_json("training", "runs", "list", "--project", "demo")}
    assert listed[run_id]["method"] == "tinker"
    client = trainer.client()
    until(lambda: len(client.metrics(run_id).steps) == 6, what="six steps")
    figures = client.metrics(run_id).steps
    assert [f.step for f in figures] == [1, 2, 3, 4, 5, 6]
    for reported, returned in zip(figures, steps, strict=True):
        assert reported.model_extra is not None
        assert reported.model_extra["loss"] == pytest.approx(returned["loss"])
        assert reported.model_extra["learning_rate"] == pytest.approx(2e-2)

    # A snapshot, two more steps; back to the snapshot with its optimizer, the same two steps.
    saved = training.save_state("after-six").result()
    assert saved.path == f"tinker://{run_id}/weights/after-six"
    until(
        lambda: "after-six" in {s.name for s in client.snapshots(run_id)},
        what="the snapshot to be listed",
    )
    first = two_steps(training, data)
    resumed = service.create_training_client_from_state_with_optimizer(saved.path).result()
    assert two_steps(resumed, data) == first

    # Reinforcement losses at the sampler's own log-probabilities: every ratio is one.
    forward = training.forward(data, "cross_entropy").result()
    scored = [
        types.Datum(
            model_input=d.model_input,
            loss_fn_inputs={
                "target_tokens": d.loss_fn_inputs["target_tokens"],
                "logprobs": out["logprobs"],
                "advantages": types.TensorData.from_numpy(
                    np.ones(len(out["logprobs"].tolist()), dtype=np.float32)
                ),
            },
        )
        for d, out in zip(data, forward.loss_fn_outputs, strict=True)
    ]
    targets = sum(len(out["logprobs"].tolist()) for out in forward.loss_fn_outputs)
    for loss in ("importance_sampling", "ppo"):
        result = training.forward_backward(scored, loss).result()
        assert result.metrics["loss:sum"] == pytest.approx(-targets, rel=1e-4)
    # cispo and dro at ratio one, advantage one: the negative log-probabilities (cross entropy).
    policy: list[tuple[types.LossFnType, dict[str, float] | None]] = [
        ("cispo", None),
        ("dro", {"beta": 0.05}),
    ]
    for policy_loss, loss_config in policy:
        result = training.forward_backward(scored, policy_loss, loss_config).result()
        assert result.metrics["loss:sum"] == pytest.approx(forward.metrics["loss:sum"], rel=1e-4)
    with pytest.raises(tinker.RequestFailedError, match="the dro loss needs its beta"):
        training.forward_backward(scored, "dro").result()

    # A custom loss runs in the client, from forward's log-probabilities: here cross entropy.
    def negative_logprobs(
        _: list[types.Datum], logprobs: list[torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return -torch.stack([lp.sum() for lp in logprobs]).sum(), {}

    custom = training.forward_backward_custom(data, negative_logprobs).result()
    assert custom.metrics["loss:sum"] == pytest.approx(forward.metrics["loss:sum"], rel=1e-4)

    other = httpx.post(
        f"{trainer.url}/tinker/api/v1/optim_step",
        headers={"X-API-Key": key(trainer, "other")},
        json={"model_id": run_id, "seq_id": 99, "adam_params": {"learning_rate": 1.0}},
    )
    assert other.status_code == 403
    assert "has no access to project 'demo'" in other.text

    service.close("success").result()
    until(
        lambda: client.run(run_id).phase == "COMPLETED",
        what="the run to complete",
        timeout=120,
    )
    # Its final adapter leaves the trainer in the Hugging Face layout, and PEFT loads it.
    dest = tmp_path / "adapter"
    trainer.cli_json("training", "runs", "download", run_id, "-d", str(dest))
    base = AutoModelForCausalLM.from_pretrained(str(dev_models / "tiny-chat"))
    loaded = PeftModel.from_pretrained(base, str(dest))
    config = loaded.peft_config["default"]
    assert isinstance(config, LoraConfig) and config.r == 8


def test_the_rest_client_reads_runs_and_checkpoints_and_downloads_them(
    trainer: TrainerProcess, dev_models: Path, tmp_path: Path
) -> None:
    api_key = key(trainer, "demo")
    url = f"{trainer.url}/tinker"
    service = tinker.ServiceClient(base_url=url, api_key=api_key)
    rest = tinker.RestClient(base_url=url, api_key=api_key)
    training = service.create_lora_training_client(base_model="tiny-chat", rank=4).result()
    run_id = training.model_id
    saved = training.save_state("kept").result().path
    assert saved == f"tinker://{run_id}/weights/kept"

    run = rest.get_training_run(run_id).result()
    assert (run.training_run_id, run.base_model, run.lora_rank) == (run_id, "tiny-chat", 4)
    assert run.last_checkpoint is not None and run.last_checkpoint.tinker_path == saved
    assert rest.get_training_run_by_tinker_path(saved).result().training_run_id == run_id
    listed = rest.list_training_runs(limit=100).result()
    assert run_id in {r.training_run_id for r in listed.training_runs}
    assert listed.cursor.total_count >= 1
    checkpoints = rest.list_checkpoints(run_id).result().checkpoints
    assert [(c.checkpoint_id, c.checkpoint_type) for c in checkpoints] == [
        ("weights/kept", "training")
    ]
    assert saved in {c.tinker_path for c in rest.list_user_checkpoints().result().checkpoints}
    info = rest.get_weights_info_by_tinker_path(saved).result()
    assert (info.base_model, info.lora_rank, info.is_lora) == ("tiny-chat", 4, True)
    assert run_id in rest.get_session(service.holder.get_session_id()).result().training_run_ids

    # The snapshot's files in the Hugging Face layout, by signed URLs that need no key.
    external = f"tinker://{run_id}/external_weights/kept"
    files = rest.get_external_weights_urls(external).result()
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(files.urls)
    dest = tmp_path / "kept"
    dest.mkdir()
    for name, link in files.urls.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(httpx.get(link).raise_for_status().content)
    base = AutoModelForCausalLM.from_pretrained(str(dev_models / "tiny-chat"))
    loaded = PeftModel.from_pretrained(base, str(dest))
    config = loaded.peft_config["default"]
    assert isinstance(config, LoraConfig) and config.r == 4
    # They carry the run's tokenizer: get_tokenizer's answer for a client without the Hub.
    text = "What is 2 + 3?"
    expected = AutoTokenizer.from_pretrained(str(dev_models / "tiny-chat")).encode(text)
    assert AutoTokenizer.from_pretrained(str(dest)).encode(text) == expected
    assert training.get_info().model_data.tokenizer_id == "tiny-chat"
    # The SDK's own command downloads them so too.
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker.cli",
            "checkpoint",
            "download",
            external,
            "-o",
            str(tmp_path),
        ],
        env={**os.environ, "TINKER_BASE_URL": url, "TINKER_API_KEY": api_key},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    written = tmp_path / f"{run_id}_external_weights_kept"
    assert (written / "adapter_model.safetensors").read_bytes() == (
        dest / "adapter_model.safetensors"
    ).read_bytes()
    forged = httpx.get(next(iter(files.urls.values())).replace("signature=", "signature=0"))
    assert forged.status_code == 403
    assert "This download URL is not valid here" in forged.text

    # Another project's key reads none of it; what the trainer has no counterpart for is refused.
    other = tinker.RestClient(base_url=url, api_key=key(trainer, "other"))
    with pytest.raises(tinker.PermissionDeniedError, match="has no access to project 'demo'"):
        other.list_checkpoints(run_id).result()
    assert run_id not in {
        r.training_run_id for r in other.list_training_runs().result().training_runs
    }
    with pytest.raises(tinker.BadRequestError, match="Deleting a checkpoint is not supported"):
        rest.delete_checkpoint_from_tinker_path(saved).result()
    with pytest.raises(tinker.BadRequestError, match="Publishing a checkpoint is not supported"):
        rest.publish_checkpoint_from_tinker_path(saved).result()
    service.close("success").result()


def test_a_key_without_the_tml_prefix_is_refused(trainer: TrainerProcess) -> None:
    answer = httpx.get(
        f"{trainer.url}/tinker/api/v1/get_server_capabilities", headers={"X-API-Key": "akka_x"}
    )
    assert answer.status_code == 401
    assert "'tml-' followed by a token of this trainer" in answer.text


def prompt_of(dev_models: Path, text: str) -> list[int]:
    tokenizer = AutoTokenizer.from_pretrained(str(dev_models / "tiny-chat"))
    return list(tokenizer.encode(text))


def test_sampling_from_saved_weights_is_peft_greedy_generation(
    trainer: TrainerProcess, dev_models: Path, tmp_path: Path
) -> None:
    service = tinker.ServiceClient(base_url=f"{trainer.url}/tinker", api_key=key(trainer, "demo"))
    training = service.create_lora_training_client(base_model="tiny-chat", rank=8, seed=0).result()
    run_id = training.model_id
    two_steps(training, datums(dev_models))
    saved = training.save_weights_for_sampler("greedy").result()
    assert saved.path == f"tinker://{run_id}/sampler_weights/greedy"
    sampler = service.create_sampling_client(model_path=saved.path).result()
    assert sampler.get_base_model() == "tiny-chat"
    tokens = prompt_of(dev_models, "What is 2 + 1? ####")
    prompt = types.ModelInput.from_ints(tokens)
    greedy = types.SamplingParams(max_tokens=8, temperature=0)
    answered = sampler.sample(prompt, num_samples=2, sampling_params=greedy).result()
    first, second = answered.sequences
    assert first.tokens == second.tokens and first.tokens
    assert first.logprobs is not None and len(first.logprobs) == len(first.tokens)

    # Seeded sampling repeats itself; a stop string ends the text where it appears.
    seeded = types.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    once = sampler.sample(prompt, num_samples=1, sampling_params=seeded).result()
    again = sampler.sample(prompt, num_samples=1, sampling_params=seeded).result()
    assert once.sequences[0].tokens == again.sequences[0].tokens

    # compute_logprobs: one value a prompt token after the first, the model's own.
    logprobs = sampler.compute_logprobs(prompt).result()
    assert logprobs[0] is None and len(logprobs) == len(tokens)

    # The base model samples too, through the training client's job.
    base = service.create_sampling_client(base_model="tiny-chat").result()
    from_base = base.sample(prompt, num_samples=1, sampling_params=greedy).result()
    assert from_base.sequences[0].tokens

    # Sampling from the training client's current weights, unnamed.
    current = training.save_weights_and_get_sampling_client().result()
    latest = current.sample(prompt, num_samples=1, sampling_params=greedy).result()
    assert latest.sequences[0].tokens == first.tokens

    service.close("success").result()
    client = trainer.client()
    until(lambda: client.run(run_id).phase == "COMPLETED", what="the run to end", timeout=120)
    dest = tmp_path / "adapter"
    trainer.cli_json("training", "runs", "download", run_id, "-d", str(dest))
    model: Any = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(dev_models / "tiny-chat")), str(dest)
    )
    model.eval()
    ids = torch.tensor([tokens])
    with torch.no_grad():
        generated = model.generate(input_ids=ids, max_new_tokens=8, do_sample=False)
        logits = model(input_ids=ids).logits[0, :-1]
    expected = generated[0, len(tokens) :].tolist()
    eos = model.generation_config.eos_token_id
    eos_ids = {eos} if isinstance(eos, int) else set(eos or [])
    if any(t in eos_ids for t in expected):
        expected = expected[: min(expected.index(t) for t in eos_ids if t in expected)]
    assert first.tokens == expected
    scored = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0].tolist()
    assert logprobs[1:] == pytest.approx(scored, abs=1e-4)


def test_a_sample_from_a_training_snapshot_path_is_refused(trainer: TrainerProcess) -> None:
    service = tinker.ServiceClient(base_url=f"{trainer.url}/tinker", api_key=key(trainer, "demo"))
    with pytest.raises(tinker.BadRequestError, match="is a training snapshot"):
        service.create_sampling_client(model_path="tinker://r-x/weights/one").result()
    with pytest.raises(tinker.ConflictError, match="needs a training client of it"):
        service.create_sampling_client(base_model="tiny-chat").result()
    service.close("success").result()


def test_an_rl_loop_raises_a_simple_reward(trainer: TrainerProcess, dev_models: Path) -> None:
    """Sample, score, importance_sampling: the reward is the share of sampled tokens in the
    lower half of the vocabulary, and it rises within a few steps."""
    service = tinker.ServiceClient(base_url=f"{trainer.url}/tinker", api_key=key(trainer, "demo"))
    training = service.create_lora_training_client(base_model="tiny-chat", rank=8, seed=0).result()
    tokenizer = AutoTokenizer.from_pretrained(str(dev_models / "tiny-chat"))
    half = len(tokenizer) // 2
    tokens = prompt_of(dev_models, "Say something:")
    prompt = types.ModelInput.from_ints(tokens)

    def reward(sampled: list[int]) -> float:
        return sum(t < half for t in sampled) / len(sampled) if sampled else 0.0

    means: list[float] = []
    for step in range(10):
        sampler = training.save_weights_and_get_sampling_client().result()
        params = types.SamplingParams(max_tokens=8, temperature=1.0, seed=step)
        sequences = sampler.sample(prompt, num_samples=8, sampling_params=params).result().sequences
        rewards = [reward(list(s.tokens)) for s in sequences]
        baseline = sum(rewards) / len(rewards)
        means.append(baseline)
        data = []
        for sequence, value in zip(sequences, rewards, strict=True):
            sampled = list(sequence.tokens)
            if not sampled:
                continue
            assert sequence.logprobs is not None
            full = tokens + sampled
            before = len(tokens) - 1
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(full[:-1]),
                    loss_fn_inputs={
                        "target_tokens": types.TensorData.from_numpy(np.array(full[1:])),
                        "logprobs": types.TensorData.from_numpy(
                            np.array([0.0] * before + list(sequence.logprobs), dtype=np.float32)
                        ),
                        "advantages": types.TensorData.from_numpy(
                            np.array(
                                [0.0] * before + [value - baseline] * len(sampled),
                                dtype=np.float32,
                            )
                        ),
                    },
                )
            )
        fwd = training.forward_backward(data, "importance_sampling")
        opt = training.optim_step(types.AdamParams(learning_rate=5e-2))
        fwd.result()
        opt.result()
    assert sum(means[-3:]) / 3 > sum(means[:3]) / 3 + 0.2, means

    # What the engine does not do is refused with a sentence saying what to change.
    with pytest.raises(tinker.RequestFailedError, match="top_k is not supported here"):
        sampler.sample(prompt, 1, types.SamplingParams(max_tokens=2, top_k=5)).result()
    run_id = training.model_id
    unknown = service.create_sampling_client(
        model_path=f"tinker://{run_id}/sampler_weights/never-saved"
    )
    with pytest.raises(tinker.RequestFailedError, match="are not held by run"):
        unknown.result().sample(prompt, 1, types.SamplingParams(max_tokens=2)).result()
    service.close("success").result()
