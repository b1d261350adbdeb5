"""llama and mistral (llama.cpp src/models/llama.cpp): the reference block. RMSNorm before
attention and FFN, q/k/v (optional biases), NORM-mode RoPE on every layer (Llama 3.1's
``rope_freqs`` divides the frequencies), kq scale 1/sqrt(head size), SwiGLU, optional untied head."""

from __future__ import annotations

from onnx_struct.errors import ValidationError
from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import Block, Hyperparameters, Layer, Rope, Tensors, full_rope_dims

ARCHITECTURES = ("llama", "mistral")


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    full_rope_dims(keys, hp)
    if keys.raw("attention.sliding_window", 0):
        raise ValidationError(
            keys.path("attention.sliding_window"),
            f"sliding-window attention is not part of {hp.architecture}'s graph (gemma3, gemma2 and olmo2 have it)",
            code="unsupported_architecture",
        )
    factors = "rope_freqs.weight" if "rope_freqs.weight" in tensors else None
    rope = Rope(hp.freq_base, hp.freq_scale, factors=factors)
    return Block(
        layers=(Layer(rope),) * hp.n_layers,
        attention_scale=hp.head_dim**-0.5,
        biases=frozenset({"attn_q", "attn_k", "attn_v", "attn_output"}),
    )
