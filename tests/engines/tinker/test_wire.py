"""The job reads the SDK's protobuf bodies and writes results the SDK reads, checked with the
SDK's own converters; and the losses are the Tinker API's sums."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tinker import types
from tinker.proto.request_conv import forward_backward_request_to_proto
from tinker.proto.response_conv import deserialize_forward_backward_output

from akka_training.engines.tinker.losses import LossError, elementwise_loss
from akka_training.engines.tinker.wire import read_forward_backward, write_output

pytestmark = pytest.mark.slow


def test_a_forward_backward_body_reads_as_the_sdk_wrote_it() -> None:
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([5, 6, 7]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.array([6, 7, 8])),
            "weights": types.TensorData.from_numpy(np.array([0.0, 1.0, 1.0], dtype=np.float32)),
        },
    )
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=[datum], loss_fn="ppo", loss_fn_config={"clip_low_threshold": 0.9}
        ),
        model_id="run1",
        seq_id=3,
    )
    body = forward_backward_request_to_proto(request).SerializeToString()
    read = read_forward_backward(body)
    assert (read.model_id, read.seq_id, read.loss_fn) == ("run1", 3, "ppo")
    assert read.config == {"clip_low_threshold": 0.9}
    assert read.data[0].tokens == [5, 6, 7]
    assert read.data[0].inputs["target_tokens"].tolist() == [6, 7, 8]
    assert read.data[0].inputs["weights"].tolist() == [0.0, 1.0, 1.0]


def test_results_read_back_in_the_sdk() -> None:
    outputs = [
        {"logprobs": np.array([-1.0, -2.0], dtype=np.float32)},
        {"logprobs": np.array([-0.5], dtype=np.float32)},
    ]
    read = deserialize_forward_backward_output(write_output(outputs, {"loss:sum": 3.5}))
    assert read.metrics == {"loss:sum": 3.5}
    assert [o["logprobs"].tolist() for o in read.loss_fn_outputs] == [[-1.0, -2.0], [-0.5]]


def test_the_losses_are_sums_over_target_tokens() -> None:
    logprobs = torch.tensor([-1.0, -2.0])
    weights = {"weights": torch.tensor([1.0, 0.5])}
    assert elementwise_loss("cross_entropy", logprobs, weights, {}).sum().item() == 2.0
    same = {"logprobs": logprobs.clone(), "advantages": torch.tensor([1.0, -1.0])}
    assert elementwise_loss("importance_sampling", logprobs, same, {}).tolist() == [-1.0, 1.0]
    higher = {"logprobs": logprobs - 1.0, "advantages": torch.tensor([1.0, 1.0])}
    clipped = elementwise_loss("ppo", logprobs, higher, {"clip_high_threshold": 1.2})
    assert clipped.tolist() == pytest.approx([-1.2, -1.2])
    with pytest.raises(LossError, match="the loss 'dpo' is not supported here"):
        elementwise_loss("dpo", logprobs, same, {})
    with pytest.raises(
        LossError, match=r"the ppo loss needs loss_fn_inputs\['logprobs'\] in every datum"
    ):
        elementwise_loss("ppo", logprobs, weights, {})


def test_cispo_weighs_each_tokens_gradient_by_its_clipped_ratio() -> None:
    # Ratios e^1 ~ 2.718 (inside the default [0, 4]) and e^2 ~ 7.389 (clipped to 4).
    logprobs = torch.tensor([-1.0, -1.0], requires_grad=True)
    inputs = {"logprobs": torch.tensor([-2.0, -3.0]), "advantages": torch.tensor([1.0, 0.5])}
    loss = elementwise_loss("cispo", logprobs, inputs, {})
    e = float(np.exp(1.0))
    # -ratio * logprob * advantage: -(e)(-1)(1) = e; -(4)(-1)(0.5) = 2.
    assert loss.tolist() == pytest.approx([e, 2.0])
    loss.sum().backward()
    # The clipped ratio has no gradient: d/dlogprob = -ratio * advantage.
    assert logprobs.grad is not None
    assert logprobs.grad.tolist() == pytest.approx([-e, -2.0])
    narrower = elementwise_loss(
        "cispo", logprobs, inputs, {"clip_low_threshold": 0.5, "clip_high_threshold": 2.0}
    )
    assert narrower.tolist() == pytest.approx([2.0, 1.0])


def test_dro_is_the_advantage_less_a_quadratic_penalty() -> None:
    logprobs = torch.tensor([-1.0, -2.0], requires_grad=True)
    inputs = {"logprobs": torch.tensor([-1.5, -1.0]), "advantages": torch.tensor([2.0, -1.0])}
    loss = elementwise_loss("dro", logprobs, inputs, {"beta": 0.1})
    # -(logprob * advantage - beta/2 * (logprob - sampled)^2):
    # -(-2 - 0.05 * 0.25) = 2.0125; -(2 - 0.05 * 1) = -1.95.
    assert loss.tolist() == pytest.approx([2.0125, -1.95])
    loss.sum().backward()
    # d/dlogprob = -advantage + beta * (logprob - sampled): -2 + 0.05; 1 - 0.1.
    assert logprobs.grad is not None
    assert logprobs.grad.tolist() == pytest.approx([-1.95, 0.9])
    with pytest.raises(
        LossError, match=r"the dro loss needs its beta: pass loss_fn_config=\{'beta': 0.05\}"
    ):
        elementwise_loss("dro", logprobs, inputs, {})
