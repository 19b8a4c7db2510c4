"""The OpenAI bodies the endpoint's job takes and gives, without a model: each refusal in its
words and with its parameter, the sampling a body asks for, and the answer's shape with the
usage of every completion."""

from __future__ import annotations

from typing import Any

import pytest

from akka_training.engines.generation.schema import (
    BASE,
    Completion,
    Delta,
    GenerationResult,
    SamplingParams,
    TokenLogprob,
    TopLogprob,
)
from akka_training.engines.serving.openai_api import (
    ApiRefusal,
    answer,
    chat_call,
    chunk,
    text_call,
    usage_chunk,
)

MESSAGES = [{"role": "user", "content": "hi"}]


def chat_prompt(messages: Any) -> tuple[int, ...]:
    return (1, 2, 3)


def text_prompt(text: str) -> tuple[int, ...]:
    return tuple(range(len(text)))


def chat(**fields: Any) -> dict[str, Any]:
    """A chat body with a model and messages, changed by `fields` (None leaves a key out)."""
    body = {"model": "m", "messages": MESSAGES, **fields}
    return {k: v for k, v in body.items() if v is not None}


@pytest.mark.parametrize(
    ("body", "words", "param"),
    [
        (chat(model=None), "model is required: a base model, a run, or RUN:step-N.", "model"),
        (chat(messages=None), "messages must be a non-empty list of {role, content}.", "messages"),
        (chat(messages=[{}]), "messages[0] must be an object with a role.", "messages"),
        (chat(temperature="hot"), "temperature must be a number, not 'hot'.", "temperature"),
        (chat(temperature=-1), "temperature must be 0 or more, not -1.0.", "temperature"),
        (chat(top_p=0), "top_p must be above 0 and at most 1, not 0.0.", "top_p"),
        (chat(max_tokens=0), "max_tokens must be at least 1, not 0.", "max_tokens"),
        (chat(max_tokens="x"), "max_tokens must be an integer, not 'x'.", "max_tokens"),
        (chat(n=17), "n must be an integer from 1 to 16.", "n"),
        (chat(stop=[1]), "stop must be a string or a list of up to 4 strings.", "stop"),
        (chat(seed=1.5), "seed must be an integer, not 1.5.", "seed"),
        (chat(top_logprobs=2), "top_logprobs needs logprobs set to true.", "top_logprobs"),
        (
            chat(logprobs=True, top_logprobs=21),
            "top_logprobs must be an integer from 0 to 20.",
            "top_logprobs",
        ),
    ],
)
def test_a_chat_body_is_refused_in_words_naming_the_parameter(
    body: dict[str, Any], words: str, param: str
) -> None:
    with pytest.raises(ApiRefusal) as refused:
        chat_call(body, BASE, chat_prompt)
    assert refused.value.status == 400
    assert refused.value.body() == {
        "error": {"message": words, "type": "invalid_request_error", "param": param, "code": None}
    }


def test_a_text_body_is_refused_in_words() -> None:
    with pytest.raises(ApiRefusal, match="prompt must be a string or a non-empty list of strings"):
        text_call({"model": "m", "prompt": []}, BASE, text_prompt)
    with pytest.raises(ApiRefusal, match="logprobs must be an integer from 0 to 5"):
        text_call({"model": "m", "prompt": "a", "logprobs": 6}, BASE, text_prompt)


def test_a_chat_body_becomes_the_sampling_it_asks_for() -> None:
    call = chat_call(
        {
            "model": "run-1",
            "messages": MESSAGES,
            "max_completion_tokens": 7,
            "temperature": 0,
            "stop": "x",
            "seed": 3,
            "n": 2,
            "logprobs": True,
            "top_logprobs": 2,
            "stream": True,
        },
        "run-1",
        chat_prompt,
    )
    [request] = call.requests
    assert (request.prompt_ids, request.adapter) == ((1, 2, 3), "run-1")
    assert request.sampling == SamplingParams(
        max_tokens=7, temperature=0, stop=("x",), seed=3, n=2, logprobs=True, top_logprobs=2
    )
    assert call.stream and call.model == "run-1"


def test_answers_carry_every_completion_and_the_usage() -> None:
    call = text_call(
        {"model": "m", "prompt": ["ab", "abc"], "n": 2, "logprobs": 1}, BASE, text_prompt
    )
    lp = TokenLogprob(5, "y", -0.5, (TopLogprob(5, "y", -0.5),))

    def completions() -> tuple[Completion, ...]:
        return tuple(Completion(i, "y", (5,), "length", (lp,)) for i in range(2))

    results = [GenerationResult(completions(), 2), GenerationResult(completions(), 3)]
    body = answer(call, results)
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["choices"][0]["logprobs"] == {
        "tokens": ["y"],
        "token_logprobs": [-0.5],
        "top_logprobs": [{"y": -0.5}],
        "text_offset": [0],
    }
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
    assert usage_chunk(call, results)["choices"] == []
    streamed = chunk(call, Delta(1, 1, "y", "stop"), first=True)
    assert streamed["choices"] == [
        {"index": 3, "text": "y", "logprobs": None, "finish_reason": "stop"}
    ]
