"""gemma (llama.cpp src/models/gemma.cpp): the embedding scaled by sqrt(n_embd), NEOX RoPE,
GELU-tanh gated FFN, the head tied to token_embd. The GGUF norm weights already hold 1 + w
(the converter adds it), so the norms are plain RMSNorm."""

from __future__ import annotations

import numpy as np

from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import Block, Hyperparameters, Layer, Rope, Tensors, full_rope_dims

ARCHITECTURES = ("gemma",)
# llama.cpp's optional q/k/v biases for the gemma family (create_tensor ... TENSOR_NOT_REQUIRED).
OPTIONAL_BIASES = frozenset({"attn_q", "attn_k", "attn_v"})


def embedding_scale(hp: Hyperparameters) -> float:
    """gemma*.cpp: ggml_scale(inpL, sqrtf(n_embd)), a float32 square root."""
    return float(np.sqrt(np.float32(hp.n_embd)))


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    full_rope_dims(keys, hp)
    return Block(
        layers=(Layer(Rope(hp.freq_base, hp.freq_scale, neox=True)),) * hp.n_layers,
        attention_scale=hp.head_dim**-0.5,
        activation="gelu_tanh",
        biases=OPTIONAL_BIASES,
        embedding_scale=embedding_scale(hp),
        head="tied",
    )
