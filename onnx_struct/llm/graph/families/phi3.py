"""phi3 (llama.cpp src/models/phi3.cpp): fused ``attn_qkv`` (rows q, k, v; separate q/k/v also
read) and ``ffn_up`` holding [gate; up] (2 * n_ff rows, silu(gate) * up); NEOX RoPE over
``rope.dimension_count`` dims (partial rotary allowed), q scaled by 1/sqrt(head size).

LongRoPE: the frequencies are divided by ``rope_factors_long`` when the context exceeds
``rope.scaling.original_context_length`` (default ``context_length``), else by
``rope_factors_short``; ``rope.scaling.attn_factor`` multiplies cos and sin. llama.cpp decides by
the context it runs with; the graph serves every position up to ``context_length``, so it uses the
factors llama.cpp uses at that context. llama.cpp reads ``attention.sliding_window`` for phi3 and
then disables it: the graph attends over every past position too."""

from __future__ import annotations

from onnx_struct.errors import ValidationError
from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import (
    GQA_HEAD_MULTIPLE,
    Block,
    Hyperparameters,
    Layer,
    Rope,
    Tensors,
    heads_span_embedding,
)

ARCHITECTURES = ("phi3",)
LONG, SHORT = "rope_factors_long.weight", "rope_factors_short.weight"


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    heads_span_embedding(keys, hp)
    if hp.rope_dims > hp.head_dim or hp.rope_dims % GQA_HEAD_MULTIPLE:
        raise ValidationError(
            keys.path("rope.dimension_count"),
            f"{hp.rope_dims} rotated dims: must be a multiple of {GQA_HEAD_MULTIPLE} up to the head size "
            f"{hp.head_dim} (onnxruntime's rotary)",
            code="unsupported_architecture",
        )
    original = keys.positive_int("rope.scaling.original_context_length", hp.context_length)
    for name in (LONG, SHORT):  # llama.cpp creates both with n_rot/2 entries, whichever it uses
        if name in tensors and tuple(tensors[name][1]) != (hp.rope_dims // 2,):
            raise ValidationError(
                f"gguf.tensors[{name!r}]",
                f"has shape {list(tensors[name][1])}; the metadata makes it {[hp.rope_dims // 2]}",
            )
    factors = LONG if hp.context_length > original else SHORT
    if factors not in tensors:
        factors = None
    rope = Rope(
        hp.freq_base,
        hp.freq_scale,
        neox=True,
        factors=factors,
        attn_factor=keys.positive_float("rope.scaling.attn_factor", 1.0),
        dims=hp.rope_dims,
    )
    return Block(
        layers=(Layer(rope),) * hp.n_layers,
        attention_scale=hp.head_dim**-0.5,
        fused_qkv="optional",
        fused_gate_up=True,
        head="optional",
        unread=frozenset({LONG, SHORT}),  # the pair not chosen
    )
