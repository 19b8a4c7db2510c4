"""The generation engine on the tiny chat model with two adapters: one mixed batch answers
each request as PEFT's own greedy generation does, token for token; sampling, stop strings,
log probabilities and adapters added and removed at run time behave as the API promises."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from akka_training.engines.generation import BASE, GenerationRequest, SamplingParams
from akka_training.engines.generation.batcher import Batcher
from akka_training.engines.generation.engine import AdapterNotLoaded, GenerationEngine
from akka_training.engines.generation.schema import Delta, GenerationResult
from akka_training.testing.waiting import until

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(max_tokens=12, temperature=0)


@pytest.fixture(scope="module")
def engine(two_adapters: tuple[Path, Path, Path]) -> Iterator[GenerationEngine]:
    base, first, second = two_adapters
    engine = GenerationEngine(base)
    engine.add_adapter("first", first)
    engine.add_adapter("second", second)
    yield engine


def peft_greedy(
    base: Path, adapter: Path | None, prompt: tuple[int, ...], tokens: int
) -> list[int]:
    model: Any = AutoModelForCausalLM.from_pretrained(str(base))
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter))
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=tokens
    )
    return [int(t) for t in out[0, len(prompt) :].tolist()]


def test_one_batch_of_two_adapters_answers_as_peft_greedy_does(
    engine: GenerationEngine, two_adapters: tuple[Path, Path, Path]
) -> None:
    base, first, second = two_adapters
    prompts = [
        engine.chat_prompt([{"role": "user", "content": "hello there"}]),
        engine.text_prompt("the cat sat on a mat and"),
    ]
    named = {"first": first, "second": second, BASE: None}
    requests = [GenerationRequest(p, name, GREEDY) for p in prompts for name in named]
    results = engine.generate(requests)
    answers = {}
    for request, result in zip(requests, results, strict=True):
        expected = peft_greedy(base, named[request.adapter], request.prompt_ids, 12)
        got = list(result.completions[0].token_ids)
        assert got == expected, f"{request.adapter}: {got} != {expected}"
        answers[request.adapter, request.prompt_ids] = got
    # The adapters matter: each answers the same prompt differently.
    assert len({tuple(answers[n, prompts[0]]) for n in named}) == 3


def test_usage_counts_every_completion(engine: GenerationEngine) -> None:
    prompt = engine.text_prompt("one two three")
    sampling = SamplingParams(max_tokens=5, temperature=1.0, seed=7, n=3)
    [result] = engine.generate([GenerationRequest(prompt, "first", sampling)])
    assert result.prompt_tokens == len(prompt)
    assert [c.index for c in result.completions] == [0, 1, 2]
    assert result.completion_tokens == sum(len(c.token_ids) for c in result.completions)
    assert all(len(c.token_ids) <= 5 for c in result.completions)


def test_a_seed_repeats_a_sample_and_another_seed_differs(engine: GenerationEngine) -> None:
    prompt = engine.text_prompt("the cat")

    def sample(seed: int) -> list[tuple[int, ...]]:
        sampling = SamplingParams(max_tokens=8, temperature=1.5, seed=seed, n=2)
        [result] = engine.generate([GenerationRequest(prompt, "second", sampling)])
        return [c.token_ids for c in result.completions]

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)


def test_logprobs_name_the_greedy_token_as_the_likeliest(engine: GenerationEngine) -> None:
    sampling = SamplingParams(max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
    [result] = engine.generate([GenerationRequest(engine.text_prompt("a b"), BASE, sampling)])
    completion = result.completions[0]
    assert completion.logprobs is not None
    assert [lp.token_id for lp in completion.logprobs] == list(completion.token_ids)
    for lp in completion.logprobs:
        assert len(lp.top) == 3
        assert lp.top[0].token_id == lp.token_id
        assert lp.logprob == pytest.approx(lp.top[0].logprob)
        assert lp.logprob <= 0


def test_a_stop_string_ends_the_text_before_it(engine: GenerationEngine) -> None:
    prompt = engine.text_prompt("the cat sat on a mat and")
    [full] = engine.generate([GenerationRequest(prompt, "first", GREEDY)])
    text = full.completions[0].text
    stop = text[3:5]
    [cut] = engine.generate(
        [
            GenerationRequest(
                prompt, "first", SamplingParams(max_tokens=12, temperature=0, stop=(stop,))
            )
        ]
    )
    assert cut.completions[0].finish_reason == "stop"
    assert cut.completions[0].text == text[: text.find(stop)]


def test_deltas_stream_the_whole_text_and_end_with_the_reason(engine: GenerationEngine) -> None:
    prompt = engine.text_prompt("the cat")
    deltas: list[Delta] = []
    [result] = engine.generate([GenerationRequest(prompt, "second", GREEDY)], deltas.append)
    assert "".join(d.text for d in deltas) == result.completions[0].text
    assert deltas[-1].finish_reason == "length"
    assert all(d.finish_reason is None for d in deltas[:-1])


def test_adapters_are_added_and_removed_while_the_engine_runs(
    two_adapters: tuple[Path, Path, Path],
) -> None:
    base, first, _ = two_adapters
    engine = GenerationEngine(base)
    prompt = engine.text_prompt("the cat")
    [before] = engine.generate([GenerationRequest(prompt, BASE, GREEDY)])
    engine.add_adapter("first", first)
    [adapted] = engine.generate([GenerationRequest(prompt, "first", GREEDY)])
    assert adapted.completions[0].token_ids != before.completions[0].token_ids
    engine.remove_adapter("first")
    assert engine.adapters == {}
    with pytest.raises(AdapterNotLoaded):
        engine.generate([GenerationRequest(prompt, "first", GREEDY)])
    [after] = engine.generate([GenerationRequest(prompt, BASE, GREEDY)])
    assert after.completions[0].token_ids == before.completions[0].token_ids


def test_requests_submitted_together_are_answered_in_one_batch(
    engine: GenerationEngine,
) -> None:
    prompts = [engine.text_prompt("the cat"), engine.text_prompt("a b c d")]
    requests = [GenerationRequest(p, a, GREEDY) for p in prompts for a in ("first", BASE)]
    alone = [engine.generate([r])[0] for r in requests]
    batcher = Batcher(engine, start=False)
    answers: dict[int, GenerationResult] = {}
    streamed: dict[int, list[str]] = {i: [] for i in range(len(requests))}

    def call(i: int) -> None:
        def hear(delta: Delta) -> None:
            assert delta.request == 0
            streamed[i].append(delta.text)

        [answers[i]] = batcher.submit([requests[i]], hear)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    until(lambda: batcher.pending == len(requests), what="every request to be queued")
    batcher.start()
    for t in threads:
        t.join()
    batcher.close()
    assert batcher.batches == 1
    for i, result in enumerate(alone):
        assert answers[i].completions[0].token_ids == result.completions[0].token_ids
        assert "".join(streamed[i]) == result.completions[0].text
    with pytest.raises(AdapterNotLoaded):
        Batcher(engine).submit([GenerationRequest(prompts[0], "missing", GREEDY)])


def test_a_request_arriving_mid_decode_joins_the_batch_and_answers_as_peft_greedy(
    engine: GenerationEngine, two_adapters: tuple[Path, Path, Path]
) -> None:
    base, first, second = two_adapters
    long = GenerationRequest(
        engine.chat_prompt([{"role": "user", "content": "hello there, how are you today?"}]),
        "first",
        SamplingParams(max_tokens=16, temperature=0),
    )
    late = GenerationRequest(engine.text_prompt("a b"), "second", GREEDY)
    batcher = Batcher(engine)
    answers: dict[str, GenerationResult] = {}
    streamed: dict[str, list[str]] = {"long": [], "late": []}
    late_thread = threading.Thread(
        target=lambda: answers.setdefault(
            "late", batcher.submit([late], lambda d: streamed["late"].append(d.text))[0]
        )
    )

    def hear_long(delta: Delta) -> None:
        streamed["long"].append(delta.text)
        if not late_thread.is_alive() and "late" not in answers:
            # The batch is decoding `long`: `late` arrives now, and waits for the next step.
            late_thread.start()
            until(lambda: batcher.pending == 1, what="the late request to be queued")

    [answers["long"]] = batcher.submit([long], hear_long)
    late_thread.join()
    batcher.close()
    assert (batcher.batches, batcher.joined) == (2, 1)
    for name, request, adapter in (("long", long, first), ("late", late, second)):
        completion = answers[name].completions[0]
        tokens = request.sampling.max_tokens
        expected = peft_greedy(base, adapter, request.prompt_ids, tokens)
        assert list(completion.token_ids) == expected[: len(completion.token_ids)]
        assert len(completion.token_ids) == tokens or completion.finish_reason == "stop"
        assert "".join(streamed[name]) == completion.text
