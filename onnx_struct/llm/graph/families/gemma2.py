"""gemma2 (llama.cpp src/models/gemma2.cpp): gemma's block with post-attention and post-FFN
norms, an attention softcap (``attn_logit_softcapping``, default 50) and a final logit softcap
(``final_logit_softcapping``, default 30), and sliding-window attention (``attention.sliding_window``,
default 4096) on the layers of the pattern (default 2: the even layers). Windowed layers rotate
with ``rope.freq_base_swa`` (default ``rope.freq_base``); every layer with the linear scale.
q is scaled by 1/sqrt(head size), by 1/sqrt(n_embd / n_head) in the 27B model (46 layers)."""

from __future__ import annotations

from onnx_struct.errors import ValidationError
from onnx_struct.llm.graph.families.gemma import OPTIONAL_BIASES, embedding_scale
from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import (
    Block,
    Hyperparameters,
    Layer,
    Rope,
    Tensors,
    full_rope_dims,
    swa_layers,
    window,
)

ARCHITECTURES = ("gemma2",)
LAYERS_27B = 46


def attention_scale(keys: Keys, hp: Hyperparameters, layers_27b: int) -> float:
    """llama-model.cpp: f_attention_scale is 1/sqrt(n_embd / n_head) for the 27B model (told by
    its layer count), else 1/sqrt(n_embd_head_k).

    Raises:
        ValidationError: at the 27B layer count, more heads than embedding_length (n_embd / n_head
            is 0 in integer division: an infinite scale).
    """
    if hp.n_layers != layers_27b:
        return hp.head_dim**-0.5
    if hp.n_embd < hp.n_heads:
        raise ValidationError(
            keys.path("attention.head_count"),
            f"{hp.n_heads} heads over embedding_length {hp.n_embd}: the {layers_27b}-layer (27B) q scale "
            "1/sqrt(n_embd / n_head) would divide by zero",
        )
    return (hp.n_embd // hp.n_heads) ** -0.5


def block(keys: Keys, hp: Hyperparameters, tensors: Tensors) -> Block:
    full_rope_dims(keys, hp)
    size = window(keys, hp, 4096)
    swa = swa_layers(keys, hp, 2)
    base_swa = keys.positive_float("rope.freq_base_swa", hp.freq_base)
    layers = tuple(
        Layer(Rope(base_swa, hp.freq_scale, neox=True, base_key="rope.freq_base_swa"), size)
        if is_swa
        else Layer(Rope(hp.freq_base, hp.freq_scale, neox=True))
        for is_swa in swa
    )
    return Block(
        layers=layers,
        attention_scale=attention_scale(keys, hp, LAYERS_27B),
        attn_post_norm=True,
        ffn_post_norm=True,
        activation="gelu_tanh",
        biases=OPTIONAL_BIASES,
        embedding_scale=embedding_scale(hp),
        attn_softcap=keys.positive_float("attn_logit_softcapping", 50.0),
        final_softcap=keys.positive_float("final_logit_softcapping", 30.0),
        head="tied",
    )
