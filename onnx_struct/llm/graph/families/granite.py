"""granite (llama.cpp src/models/granite.cpp): llama's block with four multipliers: the embedding
times ``embedding_scale``, the attention and FFN outputs times ``residual_scale`` before each
residual add, kq scale ``attention.scale`` (else 1/sqrt(head size)), the logits divided by
``logit_scale`` (required). Each multiplier absent or 0 is not applied. NORM RoPE on every layer
unless ``rope.scaling.finetuned`` is false (then none); optional biases on every projection."""

from __future__ import annotations

from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import Block, Hyperparameters, Layer, Rope, Tensors, full_rope_dims

ARCHITECTURES = ("granite",)
OPTIONAL_BIASES = frozenset({"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    full_rope_dims(keys, hp)  # granite.cpp asserts n_embd_head == n_rot
    rope = Rope(hp.freq_base, hp.freq_scale) if keys.boolean("rope.scaling.finetuned", True) else None
    return Block(
        layers=(Layer(rope),) * hp.n_layers,
        attention_scale=keys.optional_positive_float("attention.scale") or hp.head_dim**-0.5,
        fused_qkv="optional",
        biases=OPTIONAL_BIASES,
        embedding_scale=keys.optional_positive_float("embedding_scale"),
        residual_scale=keys.optional_positive_float("residual_scale"),
        logit_scale=keys.positive_float("logit_scale"),
    )
