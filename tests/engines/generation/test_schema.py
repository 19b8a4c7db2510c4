"""The sampling parameters refuse what no engine can sample with, each in a sentence."""

from __future__ import annotations

import pytest

from akka_training.engines.generation import SamplingParams


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"max_tokens": 0}, "max_tokens must be at least 1, not 0"),
        ({"temperature": -0.5}, "temperature must be 0 or more, not -0.5"),
        ({"top_p": 0.0}, "top_p must be above 0 and at most 1, not 0.0"),
        ({"top_p": 1.5}, "top_p must be above 0 and at most 1, not 1.5"),
        ({"n": 0}, "n must be at least 1, not 0"),
        ({"top_logprobs": -1}, "top_logprobs must be 0 or more, not -1"),
    ],
)
def test_sampling_parameters_out_of_range_are_refused(given: dict[str, float], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        SamplingParams(**given)  # type: ignore[arg-type]
