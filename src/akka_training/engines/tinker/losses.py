"""The built-in losses of ``forward_backward``, each the sum over a datum's target tokens (as
the Tinker API defines them), from the model's log-probabilities of the target tokens.

- ``cross_entropy``: ``-weights * logprobs``;
- ``importance_sampling``: ``-exp(logprobs - sampling_logprobs) * advantages``;
- ``ppo``: the clipped objective, the ratio clipped to ``[clip_low_threshold,
  clip_high_threshold]`` (default 0.8 and 1.2).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

LOSSES = ("cross_entropy", "importance_sampling", "ppo")


class LossError(ValueError):
    """A loss the job does not compute, or inputs it lacks; the message says what to change."""


def _input(inputs: Mapping[str, torch.Tensor], name: str, loss: str) -> torch.Tensor:
    if name not in inputs:
        raise LossError(f"the {loss} loss needs loss_fn_inputs[{name!r}] in every datum")
    return inputs[name]


def elementwise_loss(
    loss: str,
    logprobs: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    config: Mapping[str, float | str],
) -> torch.Tensor:
    """One value a target token; the datum's loss is their sum."""
    if loss == "cross_entropy":
        weights = inputs.get("weights")
        return -(logprobs if weights is None else logprobs * weights)
    if loss in ("importance_sampling", "ppo"):
        sampled = _input(inputs, "logprobs", loss)
        advantages = _input(inputs, "advantages", loss)
        ratio = torch.exp(logprobs - sampled)
        if loss == "importance_sampling":
            return -ratio * advantages
        low = float(config.get("clip_low_threshold", 0.8))
        high = float(config.get("clip_high_threshold", 1.2))
        clipped = torch.clamp(ratio, low, high)
        return -torch.minimum(ratio * advantages, clipped * advantages)
    raise LossError(
        f"the loss {loss!r} is not supported here; use one of {', '.join(LOSSES)}, or "
        "forward_backward_custom"
    )
