"""olmo2 (llama.cpp src/models/olmo2.cpp): no pre-norms; RMSNorm of q over its whole width and of
k over its whole width (before RoPE); post-attention and post-FFN norms; NEOX RoPE with
``rope.freq_base`` on every layer; the head is always output.weight. With
``attention.sliding_window`` > 0, the layers of the pattern (default 4) attend within the window
and rotate unscaled (``rope.freq_base_swa`` is read by llama.cpp but changes nothing here)."""

from __future__ import annotations

from onnx_struct.errors import ValidationError
from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import (
    Block,
    Hyperparameters,
    Layer,
    Rope,
    Tensors,
    full_rope_dims,
    has_window,
    swa_layers,
    window,
)

ARCHITECTURES = ("olmo2",)


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    full_rope_dims(keys, hp)
    if hp.head_dim * hp.n_heads != hp.n_embd:  # llama.cpp creates olmo2's tensors with n_embd / n_head
        raise ValidationError(
            keys.path("attention.key_length"),
            f"head size {hp.head_dim} x {hp.n_heads} heads differs from embedding_length {hp.n_embd}",
            code="unsupported_architecture",
        )
    windowed = has_window(keys)
    size = window(keys, hp) if windowed else None
    swa = swa_layers(keys, hp, 4) if windowed else [False] * hp.n_layers
    local_rope = Rope(hp.freq_base, 1.0, neox=True)
    global_rope = Rope(hp.freq_base, hp.freq_scale, neox=True)
    return Block(
        layers=tuple(Layer(local_rope, size) if is_swa else Layer(global_rope) for is_swa in swa),
        attention_scale=hp.head_dim**-0.5,
        attn_pre_norm=False,
        attn_post_norm=True,
        ffn_pre_norm=False,
        ffn_post_norm=True,
        qk_norm="full",
        head="required",
    )
