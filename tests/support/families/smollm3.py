"""smollm3: a tiny GGUF writer and an independent float64 oracle, written from llama.cpp 0.3.36's
src/models/smollm3.cpp and src/llama-model.cpp (load_hparams, llama_model_rope_type).

Spec (smollm3, one block il; x is [seq, n_embd]): the llama block with RoPE skipped on some layers.

1. ``a = rms_norm(x) * attn_norm`` (over n_embd, eps = attention.layer_norm_rms_epsilon).
2. ``q, k, v = a @ attn_{q,k,v}^T`` (+ attn_{q,k,v}.bias when present: optional in llama.cpp;
   fused attn_qkv optional too); q [seq, n_heads, head_dim], k/v [seq, n_kv_heads, head_dim],
   head_dim = attention.key_length (default n_embd / n_heads). No q/k norm.
3. RoPE NORM mode (rotates the pairs (x[2i], x[2i+1]); llama_model_rope_type lists SMOLLM3 as
   LLAMA_ROPE_TYPE_NORM, the converter permutes q/k as for llama) on q and k, angle
   ``p * freq_scale * freq_base^(-2i/d)`` -- ONLY on the layers where ``(il + 1) % 4 != 0``:
   layers 3, 7, 11, ... (0-based) use NO RoPE at all. The interval is hardcoded
   (smollm3.cpp load_arch_hparams: n_no_rope_layer_step = 4); no GGUF key is read for it (the HF
   config's no_rope_layer_interval / no_rope_layers are not in the file).
4. Cache: k (after RoPE where applied) and v. Attention causal (a query at p sees keys <= p, no
   window), kq_scale = 1/sqrt(head_dim) (smollm3.cpp: f_attention_scale == 0 ? 1/sqrt(n_embd_head)
   : f_attention_scale, and smollm3 never reads attention.scale, so always 1/sqrt(head_dim));
   query head j reads kv head j // (n_heads / n_kv_heads).
5. ``x = x + attn @ attn_output^T``.
6. ``f = rms_norm(x) * ffn_norm``; ``x = x + (silu(f @ ffn_gate^T) * (f @ ffn_up^T)) @ ffn_down^T``
   (ffn biases optional in the graph but llama.cpp never creates them for smollm3).
Head: ``rms_norm(x) * output_norm @ output^T``; output.weight optional, absent = tied to
token_embd (SmolLM3-3B is tied). No embedding scale, no softcap.

Metadata read (prefix smollm3.): context_length, embedding_length, block_count,
attention.layer_norm_rms_epsilon REQUIRED; feed_forward_length, attention.head_count (0 breaks the
tensor shapes); attention.head_count_kv (default head_count); attention.key_length /
value_length (default n_embd / head_count; must be equal and equal rope.dimension_count, else
GGML_ASSERT aborts); rope.dimension_count (default key_length); rope.freq_base (default 10000);
rope.scaling.type / rope.scaling.factor (linear default, factor 1).

Tensors (numpy shapes): token_embd.weight [n_vocab, n_embd], output_norm.weight [n_embd],
output.weight [n_vocab, n_embd] (optional); blk.N.attn_norm [n_embd], attn_q [n_heads*head_dim,
n_embd], attn_k / attn_v [n_kv_heads*head_dim, n_embd], attn_output [n_embd, n_heads*head_dim],
ffn_norm [n_embd], ffn_gate / ffn_up [n_ff, n_embd], ffn_down [n_embd, n_ff].
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from support.families.qwen3 import (
    QUANT_MIX,
    attention,
    empty_cache,
    finish_gguf,
    greedy_with,
    layer_weights,
    qkv,
    rms_norm,
    rope,
    start_gguf,
    swiglu,
)
from support.llm import spm_vocab

NO_ROPE_LAYER_STEP = 4  # smollm3.cpp: hparams.n_no_rope_layer_step = 4


def uses_rope(il: int) -> bool:
    """smollm3.cpp: use_rope = (il + 1) % n_no_rope_layer_step != 0."""
    return (il + 1) % NO_ROPE_LAYER_STEP != 0


@dataclasses.dataclass
class SmolLM3Config:
    architecture: str = "smollm3"
    n_layers: int = 4
    n_embd: int = 256
    n_ff: int = 512
    n_heads: int = 8
    n_kv_heads: int = 2
    head_dim: int = 32
    n_vocab: int = 96
    context_length: int = 128
    rms_eps: float = 1e-6
    freq_base: float = 5000000.0
    linear_rope_factor: float | None = None
    tied: bool = True
    types: dict[str, str] = dataclasses.field(default_factory=dict)
    default_type: str = "F32"
    seed: int = 0
    tokens: list[str] | None = None
    token_scores: list[float] | None = None
    token_types: list[int] | None = None
    bos: int = 1
    eos: int = 2


def _tiny(**fields) -> SmolLM3Config:
    return SmolLM3Config(**{**spm_vocab(), **fields})


CONFIGS: dict[str, SmolLM3Config] = {
    # 4 layers: layer 3 has no RoPE; GQA 8:2; tied; freq_base 5e6 as SmolLM3-3B
    "smollm3-gqa": _tiny(),
    # 5 layers (3 without RoPE, 4 with), untied, head_dim 64 (q width 512), linear rope scaling
    "smollm3-untied": _tiny(
        n_layers=5, n_kv_heads=4, head_dim=64, tied=False, freq_base=10000.0, linear_rope_factor=2.0, seed=1
    ),
    "smollm3-q4_k_m": _tiny(default_type="Q4_K", types=QUANT_MIX, seed=3),
}


def tensor_shapes(c: SmolLM3Config) -> dict[str, tuple[int, ...]]:
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    shapes = {"token_embd.weight": (c.n_vocab, c.n_embd), "output_norm.weight": (c.n_embd,)}
    if not c.tied:
        shapes["output.weight"] = (c.n_vocab, c.n_embd)
    for il in range(c.n_layers):
        layer = {
            "attn_norm.weight": (c.n_embd,),
            "attn_q.weight": (q, c.n_embd),
            "attn_k.weight": (kv, c.n_embd),
            "attn_v.weight": (kv, c.n_embd),
            "attn_output.weight": (c.n_embd, q),
            "ffn_norm.weight": (c.n_embd,),
            "ffn_gate.weight": (c.n_ff, c.n_embd),
            "ffn_up.weight": (c.n_ff, c.n_embd),
            "ffn_down.weight": (c.n_embd, c.n_ff),
        }
        shapes.update({f"blk.{il}.{k}": v for k, v in layer.items()})
    return shapes


def write_gguf(path: pathlib.Path, c: SmolLM3Config) -> None:
    w = start_gguf(path, c)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    finish_gguf(w, tensor_shapes(c), c)


def forward(
    weights: dict[str, np.ndarray], c: SmolLM3Config, ids: np.ndarray, cache: list | None = None
) -> tuple[np.ndarray, list]:
    """Logits [seq, n_vocab] of ids after the cache's positions, and the longer cache."""
    cache = cache or empty_cache(c)
    past, seq = cache[0][0].shape[0], len(ids)
    positions = np.arange(past, past + seq, dtype=np.float64)
    freq_scale = 1.0 / (c.linear_rope_factor or 1.0)
    h = weights["token_embd.weight"][ids]
    new_cache = []
    for il in range(c.n_layers):
        w = layer_weights(weights, il)
        q, k, v = qkv(rms_norm(h, w["attn_norm.weight"], c.rms_eps), w)
        q = q.reshape(seq, c.n_heads, c.head_dim)
        k = k.reshape(seq, c.n_kv_heads, c.head_dim)
        if uses_rope(il):  # every 4th layer (il = 3, 7, ...) attends without positions
            q = rope(q, positions, c.freq_base, freq_scale, neox=False)
            k = rope(k, positions, c.freq_base, freq_scale, neox=False)
        keys = np.concatenate([cache[il][0], k])
        values = np.concatenate([cache[il][1], v.reshape(seq, c.n_kv_heads, c.head_dim)])
        new_cache.append((keys, values))
        h = h + attention(q, keys, values, positions, 1.0 / np.sqrt(c.head_dim)) @ w["attn_output.weight"].T
        h = h + swiglu(rms_norm(h, w["ffn_norm.weight"], c.rms_eps), w)
    head = weights.get("output.weight", weights["token_embd.weight"])
    return rms_norm(h, weights["output_norm.weight"], c.rms_eps) @ head.T, new_cache


def greedy(weights: dict[str, np.ndarray], c: SmolLM3Config, prompt: list[int], n: int) -> list[int]:
    return greedy_with(forward, weights, c, prompt, n)
