"""olmo2 (llama.cpp src/models/olmo2.cpp): no pre-norms; RMSNorm of q over its whole width and of
k over its whole width (before RoPE); post-attention and post-FFN norms; NEOX RoPE with
``rope.freq_base`` on every layer; the head is always output.weight. With
``attention.sliding_window`` > 0, the layers of the pattern (default 4) attend within the window
and rotate unscaled (``rope.freq_base_swa`` is read by llama.cpp but changes nothing here)."""

from __future__ import annotations

from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import (
    Block,
    Hyperparameters,
    Layer,
    Rope,
    Tensors,
    full_rope_dims,
    has_window,
    heads_span_embedding,
    swa_layers,
    window,
)

ARCHITECTURES = ("olmo2",)


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    full_rope_dims(keys, hp)
    heads_span_embedding(keys, hp)
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
