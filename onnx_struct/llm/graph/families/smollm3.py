"""smollm3 (llama.cpp src/models/smollm3.cpp): llama's block, but every 4th layer attends without
RoPE: layer il rotates iff (il + 1) % 4 != 0 (llama.cpp hard-codes n_no_rope_layer_step = 4 and
reads no key for it)."""

from __future__ import annotations

from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import Block, Hyperparameters, Layer, Rope, Tensors, full_rope_dims

ARCHITECTURES = ("smollm3",)
NO_ROPE_LAYER_STEP = 4


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    full_rope_dims(keys, hp)
    rope = Rope(hp.freq_base, hp.freq_scale)
    return Block(
        layers=tuple(Layer(rope if (il + 1) % NO_ROPE_LAYER_STEP else None) for il in range(hp.n_layers)),
        attention_scale=hp.head_dim**-0.5,
    )
