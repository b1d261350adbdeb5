"""olmo2: a tiny GGUF writer and an independent float64 oracle, written from llama.cpp 0.3.36's
src/models/olmo2.cpp, src/llama-model.cpp (load_hparams, load_swa_pattern),
src/llama-hparams.cpp (set_swa_pattern) and src/llama-hparams.h (is_masked_swa).

Spec (olmo2, one block il; x is [seq, n_embd]): NO pre-norms; post-norms on the branch outputs.

1. ``q, k, v = x @ attn_{q,k,v}^T`` on the raw residual x (no attn_norm; q/k/v biases optional
   in llama.cpp's loader, absent in real files; fused attn_qkv optional).
2. FULL-WIDTH q/k norm, before splitting into heads: ``q = rms_norm(q over all n_embd) *
   attn_q_norm`` [n_embd]; ``k = rms_norm(k over all n_kv_heads*head_dim) * attn_k_norm``
   [n_kv_heads*head_dim] (eps = attention.layer_norm_rms_epsilon). Then q -> [seq, n_heads, head_dim],
   k/v -> [seq, n_kv_heads, head_dim]; head_dim = n_embd / n_heads (the tensors are created with
   that; a different attention.key_length makes the graph's reshape assert).
3. RoPE NEOX (pairs (x[i], x[i + d/2])) on q and k, every layer, base rope.freq_base (ALSO on
   SWA layers: the graph passes freq_base to every layer; rope.freq_base_swa is read but only the
   KV-cache shift uses it). Angle ``p * s * freq_base^(-2i/d)`` with s = freq_scale = 1 /
   rope.scaling.factor on full-attention layers, s = 1 on SWA layers (olmo2.cpp: freq_scale 1.0,
   ext_factor 0, attn_factor 1 "for sliding window layers").
4. Cache k (after norm and RoPE) and v. Attention ``softmax(q k^T / sqrt(head_dim))``; a query
   at position p sees key positions k <= p, and on a SWA layer also p - k < n_swa
   (is_masked_swa STANDARD masks p - k >= n_swa: the query and the n_swa - 1 before it).
5. ``x = x + rms_norm(attn @ attn_output^T) * post_attention_norm`` (over n_embd).
6. ``x = x + rms_norm(ffn(x)) * post_ffw_norm``, ffn(x) = (silu(x @ ffn_gate^T) * (x @ ffn_up^T))
   @ ffn_down^T on the raw residual (no ffn_norm).
Head: ``rms_norm(x) * output_norm @ output^T``; output.weight REQUIRED (never tied: a file
without it is refused). No embedding scale, no softcap.

SWA (olmo3 files use the olmo2 architecture): only when attention.sliding_window is present and
> 0 (n_swa); then attention.sliding_window_pattern: an array (bool/int per layer; layers past
its end are full attention) gives is_swa[il] directly; an integer n (default 4) gives
``is_swa(il) = n == 0 or il % n < n - 1`` (4: layers 0, 1, 2 SWA, 3 full, ...). sliding_window
absent or 0: no layer is SWA.

Metadata read (prefix olmo2.): context_length, embedding_length, block_count,
attention.layer_norm_rms_epsilon REQUIRED; feed_forward_length, attention.head_count (0 breaks the
shapes); attention.head_count_kv (default head_count); rope.freq_base (default 10000);
rope.scaling.type / factor (linear default, factor 1); attention.sliding_window (optional),
attention.sliding_window_pattern (optional, default 4), rope.freq_base_swa (optional, default
rope.freq_base; no effect on the forward).

Tensors (numpy shapes): token_embd.weight [n_vocab, n_embd], output_norm.weight [n_embd],
output.weight [n_vocab, n_embd] (required); blk.N.attn_q [n_embd, n_embd], attn_k / attn_v
[n_kv_heads*head_dim, n_embd], attn_output [n_embd, n_embd], attn_q_norm [n_embd], attn_k_norm
[n_kv_heads*head_dim], post_attention_norm [n_embd], ffn_gate / ffn_up [n_ff, n_embd], ffn_down
[n_embd, n_ff], post_ffw_norm [n_embd]. There is no attn_norm / ffn_norm (a file with them is
refused: wrong number of tensors).
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

DEFAULT_SWA_PATTERN = 4  # olmo2.cpp: load_swa_pattern(ml, 4)


@dataclasses.dataclass
class Olmo2Config:
    architecture: str = "olmo2"
    n_layers: int = 2
    n_embd: int = 256
    n_ff: int = 512
    n_heads: int = 8
    n_kv_heads: int = 2
    n_vocab: int = 96
    context_length: int = 128
    rms_eps: float = 1e-6
    freq_base: float = 500000.0
    linear_rope_factor: float | None = None
    sliding_window: int | None = None  # attention.sliding_window (absent: no SWA)
    swa_pattern: int | list[bool] | None = None  # attention.sliding_window_pattern (absent: 4)
    freq_base_swa: float | None = None  # rope.freq_base_swa (read by llama.cpp, unused by the forward)
    types: dict[str, str] = dataclasses.field(default_factory=dict)
    default_type: str = "F32"
    seed: int = 0
    tokens: list[str] | None = None
    token_scores: list[float] | None = None
    token_types: list[int] | None = None
    bos: int = 1
    eos: int = 2

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_heads  # olmo2's tensors are created with n_embd / n_head

    def is_swa(self, il: int) -> bool:
        """load_swa_pattern / set_swa_pattern(n, dense_first=false)."""
        if not self.sliding_window:
            return False
        if isinstance(self.swa_pattern, list):
            return il < len(self.swa_pattern) and bool(self.swa_pattern[il])
        n = DEFAULT_SWA_PATTERN if self.swa_pattern is None else self.swa_pattern
        return n == 0 or il % n < n - 1


def rope_base_and_scale(c: Olmo2Config, il: int) -> tuple[float, float]:
    """olmo2.cpp: every layer ropes with rope.freq_base (not rope.freq_base_swa); SWA layers with
    freq_scale 1 (no rope scaling), full-attention layers with 1 / rope.scaling.factor."""
    return c.freq_base, 1.0 if c.is_swa(il) else 1.0 / (c.linear_rope_factor or 1.0)


def _tiny(**fields) -> Olmo2Config:
    return Olmo2Config(**{**spm_vocab(), **fields})


CONFIGS: dict[str, Olmo2Config] = {
    # plain olmo2: GQA 8:2, head_dim 32
    "olmo2-gqa": _tiny(),
    # olmo3-style: window 5 < the prompt on layers 0-2, layer 3 full with linear rope x4 (SWA layers
    # rope unscaled), freq_base_swa written but (as in llama.cpp's graph) without effect
    "olmo2-swa": _tiny(
        n_layers=4, sliding_window=5, linear_rope_factor=4.0, freq_base=10000.0, freq_base_swa=500.0, seed=1
    ),
    # the pattern as a per-layer bool array; MHA 4:4, head_dim 64
    "olmo2-swa-array": _tiny(
        n_layers=3, n_heads=4, n_kv_heads=4, sliding_window=4, swa_pattern=[True, False, True], seed=2
    ),
    "olmo2-q4_k_m": _tiny(default_type="Q4_K", types=QUANT_MIX, seed=3),
}


def tensor_shapes(c: Olmo2Config) -> dict[str, tuple[int, ...]]:
    kv = c.n_kv_heads * c.head_dim
    shapes = {
        "token_embd.weight": (c.n_vocab, c.n_embd),
        "output_norm.weight": (c.n_embd,),
        "output.weight": (c.n_vocab, c.n_embd),
    }
    for il in range(c.n_layers):
        layer = {
            "attn_q.weight": (c.n_embd, c.n_embd),
            "attn_k.weight": (kv, c.n_embd),
            "attn_v.weight": (kv, c.n_embd),
            "attn_output.weight": (c.n_embd, c.n_embd),
            "attn_q_norm.weight": (c.n_embd,),
            "attn_k_norm.weight": (kv,),
            "post_attention_norm.weight": (c.n_embd,),
            "ffn_gate.weight": (c.n_ff, c.n_embd),
            "ffn_up.weight": (c.n_ff, c.n_embd),
            "ffn_down.weight": (c.n_embd, c.n_ff),
            "post_ffw_norm.weight": (c.n_embd,),
        }
        shapes.update({f"blk.{il}.{k}": v for k, v in layer.items()})
    return shapes


def write_gguf(path: pathlib.Path, c: Olmo2Config) -> None:
    w = start_gguf(path, c)
    if c.sliding_window is not None:
        w.add_sliding_window(c.sliding_window)
    if c.swa_pattern is not None:
        w.add_sliding_window_pattern(c.swa_pattern)
    if c.freq_base_swa is not None:
        w.add_rope_freq_base_swa(c.freq_base_swa)
    finish_gguf(w, tensor_shapes(c), c)


def forward(
    weights: dict[str, np.ndarray], c: Olmo2Config, ids: np.ndarray, cache: list | None = None
) -> tuple[np.ndarray, list]:
    """Logits [seq, n_vocab] of ids after the cache's positions, and the longer cache."""
    cache = cache or empty_cache(c)
    past, seq = cache[0][0].shape[0], len(ids)
    positions = np.arange(past, past + seq, dtype=np.float64)
    h = weights["token_embd.weight"][ids]
    new_cache = []
    for il in range(c.n_layers):
        w = layer_weights(weights, il)
        q, k, v = qkv(h, w)  # olmo2: no pre-norm
        # full-width q/k norms, before the split into heads
        q = rms_norm(q, w["attn_q_norm.weight"], c.rms_eps).reshape(seq, c.n_heads, c.head_dim)
        k = rms_norm(k, w["attn_k_norm.weight"], c.rms_eps).reshape(seq, c.n_kv_heads, c.head_dim)
        base, freq_scale = rope_base_and_scale(c, il)
        q = rope(q, positions, base, freq_scale, neox=True)
        k = rope(k, positions, base, freq_scale, neox=True)
        keys = np.concatenate([cache[il][0], k])
        values = np.concatenate([cache[il][1], v.reshape(seq, c.n_kv_heads, c.head_dim)])
        new_cache.append((keys, values))
        window = c.sliding_window if c.is_swa(il) else None
        attn = attention(q, keys, values, positions, 1.0 / np.sqrt(c.head_dim), window) @ w["attn_output.weight"].T
        h = h + rms_norm(attn, w["post_attention_norm.weight"], c.rms_eps)
        h = h + rms_norm(swiglu(h, w), w["post_ffw_norm.weight"], c.rms_eps)
    return rms_norm(h, weights["output_norm.weight"], c.rms_eps) @ weights["output.weight"].T, new_cache


def greedy(weights: dict[str, np.ndarray], c: Olmo2Config, prompt: list[int], n: int) -> list[int]:
    return greedy_with(forward, weights, c, prompt, n)
