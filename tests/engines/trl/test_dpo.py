"""Preference fine-tuning jobs end to end: a real TRL DPO run on the tiny chat model, reporting
to a recording HTTP server, with a temporary blob store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from akka_training.core.resolved import ResumePoint, SourcePin, dpo_reference
from akka_training.engines.data import preference_examples
from akka_training.engines.tasks.preference_eval import pair_samples
from tests.engines.conftest import ReportServer
from tests.engines.jobs import make_spec, put_dataset, run_in_process
from tests.engines.rows import chat_rows, pair_rows

# Every test here trains a real job.
pytestmark = pytest.mark.slow

DPO: dict[str, Any] = {
    "method": "dpo",
    "maxSeqLength": 64,
    "hyperparams": {
        "lora": {"rank": 4, "alpha": 8},
        "optimizer": {"learningRate": 5e-3},
        "training": {"maxSteps": 3, "batchSize": 4},
    },
}
PREFERENCE = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margins",
    "rewards/accuracies",
    "logps/chosen",
    "logps/rejected",
)


def test_a_dpo_run_from_the_base_model_reports_its_preference_figures(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "pairs", pair_rows(12)),
        config=DPO,
        trainer_url=report_server.url,
        store=store,
        execution={"saveEvery": 2},
    )

    assert run_in_process(spec, tmp_path / "job") == 0

    training = report_server.of("training")[0]
    assert training["totalSteps"] == 3
    assert training["dataFit"] == {
        "rows": 12,
        "rowsTruncated": 0,
        "answersTruncated": 0,
        "rowsDropped": 0,
        "maxSeqLength": 64,
        "promptsTruncated": 0,
    }
    steps = report_server.of("steps")
    assert [s["step"] for s in steps] == [1, 2, 3]
    for s in steps:
        assert set(PREFERENCE) <= set(s["metrics"]), s["metrics"]
    # The reference is the base model (the adapter disabled), and a fresh adapter changes
    # nothing yet: the first step's rewards are exactly 0.
    first = steps[0]["metrics"]
    assert (first["rewards/chosen"], first["rewards/rejected"]) == (0.0, 0.0)
    assert [s["step"] for s in report_server.of("snapshots")] == [2]
    assert store.list("runs/run-1/adapter/") == [
        "runs/run-1/adapter/adapter_config.json",
        "runs/run-1/adapter/adapter_model.safetensors",
    ]


def test_a_dpo_run_from_an_sft_adapter_takes_that_adapter_as_its_reference(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    model = catalog["tiny-chat"]
    sft = make_spec(
        model=model,
        dataset=put_dataset(store, "maths", chat_rows(16)),
        config={
            "method": "sft",
            "maxSeqLength": 64,
            "hyperparams": {
                "lora": {"rank": 4, "alpha": 8},
                "optimizer": {"learningRate": 5e-2},
                "training": {"maxSteps": 4, "batchSize": 4},
            },
        },
        trainer_url=report_server.url,
        store=store,
        run_id="sft",
    )
    assert run_in_process(sft, tmp_path / "sft") == 0
    pairs = put_dataset(store, "pairs", pair_rows(12))

    def dpo(run_id: str, source: SourcePin | None) -> dict[str, float]:
        hyperparams = {**DPO["hyperparams"], "training": {"maxSteps": 8, "batchSize": 4}}
        spec = make_spec(
            model=model,
            dataset=pairs,
            config={**DPO, "hyperparams": hyperparams},
            trainer_url=report_server.url,
            store=store,
            run_id=run_id,
            source=source,
        )
        report_server.reports.clear()
        assert run_in_process(spec, tmp_path / run_id) == 0
        steps = report_server.of("steps")
        first: dict[str, float] = steps[0]["metrics"]
        last[run_id] = steps[-1]["metrics"]
        return first

    last: dict[str, dict[str, float]] = {}

    warm = SourcePin(
        kind="warm-start",
        run="sft",
        snapshot=None,
        step=4,
        weights="runs/sft/adapter/",
        lora_rank=4,
        lora_alpha=8,
    )
    from_base = dpo("from-base", None)
    from_sft = dpo("from-sft", warm)

    # The policy at step 0 is the SFT adapter (its log-probabilities differ from the base
    # model's), and so is the reference: the first step's rewards are exactly 0.
    assert from_sft["logps/chosen"] != from_base["logps/chosen"]
    assert (from_sft["rewards/chosen"], from_sft["rewards/rejected"]) == (0.0, 0.0)
    assert (from_base["rewards/chosen"], from_base["rewards/rejected"]) == (0.0, 0.0)
    # Training raises the share of pairs ranked right above the SFT adapter's (0 at step 1,
    # every reward 0), and on held-out pairs the DPO adapter prefers the right answer more
    # often than the SFT adapter does.
    assert from_sft["rewards/accuracies"] == 0.0
    assert last["from-sft"]["rewards/accuracies"] > 0.5
    assert last["from-sft"]["rewards/margins"] > 0
    held_out = preference_examples(pair_rows(16, seed=7))
    tokenizer = AutoTokenizer.from_pretrained(model["path"])

    def share(adapter: str) -> float:
        base = AutoModelForCausalLM.from_pretrained(model["path"], dtype=torch.float32)
        tuned = PeftModel.from_pretrained(base, str(store.local_path(adapter))).eval()
        samples = pair_samples(tokenizer, tuned, held_out, "preference")
        return float(sum(s["values"]["preference"] for s in samples)) / len(samples)

    assert share("runs/from-sft/adapter") > share("runs/sft/adapter")


def test_the_published_figures_equal_a_recomputation_from_the_models_log_probabilities(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    """Step 2 trains on every pair (one batch holds them all) with the weights step 1 saved:
    its figures are recomputed here from those weights, the base model as the reference, with
    no part of TRL."""
    model = catalog["tiny-chat"]
    rows = pair_rows(4, shape="text")
    beta = 0.5
    config = {
        **DPO,
        "hyperparams": {
            **DPO["hyperparams"],
            "training": {"maxSteps": 2, "batchSize": 4},
            "preference": {"beta": beta},
        },
    }
    spec = make_spec(
        model=model,
        dataset=put_dataset(store, "pairs", rows),
        config=config,
        trainer_url=report_server.url,
        store=store,
        execution={"saveEvery": 1},
    )
    assert run_in_process(spec, tmp_path / "job") == 0
    published = report_server.of("steps")[1]["metrics"]
    weights = report_server.of("snapshots")[0]["weights"]

    tokenizer = AutoTokenizer.from_pretrained(model["path"])
    base = AutoModelForCausalLM.from_pretrained(model["path"], dtype=torch.float32)
    policy = PeftModel.from_pretrained(base, str(store.local_path(weights.rstrip("/")))).eval()

    def logp(prompt: str, answer: str) -> float:
        prompt_ids = tokenizer(prompt)["input_ids"]
        ids = tokenizer(prompt + answer + tokenizer.eos_token)["input_ids"]
        start = next(
            (i for i, (a, b) in enumerate(zip(prompt_ids, ids, strict=False)) if a != b),
            len(prompt_ids),
        )
        with torch.no_grad():
            logits = policy(input_ids=torch.tensor([ids])).logits[0, :-1]
        chosen = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids[1:])[:, None])
        return float(chosen[start - 1 :].sum())

    def reference_logp(prompt: str, answer: str) -> float:
        with policy.disable_adapter():
            return logp(prompt, answer)

    chosen = [logp(r["prompt"], r["chosen"]) for r in rows]
    rejected = [logp(r["prompt"], r["rejected"]) for r in rows]
    chosen_rewards = [
        beta * (c - reference_logp(r["prompt"], r["chosen"]))
        for c, r in zip(chosen, rows, strict=True)
    ]
    rejected_rewards = [
        beta * (c - reference_logp(r["prompt"], r["rejected"]))
        for c, r in zip(rejected, rows, strict=True)
    ]
    expected = {
        "logps/chosen": sum(chosen) / 4,
        "logps/rejected": sum(rejected) / 4,
        "rewards/chosen": sum(chosen_rewards) / 4,
        "rewards/rejected": sum(rejected_rewards) / 4,
        "rewards/margins": (sum(chosen_rewards) - sum(rejected_rewards)) / 4,
        "rewards/accuracies": sum(
            c > r for c, r in zip(chosen_rewards, rejected_rewards, strict=True)
        )
        / 4,
    }
    assert expected["rewards/margins"] != 0  # step 1 moved the policy
    for name, value in expected.items():
        assert published[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name


def test_a_paused_dpo_run_resumes_exactly_where_it_stopped(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    config = {
        **DPO,
        "hyperparams": {**DPO["hyperparams"], "training": {"maxSteps": 5, "batchSize": 2}},
    }
    dataset = put_dataset(store, "pairs", pair_rows(8))

    def spec(run_id: str, attempt: int = 1, resume: ResumePoint | None = None) -> Any:
        made = make_spec(
            model=catalog["tiny-chat"],
            dataset=dataset,
            config=config,
            trainer_url=report_server.url,
            store=store,
            run_id=run_id,
            attempt=attempt,
            resume=resume,
            execution={"saveEvery": 100},
        )
        made.telemetry.report_seconds = 0
        return made

    assert run_in_process(spec("straight"), tmp_path / "straight") == 0
    straight = _figures(report_server)

    report_server.script = lambda kind, body, reports: (
        "save-and-stop" if kind == "steps" and body["step"] >= 2 else "continue"
    )
    report_server.reports.clear()
    assert run_in_process(spec("paused"), tmp_path / "paused-1") == 0
    snapshot = report_server.of("snapshots")[-1]
    assert report_server.kinds()[-2:] == ["snapshots", "stopped"]

    report_server.script = lambda kind, body, reports: "continue"
    report_server.reports.clear()
    resume = ResumePoint(
        snapshot=snapshot["name"],
        step=snapshot["step"],
        weights=snapshot["weights"],
        training_state=snapshot["trainingState"],
    )
    assert run_in_process(spec("paused", attempt=2, resume=resume), tmp_path / "paused-2") == 0
    resumed = _figures(report_server)

    assert sorted(resumed) == list(range(snapshot["step"] + 1, 6))
    for step, figures in resumed.items():
        assert figures == straight[step], step


@pytest.mark.parametrize("start", ["base model", "sft adapter"])
def test_a_continued_dpo_run_keeps_the_reference_of_the_run_it_continues(
    catalog: dict[str, dict[str, Any]],
    report_server: ReportServer,
    store: Any,
    tmp_path: Path,
    start: str,
) -> None:
    """A continuation starts its policy from the snapshot's adapter but measures it against
    the reference of the run it continues (the base model, or the SFT adapter that run
    warm-started from): its steps report what the uninterrupted run reported, rewards
    included, instead of starting again from rewards of 0."""
    model = catalog["tiny-chat"]
    origin = None
    if start == "sft adapter":
        sft = make_spec(
            model=model,
            dataset=put_dataset(store, "maths", chat_rows(8)),
            config={
                "method": "sft",
                "maxSeqLength": 64,
                "hyperparams": {
                    "lora": {"rank": 4, "alpha": 8},
                    "optimizer": {"learningRate": 5e-2},
                    "training": {"maxSteps": 2, "batchSize": 4},
                },
            },
            trainer_url=report_server.url,
            store=store,
            run_id="sft",
        )
        assert run_in_process(sft, tmp_path / "sft") == 0
        report_server.reports.clear()
        origin = SourcePin(
            kind="warm-start",
            run="sft",
            snapshot=None,
            step=2,
            weights="runs/sft/adapter/",
            lora_rank=4,
            lora_alpha=8,
        )
    dataset = put_dataset(store, "pairs", pair_rows(8))

    def spec(run_id: str, steps: int, source: SourcePin | None, settings: dict[str, Any]) -> Any:
        made = make_spec(
            model=model,
            dataset=dataset,
            config={
                **DPO,
                "hyperparams": {
                    **DPO["hyperparams"],
                    "training": {"maxSteps": steps, "batchSize": 2},
                },
            },
            trainer_url=report_server.url,
            store=store,
            run_id=run_id,
            source=source,
            # What the service records: the continued run's reference, from its settings.
            reference=dpo_reference(source, settings),
            execution={"saveEvery": 2},
        )
        made.telemetry.report_seconds = 0
        return made

    straight_spec = spec("straight", 5, origin, {})
    assert run_in_process(straight_spec, tmp_path / "straight") == 0
    straight = _figures(report_server)
    snapshot = next(s for s in report_server.of("snapshots") if s["step"] == 2)

    report_server.reports.clear()
    continuing = SourcePin(
        kind="continue",
        run="straight",
        snapshot=snapshot["name"],
        step=2,
        weights=snapshot["weights"],
        training_state=snapshot["trainingState"],
        lora_rank=4,
        lora_alpha=8,
    )
    recorded = straight_spec.settings.to_json()
    continued_spec = spec("continued", 3, continuing, recorded)
    assert continued_spec.settings.reference == straight_spec.settings.reference
    assert run_in_process(continued_spec, tmp_path / "continued") == 0
    continued = _figures(report_server)

    assert sorted(continued) == [3, 4, 5]
    # Step 3's policy moved from the reference for two steps already: rewards are not 0.
    assert continued[3]["rewards/chosen"] != 0.0
    for step, figures in continued.items():
        assert figures == straight[step], step


def _figures(server: ReportServer) -> dict[int, dict[str, float]]:
    return {
        s["step"]: {k: s["metrics"][k] for k in ("loss", *PREFERENCE)} for s in server.of("steps")
    }
