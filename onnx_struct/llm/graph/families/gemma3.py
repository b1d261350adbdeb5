"""gemma3 (llama.cpp src/models/gemma3.cpp): gemma2's norms plus RMSNorm of q and k per head
(before RoPE); no attention softcap, a final softcap only where ``final_logit_softcapping`` is
set. With ``attention.sliding_window`` > 0, the layers of the pattern (default 6: 5 of every 6)
attend within the window and rotate with ``rope.freq_base_swa`` (default 10000) unscaled; the
others with ``rope.freq_base`` and the linear scale. q is scaled by 1/sqrt(head size), by
1/sqrt(n_embd / n_head) in the 27B model (62 layers). The head is token_embd unless the file
has output.weight."""

from __future__ import annotations

from onnx_struct.llm.graph.families.gemma import OPTIONAL_BIASES, embedding_scale
from onnx_struct.llm.graph.families.gemma2 import attention_scale
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

ARCHITECTURES = ("gemma3",)
LAYERS_27B = 62


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    full_rope_dims(keys, hp)
    windowed = has_window(keys)
    size = window(keys, hp) if windowed else None
    swa = swa_layers(keys, hp, 6) if windowed else [False] * hp.n_layers
    global_rope = Rope(hp.freq_base, hp.freq_scale, neox=True)
    local_rope = Rope(keys.positive_float("rope.freq_base_swa", 10000.0), 1.0, neox=True, base_key="rope.freq_base_swa")
    layers = tuple(Layer(local_rope, size) if is_swa else Layer(global_rope) for is_swa in swa)
    return Block(
        layers=layers,
        attention_scale=attention_scale(keys, hp, LAYERS_27B),
        attn_post_norm=True,
        ffn_post_norm=True,
        qk_norm="head",
        activation="gelu_tanh",
        fused_qkv="optional",
        biases=OPTIONAL_BIASES,
        embedding_scale=embedding_scale(hp),
        final_softcap=keys.optional_positive_float("final_logit_softcapping"),
    )
