"""An evaluation generates through the one generation engine, in batches, and its answers are
those of transformers' own `generate` a row at a time (as evaluations generated before): greedy
completions token for token, with the evaluated adapter and without, for prompts of uneven
length in one batch. Sampling follows the plan's temperature and seed, whatever the batches;
the loss is the model's own cross-entropy; and the job reports its progress batch by batch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from akka_training.blobstore import LocalBlobStore
from akka_training.core.evaluations import EvaluateParams, Generation
from akka_training.core.tasks import TaskSpec
from akka_training.engines.generation import BASE
from tests.engines.conftest import ReportServer
from tests.engines.tasks.test_job import pin, run

PROMPTS: list[list[dict[str, str]] | str] = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    "the cat sat on a mat and then the dog came in and sat on the cat",
    [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "7"}],
    "one two",
    [{"role": "user", "content": "Count from one to nine: one two three four five six"}],
]


def completions(
    answered: Iterator[list[tuple[int, list[tuple[str, int, str]]]]],
) -> list[list[tuple[str, int, str]]]:
    """The answers of `evaluate.generate`, in the prompts' order."""
    by_position = dict(pair for batch in answered for pair in batch)
    return [by_position[i] for i in range(len(by_position))]


# -- batches (no model) ----------------------------------------------------------------------


def test_batches_put_every_prompt_in_one_batch_longest_first_within_the_limits() -> None:
    from akka_training.engines.tasks.evaluate import BATCH_COMPLETIONS, BATCH_TOKENS, batches

    lengths = [5, 300, 40, 40, 7, 1000, 12] * 30
    made = list(batches(lengths, 2, 64))
    assert sorted(i for batch in made for i in batch) == list(range(len(lengths)))
    firsts = [lengths[batch[0]] for batch in made]
    assert firsts == sorted(firsts, reverse=True)
    assert max(lengths[i] for i in made[0]) == 1000
    for batch in made:
        assert all(lengths[i] <= lengths[batch[0]] for i in batch)
        assert len(batch) * 2 <= BATCH_COMPLETIONS
        assert len(batch) * 2 * (lengths[batch[0]] + 64) <= BATCH_TOKENS


def test_a_prompt_bigger_than_a_batch_is_generated_alone() -> None:
    from akka_training.engines.tasks.evaluate import BATCH_TOKENS, batches

    assert list(batches([BATCH_TOKENS, 3, 4], 64, 10)) == [[0], [2], [1]]
    assert list(batches([], 1, 10)) == []


# -- against transformers' generate (the development model) ----------------------------------


def ending_model(base: Path, directory: Path, prompt: list[int]) -> Path:
    """A copy of the tiny chat model that ends its answer (end-of-sequence) wherever it would
    say the token it says fourth after `prompt`: the development model's greedy answers
    otherwise run to their length, and the copy's end some answers early."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model: Any = AutoModelForCausalLM.from_pretrained(str(base))
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=4
    )
    said = int(out[0, -1])
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head[tokenizer.eos_token_id] = head[said] * 1.5
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def models(
    catalog: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The engine over a copy of the tiny chat model that sometimes ends its answers, with an
    adapter on it; the same model and adapter loaded plainly (for transformers' generate)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from akka_training.engines.generation.engine import GenerationEngine
    from akka_training.engines.tasks.evaluate import _encode_prompt
    from tests.engines.generation.conftest import build_adapter

    root = tmp_path_factory.mktemp("models")
    tiny = Path(catalog["tiny-chat"]["path"])
    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    prompts = [_encode_prompt(tokenizer, p) for p in PROMPTS]
    base = ending_model(tiny, root / "base", prompts[0])
    adapter = build_adapter(base, root / "adapter", 3)
    engine = GenerationEngine(
        base, model=AutoModelForCausalLM.from_pretrained(str(base)), tokenizer=tokenizer
    )
    engine.add_adapter("evaluated", adapter)
    plain = AutoModelForCausalLM.from_pretrained(str(base)).eval()
    tuned = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(base)), str(adapter)
    ).eval()
    return {
        "engine": engine,
        "tokenizer": tokenizer,
        "models": {BASE: plain, "evaluated": tuned},
        "prompts": prompts,
    }


def hf_generate(
    tokenizer: Any, model: Any, prompt: list[int], tokens: int
) -> list[tuple[str, int, str]]:
    """A row as evaluations generated it before the engine: transformers' greedy `generate`,
    cut at the end-of-sequence token, decoded without special tokens and stripped."""
    import torch

    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    sequence = out[0, ids.shape[1] :].tolist()
    finish = "length"
    if tokenizer.eos_token_id in sequence:
        sequence = sequence[: sequence.index(tokenizer.eos_token_id)]
        finish = "stop"
    return [(tokenizer.decode(sequence, skip_special_tokens=True).strip(), len(sequence), finish)]


@pytest.mark.slow
@pytest.mark.parametrize("adapter", [BASE, "evaluated"])
def test_greedy_batched_completions_are_transformers_generate_row_by_row(
    models: dict[str, Any], adapter: str
) -> None:
    from akka_training.engines.tasks.evaluate import generate

    tokenizer, prompts = models["tokenizer"], models["prompts"]
    assert len({len(p) for p in prompts}) == len(prompts)  # uneven: padded in the batch
    generation = Generation(max_completion_tokens=24, temperature=0, samples_per_prompt=1)
    answered = list(generate(models["engine"], adapter, prompts, generation, 42))
    assert len(answered) == 1  # every row in one batch
    got = completions(iter(answered))
    expected = [hf_generate(tokenizer, models["models"][adapter], p, 24) for p in prompts]
    assert got == expected
    if adapter == BASE:  # the copy ends some of its answers: both ends are compared
        assert {finish for [(_, _, finish)] in got} == {"stop", "length"}


@pytest.mark.slow
def test_the_adapter_answers_otherwise_than_the_base(models: dict[str, Any]) -> None:
    from akka_training.engines.tasks.evaluate import generate

    generation = Generation(max_completion_tokens=12, temperature=0)
    engine, prompts = models["engine"], models["prompts"]
    base = completions(generate(engine, BASE, prompts, generation, 42))
    tuned = completions(generate(engine, "evaluated", prompts, generation, 42))
    assert base != tuned


@pytest.mark.slow
def test_sampling_follows_the_temperature_and_the_seed_whatever_the_batches(
    models: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from akka_training.engines.tasks import evaluate

    engine, prompts = models["engine"], models["prompts"]
    generation = Generation(max_completion_tokens=10, temperature=1.5, samples_per_prompt=3)
    together = completions(evaluate.generate(engine, "evaluated", prompts, generation, 7))
    assert all(len(samples) == 3 for samples in together)
    # Sampled, not greedy: a prompt's samples differ.
    assert any(len({text for text, _, _ in samples}) > 1 for samples in together)
    assert all(tokens <= 10 for samples in together for _, tokens, _ in samples)
    again = completions(evaluate.generate(engine, "evaluated", prompts, generation, 7))
    assert again == together
    other_seed = completions(evaluate.generate(engine, "evaluated", prompts, generation, 8))
    assert other_seed != together
    monkeypatch.setattr(evaluate, "BATCH_COMPLETIONS", 3)  # one prompt a batch
    answered = list(evaluate.generate(engine, "evaluated", prompts, generation, 7))
    assert len(answered) == len(prompts)
    assert completions(iter(answered)) == together


@pytest.mark.slow
@pytest.mark.parametrize("adapter", [BASE, "evaluated"])
def test_the_loss_is_the_models_own_cross_entropy(models: dict[str, Any], adapter: str) -> None:
    import torch

    from akka_training.engines.tasks.evaluate import _loss

    tokenizer, model = models["tokenizer"], models["models"][adapter]
    for prompt in models["prompts"]:
        answer = [*tokenizer("#### 5", add_special_tokens=False)["input_ids"], 3]
        ids = torch.tensor([prompt + answer])
        labels = torch.tensor([[-100] * len(prompt) + answer])
        with torch.no_grad():
            expected = float(model(input_ids=ids, labels=labels).loss)
        got = _loss(tokenizer, models["engine"], adapter, prompt, "#### 5")
        assert got == pytest.approx(expected, rel=1e-5)


# -- the job ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_evaluation_job_reports_its_generation_batch_by_batch(
    store: LocalBlobStore,
    report_server: ReportServer,
    catalog: dict[str, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from akka_training.engines.tasks import evaluate

    monkeypatch.setattr(evaluate, "BATCH_COMPLETIONS", 4)  # two rows a batch
    rows = [{"prompt": f"What is {a} + 1?", "completion": str(a + 1)} for a in range(5)]
    store.put_bytes("datasets/e.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    params = EvaluateParams.model_validate(
        {
            "datasetRef": "maths/sums:v1",
            "baseModel": pin(catalog["tiny-chat"]),
            "adapter": None,
            "tokenizer": None,
            "dataset": "datasets/e.jsonl",
            "generation": {"maxCompletionTokens": 4, "samplesPerPrompt": 2, "temperature": 0},
            "metrics": [{"name": "correct", "kind": "match", "mode": "exact"}, {"kind": "loss"}],
            "samples": "evaluations/ev2/samples.jsonl",
        }
    )
    spec = TaskSpec(
        task_id="ev2",
        kind="evaluate",
        project="maths",
        trainer_url=report_server.url,
        storage_url=store.url,
        params=params.to_json(),
    )
    assert run(spec, report_server, tmp_path) == 0
    generating = [
        (p["done"], p["total"])
        for p in report_server.of("progress")
        if p["message"] == "generating"
    ]
    assert generating == [(0, 5), (2, 5), (4, 5), (5, 5)]
    samples = [json.loads(line) for line in store.get_bytes(params.samples).splitlines()]
    assert [(s["index"], s["sample"]) for s in samples] == [
        (i, j) for i in range(5) for j in (0, 1)
    ]
    # Greedy: a prompt's two samples are the same completion.
    assert all(samples[2 * i]["completion"] == samples[2 * i + 1]["completion"] for i in range(5))
    assert all(s["completionTokens"] <= 4 and s["loss"] > 0 for s in samples)
