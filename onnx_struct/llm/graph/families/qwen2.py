"""qwen2 (llama.cpp src/models/qwen2.cpp): llama's block with NEOX RoPE and q/k/v biases. qwen2.cpp
ropes without frequency factors and creates no rope_freqs tensor (llama.cpp refuses a file that
has one), so rope_freqs.weight is an unused tensor here too."""

from __future__ import annotations

import dataclasses

from onnx_struct.llm.graph.families import llama
from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import Block, Hyperparameters, Layer, Tensors

ARCHITECTURES = ("qwen2",)


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    base = llama.block(keys, hp, tensors)
    return dataclasses.replace(
        base,
        layers=tuple(Layer(dataclasses.replace(layer.rope, neox=True, factors=None)) for layer in base.layers),
        biases=frozenset(),
        required_biases=frozenset({"attn_q", "attn_k", "attn_v"}),
    )
