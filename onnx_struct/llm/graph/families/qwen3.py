"""qwen3 (llama.cpp src/models/qwen3.cpp): llama's block with RMSNorm of q and k per head
(before RoPE), NEOX RoPE, optional q/k/v biases (real files have none), optional untied head."""

from __future__ import annotations

from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import Block, Hyperparameters, Layer, Rope, Tensors, full_rope_dims

ARCHITECTURES = ("qwen3",)


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    full_rope_dims(keys, hp)  # qwen3.cpp asserts n_rot == n_embd_head
    return Block(
        layers=(Layer(Rope(hp.freq_base, hp.freq_scale, neox=True)),) * hp.n_layers,
        attention_scale=hp.head_dim**-0.5,
        qk_norm="head",
        biases=frozenset({"attn_q", "attn_k", "attn_v"}),
    )
