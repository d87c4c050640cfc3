"""`pad_sequence(torch.split(values, lengths.tolist()), batch_first=True)` as one op on the lengths tensor.

After Dynamo, that expression is B split sizes baked in as constants: a graph of B chunks for every new batch of
lengths, and eager once Dynamo's recompile limit is reached. The loop capture (loop_capture.py) rewrites it before
Dynamo into `pad_partitions(values, lengths)`: an opaque op whose padded length is a size the trace does not know
(an unbacked size, like `nonzero`'s), so one graph serves every batch. Dynamo traces such an op only with
`capture_dynamic_output_shape_ops` (else it breaks the graph there): `compile` sets it around the calls of a model
whose padded split was captured, and only then (DYNAMO_SETTINGS). Rows past a partition's length are zeros, as
`pad_sequence`'s default padding_value gives; the gradient of the values is the padded gradient's rows gathered back.
"""

from __future__ import annotations

import torch


def _owner_and_position(lengths: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row of the values: its partition and its position inside it."""
    partitions = torch.arange(lengths.shape[0], device=lengths.device)
    owner = torch.repeat_interleave(partitions, lengths, output_size=rows)
    starts = torch.cumsum(lengths, 0) - lengths
    return owner, torch.arange(rows, device=lengths.device) - starts[owner]


@torch.library.custom_op("liger_fuse::pad_partitions", mutates_args=())
def pad_partitions(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    if lengths.dim() != 1 or int(lengths.sum()) != values.shape[0] or bool((lengths < 0).any()):
        # torch.split's own condition: the sizes cover the rows exactly
        raise ValueError(f"lengths must be non-negative and sum to the values' {values.shape[0]} rows")
    longest = int(lengths.max()) if lengths.numel() else 0
    padded = values.new_zeros(lengths.shape[0], longest, *values.shape[1:])
    owner, position = _owner_and_position(lengths.to(values.device), values.shape[0])
    padded[owner, position] = values
    return padded


@pad_partitions.register_fake
def _(values, lengths):
    longest = torch.library.get_ctx().new_dynamic_size()
    return values.new_empty(lengths.shape[0], longest, *values.shape[1:])


@torch.library.custom_op("liger_fuse::unpad_partitions", mutates_args=())
def unpad_partitions(padded: torch.Tensor, lengths: torch.Tensor, rows: int) -> torch.Tensor:
    owner, position = _owner_and_position(lengths.to(padded.device), rows)
    return padded[owner, position]


@unpad_partitions.register_fake
def _(padded, lengths, rows):
    return padded.new_empty(rows, *padded.shape[2:])


def _setup_context(ctx, inputs, output):
    values, lengths = inputs
    ctx.save_for_backward(lengths)
    ctx.rows = values.shape[0]


def _backward(ctx, grad):
    (lengths,) = ctx.saved_tensors
    return unpad_partitions(grad.contiguous(), lengths, ctx.rows), None


PATTERN_NAME = "padded_split"
DYNAMO_SETTINGS = {"capture_dynamic_output_shape_ops": True}  # while a model holding a captured padded split runs


pad_partitions.register_autograd(_backward, setup_context=_setup_context)
