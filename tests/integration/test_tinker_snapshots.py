"""A Tinker session's snapshot is a snapshot of ours: an `sft` run starts from it, and an
endpoint serves it to the official `openai` SDK, with the real `tinker` SDK against a live
trainer on the tiny development model."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
import tinker
from tinker import types
from transformers import AutoTokenizer

from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    sft_plan,
    start_run,
    write_plan,
)

pytestmark = [
    pytest.mark.slow,
    # The SDK's own connections, left to the garbage collector (see test_tinker_api.py).
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory, dev_models: Path) -> Iterator[TrainerProcess]:
    t = TrainerProcess(
        tmp_path_factory.mktemp("tinker-snapshots"),
        {
            "trainer": {
                "dev-models-dir": str(dev_models),
                "controller": {"interval-seconds": 0.2, "report-seconds": 0.2},
                "pools": [{"name": "default", "accelerator": "cpu", "devices": 2}],
            }
        },
    ).start()
    ensure_project(t, "demo")
    register_dataset(t, "demo/sums")
    yield t
    t.close()
    gc.collect()


def interactive_snapshot(
    trainer: TrainerProcess, dev_models: Path, train_unembed: bool
) -> tuple[str, str]:
    """Two supervised steps through the SDK, then `save_state`: (run, snapshot name)."""
    created = trainer.cli_json(
        "auth", "tokens", "create", f"sdk-{train_unembed}", "--project", "demo"
    )
    service = tinker.ServiceClient(
        base_url=f"{trainer.url}/tinker", api_key="tml-" + str(created["token"])
    )
    training = service.create_lora_training_client(
        base_model="tiny-chat", rank=8, seed=0, train_unembed=train_unembed
    ).result()
    tokenizer = AutoTokenizer.from_pretrained(str(dev_models / "tiny-chat"))
    tokens = tokenizer.encode("What is 2 + 3? #### 5")
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.array(tokens[1:])),
            "weights": types.TensorData.from_numpy(np.ones(len(tokens) - 1, dtype=np.float32)),
        },
    )
    for _ in range(2):
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    training.save_state("two-steps").result()
    run = training.model_id
    service.close("success").result()
    with trainer.client() as client:
        until(lambda: client.run(run).phase == "COMPLETED", what="the session's run to end")
    return run, "two-steps"


def test_a_snapshot_that_adapts_the_output_layer_cannot_start_a_run(
    trainer: TrainerProcess, dev_models: Path
) -> None:
    run, snapshot = interactive_snapshot(trainer, dev_models, train_unembed=True)
    plan = write_plan(
        trainer, sft_plan("demo", "demo/sums", source={"run": run, "snapshot": snapshot})
    )
    refused = trainer.cli("training", "runs", "start", "-f", str(plan), check=False)
    assert refused.returncode != 0
    assert (
        f"source.run: run {run} is a Tinker session whose adapter trains the output layer "
        "(lm_head, the SDK's train_unembed=True), which sft, dpo, grpo and gspo runs cannot "
        "train further. Start the session with create_lora_training_client(..., "
        "train_unembed=False) to continue it here;"
    ) in " ".join(refused.stderr.split())


def test_an_interactive_snapshot_starts_an_sft_run_and_is_served(
    trainer: TrainerProcess, dev_models: Path
) -> None:
    run, snapshot = interactive_snapshot(trainer, dev_models, train_unembed=False)
    assert snapshot in {s["name"] for s in trainer.cli_json("training", "runs", "snapshots", run)}

    # An sft run branches from it.
    warm = start_run(
        trainer, sft_plan("demo", "demo/sums", steps=2, source={"run": run, "snapshot": snapshot})
    )
    trainer.cli("training", "runs", "wait", warm, timeout=600)
    record = trainer.cli_json("training", "runs", "get", warm)
    assert record["phase"] == "COMPLETED", record.get("failure", {}).get("reason")
    assert record["source"] == {"run": run, "snapshot": snapshot, "kind": "branch"}

    # An endpoint serves it to the openai SDK by RUN:SNAPSHOT.
    served = f"{run}:{snapshot}"
    trainer.cli_json(
        "training", "endpoints", "create", "session", "--base", "tiny-chat",
        "--adapter", served, "--project", "demo",
    )  # fmt: skip
    until(
        lambda: (
            trainer.cli_json("training", "endpoints", "get", "session", "--project", "demo")[
                "phase"
            ]
            == "READY"
        ),
        what="the endpoint to be READY",
        timeout=180,
        detail=lambda: trainer.log()[-3000:],
    )
    token = trainer.cli_json("auth", "tokens", "create", "chat", "--project", "demo")["token"]
    client = openai.OpenAI(base_url=f"{trainer.url}/openai/v1", api_key=str(token))
    answer = client.chat.completions.create(
        model=served,
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        max_tokens=4,
        temperature=0,
    )
    assert answer.model == served
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    trainer.cli("training", "endpoints", "delete", "session", "--project", "demo")
