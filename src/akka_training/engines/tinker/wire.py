"""The protobuf bodies of ``forward_backward`` (and ``forward``) requests and their results, as
the `tinker` SDK writes and reads them. The schema is the SDK's own
(`tinker.proto.tinker_public_pb2`); this module only maps it onto arrays."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tinker.proto import tinker_public_pb2 as pb

_NUMPY: dict[int, np.dtype[np.generic]] = {
    pb.DTYPE_FLOAT32: np.dtype(np.float32),
    pb.DTYPE_INT64: np.dtype(np.int64),
    pb.DTYPE_INT32: np.dtype(np.int32),
}


@dataclass
class Datum:
    tokens: list[int]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ForwardBackward:
    model_id: str
    seq_id: int
    loss_fn: str
    forward_only: bool
    config: dict[str, float | str]
    data: list[Datum]


class WireError(ValueError):
    """A body the job cannot read; its message says what to change."""


def _tensor(msg: pb.Tensor) -> np.ndarray:
    dtype = _NUMPY.get(msg.dtype)
    if dtype is None:
        raise WireError(f"a loss input has an unsupported dtype ({msg.dtype})")
    shape = tuple(msg.shape)
    if msg.HasField("sparse_csr"):
        values = np.frombuffer(msg.sparse_csr.values, dtype=dtype)
        rows = np.frombuffer(msg.sparse_csr.crow_indices, dtype=np.int64)
        cols = np.frombuffer(msg.sparse_csr.col_indices, dtype=np.int64)
        dense = np.zeros(shape, dtype=dtype)
        for row in range(len(rows) - 1):
            start, end = int(rows[row]), int(rows[row + 1])
            dense[row, cols[start:end]] = values[start:end]
        return dense
    array = np.frombuffer(msg.dense, dtype=dtype).copy()
    return array.reshape(shape) if shape else array


def read_forward_backward(body: bytes) -> ForwardBackward:
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # the protobuf runtime's DecodeError
        raise WireError(f"the forward_backward body is not the SDK's protobuf: {exc}") from None
    config: dict[str, float | str] = {k: float(v) for k, v in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    data = []
    for datum in msg.data:
        tokens: list[int] = []
        for chunk in datum.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise WireError("only token chunks (EncodedTextChunk) are supported as input")
            tokens.extend(int(t) for t in np.frombuffer(chunk.encoded_text.tokens, np.int32))
        inputs = {name: _tensor(t) for name, t in datum.loss_fn_inputs.items()}
        data.append(Datum(tokens=tokens, inputs=inputs))
    return ForwardBackward(
        model_id=msg.model_id,
        seq_id=msg.seq_id,
        loss_fn=msg.loss_fn,
        forward_only=msg.forward_only,
        config=config,
        data=data,
    )


def write_output(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """The ``ForwardBackwardOutput`` of per-datum float32 arrays (each one-dimensional, one value
    a target token) and the batch's metrics."""
    msg = pb.ForwardBackwardOutput()
    msg.loss_fn_output_type = "ArrayRecord"
    for name, value in metrics.items():
        msg.metrics[name] = float(value)
    if outputs:
        record = msg.loss_fn_outputs.add()
        record.num_datums = len(outputs)
        for name in outputs[0]:
            arrays = [np.ascontiguousarray(o[name], dtype=np.float32) for o in outputs]
            offsets = np.cumsum([0] + [a.nbytes for a in arrays], dtype=np.int64)
            batched = record.fields[name]
            batched.data = b"".join(a.tobytes() for a in arrays)
            batched.offsets = offsets.tobytes()
            batched.dtype = pb.DTYPE_FLOAT32
    written: bytes = msg.SerializeToString()
    return written
