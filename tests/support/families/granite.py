"""granite: tiny GGUF files and an independent float64 forward, written from llama.cpp's
src/models/granite.cpp, src/llama-graph.cpp (build_inp_embd, build_attn, build_ffn) and
src/llama-model.cpp (load_hparams, llama_model_rope_type). No package code here.

Spec (llama.cpp's dense granite block; h is the residual stream, width n_embd):

- embedding: h = token_embd[ids] * embedding_scale when ``granite.embedding_scale`` is set and not 0
  (llama-graph.cpp build_inp_embd: ``if (f_embedding_scale != 0) ggml_scale``); otherwise unscaled.
- each layer il:
  x = RMSNorm(h) * attn_norm (eps ``attention.layer_norm_rms_epsilon``, over n_embd);
  q = x @ attn_q.T (+ attn_q.bias), k = x @ attn_k.T (+ bias), v = x @ attn_v.T (+ bias)
  (a fused ``attn_qkv`` is also accepted by llama.cpp's create_tensor_qkv; converters write q/k/v);
  RoPE NORM mode (pairs (x[2i], x[2i+1]), angle p * freq_base^(-2i/n_rot)) on q and k, on every layer
  unless ``rope.scaling.finetuned`` is false: granite reads that key (default TRUE, unlike other
  families) and fills rope_pattern with it, so false means no RoPE on any layer (NoPE);
  attention: causal (a query at p sees keys 0..p), no sliding window, GQA (query head j reads kv
  head j // (n_heads / n_kv_heads)), kq_scale = ``attention.scale`` if set and not 0, else
  1/sqrt(head_dim); softmax in F32 (no softcap);
  a = attn @ attn_output.T (+ attn_output.bias);
  h = h + a * residual_scale  (``granite.residual_scale``; no scaling when absent or 0);
  x = RMSNorm(h) * ffn_norm;
  f = (silu(x @ ffn_gate.T + gate_b) * (x @ ffn_up.T + up_b)) @ ffn_down.T + down_b (biases optional);
  h = h + f * residual_scale.
- head: logits = (RMSNorm(h) * output_norm) @ output.T / logit_scale (``granite.logit_scale``,
  REQUIRED: llama.cpp refuses a file without it); output falls back to token_embd (tied).

Metadata read (prefix ``granite.``): block_count, context_length, embedding_length (required),
feed_forward_length, attention.head_count, attention.head_count_kv (default head_count),
attention.layer_norm_rms_epsilon (required), rope.freq_base (default 10000),
rope.dimension_count (must equal head_dim: GGML_ASSERT(n_embd_head == n_rot)), logit_scale
(required), residual_scale, embedding_scale, attention.scale (all optional, 0 = off/default),
rope.scaling.finetuned (optional, default true = RoPE on). Not covered here: rope_freqs /
LongRoPE factor tensors (optional in granite.cpp), granite's deepstack (vision) and MoE variants.

Tensors (numpy shapes, rows first): token_embd [n_vocab, n_embd], output_norm [n_embd],
output [n_vocab, n_embd] (optional), per layer blk.N.: attn_norm [n_embd], attn_q
[n_heads*head_dim, n_embd], attn_k / attn_v [n_kv_heads*head_dim, n_embd], attn_output
[n_embd, n_heads*head_dim], ffn_norm [n_embd], ffn_gate / ffn_up [n_ff, n_embd], ffn_down
[n_embd, n_ff]; optional attn_q/k/v/output.bias, ffn_gate/up/down.bias.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from support.llm import _payload, spm_vocab

Cache = list[tuple[np.ndarray, np.ndarray]]


@dataclasses.dataclass
class GraniteConfig:
    architecture: str = "granite"
    n_layers: int = 2
    n_embd: int = 256
    n_ff: int = 512
    n_heads: int = 8
    n_kv_heads: int = 2
    n_vocab: int = 96
    context_length: int = 4096
    rms_eps: float = 1e-5
    freq_base: float = 10000.0
    embedding_scale: float | None = None  # granite.embedding_scale (None: key absent)
    residual_scale: float | None = None  # granite.residual_scale
    attention_scale: float | None = None  # granite.attention.scale (kq_scale)
    logit_scale: float | None = 8.0  # granite.logit_scale (None: key absent, llama.cpp refuses)
    rope: bool | None = None  # rope.scaling.finetuned (None: key absent = RoPE on)
    biases: bool = False  # the optional q/k/v/output and FFN biases
    tied: bool = True
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
        return self.n_embd // self.n_heads


def _config(**fields) -> GraniteConfig:
    return GraniteConfig(**{**spm_vocab(), "seed": 3, **fields})


# Granite 3.x ships embedding_multiplier 12, residual_multiplier 0.22, attention_multiplier
# 1/head_dim and logits_scaling 8; the tiny configs use the same kind of values.
CONFIGS: dict[str, GraniteConfig] = {
    # untied: with the embedding scaled and the head tied, greedy repeats one token on random weights
    "granite-f32": _config(embedding_scale=12.0, residual_scale=0.22, attention_scale=1 / 32, tied=False),
    "granite-defaults-f32": _config(n_kv_heads=4, logit_scale=3.0, biases=True, n_layers=3, seed=11),
    "granite-nope-f32": _config(embedding_scale=4.0, residual_scale=0.5, rope=False, logit_scale=2.0, tied=False),
    "granite-q4k-mix": _config(
        embedding_scale=12.0,
        residual_scale=0.22,
        attention_scale=1 / 32,
        tied=False,
        default_type="Q4_K",
        types={
            "attn_q": "Q5_0",
            "attn_k": "Q5_0",
            "attn_v": "Q8_0",
            "ffn_down": "Q6_K",
            "token_embd": "Q4_K",
            "output": "Q6_K",
        },
    ),
}


def tensor_shapes(c: GraniteConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the file holds, numpy shapes (rows first)."""
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    shapes = {"token_embd.weight": (c.n_vocab, c.n_embd), "output_norm.weight": (c.n_embd,)}
    if not c.tied:
        shapes["output.weight"] = (c.n_vocab, c.n_embd)
    for i in range(c.n_layers):
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
        if c.biases:
            layer |= {"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,), "attn_output.bias": (c.n_embd,)}
            layer |= {"ffn_gate.bias": (c.n_ff,), "ffn_up.bias": (c.n_ff,), "ffn_down.bias": (c.n_embd,)}
        shapes |= {f"blk.{i}.{k}": v for k, v in layer.items()}
    return shapes


def _kind(name: str) -> str:
    parts = name.split(".")
    return parts[2] if parts[0] == "blk" else parts[0]


def write_gguf(path: pathlib.Path, c: GraniteConfig) -> None:
    """The tiny granite file ``c``, with llama.cpp's keys and tensor names."""
    rng = np.random.default_rng(c.seed)
    w = GGUFWriter(str(path), c.architecture)
    w.add_name("tiny-granite")
    w.add_block_count(c.n_layers)
    w.add_context_length(c.context_length)
    w.add_embedding_length(c.n_embd)
    w.add_feed_forward_length(c.n_ff)
    w.add_head_count(c.n_heads)
    w.add_head_count_kv(c.n_kv_heads)
    w.add_layer_norm_rms_eps(c.rms_eps)
    w.add_rope_freq_base(c.freq_base)
    w.add_rope_dimension_count(c.head_dim)
    if c.logit_scale is not None:
        w.add_logit_scale(c.logit_scale)
    if c.embedding_scale is not None:
        w.add_embedding_scale(c.embedding_scale)
    if c.residual_scale is not None:
        w.add_residual_scale(c.residual_scale)
    if c.attention_scale is not None:
        w.add_attention_scale(c.attention_scale)
    if c.rope is not None:
        w.add_rope_scaling_finetuned(c.rope)
    w.add_tokenizer_model("llama")
    tokens = c.tokens or [f"t{i}" for i in range(c.n_vocab)]
    w.add_token_list(tokens)
    w.add_token_scores(c.token_scores or [0.0] * len(tokens))
    w.add_token_types(c.token_types or [1] * len(tokens))
    w.add_bos_token_id(c.bos)
    w.add_eos_token_id(c.eos)
    for name, shape in tensor_shapes(c).items():
        if len(shape) == 1:
            norm = name.endswith("norm.weight")
            values = rng.uniform(0.8, 1.2, shape) if norm else rng.standard_normal(shape) * 0.1
            w.add_tensor(name, values.astype(np.float32))
            continue
        type_name = c.types.get(_kind(name), c.default_type)
        data = _payload(type_name, shape, rng, False)
        w.add_tensor(name, data, raw_dtype=None if type_name == "F32" else GGMLQuantizationType[type_name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------------------- the oracle


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rope_norm(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """ggml_rope NORM mode on x [seq, heads, d]: (x[2i], x[2i+1]) rotated by p * base^(-2i/d)."""
    d = x.shape[-1]
    angle = positions[:, None, None] * base ** (-np.arange(0, d, 2) / d)[None, None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def _attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray, positions: np.ndarray, scale: float):
    """Causal GQA: q [seq, heads, d], keys/values [positions, kv_heads, d] -> [seq, heads * d]."""
    group = q.shape[1] // keys.shape[1]
    kh, vh = np.repeat(keys, group, axis=1), np.repeat(values, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, kh) * scale
    allowed = np.arange(keys.shape[0])[None, :] <= positions[:, None]  # a query at p sees keys 0..p
    scores = np.where(allowed[None], scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", scores, vh).reshape(q.shape[0], -1)


def forward(weights: dict[str, np.ndarray], c: GraniteConfig, ids: np.ndarray, cache: Cache | None = None):
    """Logits [seq, n_vocab] (float64) of ``ids`` after the positions in ``cache`` (per layer
    (keys, values) [positions, n_kv_heads, head_dim], keys after RoPE); returns (logits, cache)."""
    cache = cache or [(np.zeros((0, c.n_kv_heads, c.head_dim)),) * 2 for _ in range(c.n_layers)]
    past, seq = cache[0][0].shape[0], len(ids)
    positions = np.arange(past, past + seq, dtype=np.float64)
    rope = c.rope is not False  # granite: rope.scaling.finetuned switches RoPE, default on
    kq_scale = c.attention_scale if c.attention_scale else 1.0 / np.sqrt(c.head_dim)
    residual = c.residual_scale or 1.0  # 0 / absent: no scaling
    h = weights["token_embd.weight"][np.asarray(ids)]
    if c.embedding_scale:
        h = h * c.embedding_scale
    new_cache = []
    for i in range(c.n_layers):
        w = {k[len(f"blk.{i}.") :]: v for k, v in weights.items() if k.startswith(f"blk.{i}.")}
        x = _rms_norm(h, w["attn_norm.weight"], c.rms_eps)
        q, k, v = (x @ w[f"attn_{n}.weight"].T + w.get(f"attn_{n}.bias", 0.0) for n in "qkv")
        q, k = q.reshape(seq, c.n_heads, c.head_dim), k.reshape(seq, c.n_kv_heads, c.head_dim)
        if rope:
            q, k = _rope_norm(q, positions, c.freq_base), _rope_norm(k, positions, c.freq_base)
        keys = np.concatenate([cache[i][0], k])
        values = np.concatenate([cache[i][1], v.reshape(seq, c.n_kv_heads, c.head_dim)])
        new_cache.append((keys, values))
        attn = _attention(q, keys, values, positions, kq_scale)
        h = h + (attn @ w["attn_output.weight"].T + w.get("attn_output.bias", 0.0)) * residual
        x = _rms_norm(h, w["ffn_norm.weight"], c.rms_eps)
        gate = x @ w["ffn_gate.weight"].T + w.get("ffn_gate.bias", 0.0)
        up = x @ w["ffn_up.weight"].T + w.get("ffn_up.bias", 0.0)
        down = (gate / (1 + np.exp(-gate)) * up) @ w["ffn_down.weight"].T + w.get("ffn_down.bias", 0.0)
        h = h + down * residual
    head = weights.get("output.weight", weights["token_embd.weight"])
    logits = _rms_norm(h, weights["output_norm.weight"], c.rms_eps) @ head.T / c.logit_scale
    return logits, new_cache


def greedy(weights: dict[str, np.ndarray], c: GraniteConfig, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens after ``prompt``, one position at a time through the cache."""
    logits, cache = forward(weights, c, np.array(prompt))
    out: list[int] = []
    for _ in range(n):
        out.append(int(np.argmax(logits[-1])))
        logits, cache = forward(weights, c, np.array(out[-1:]), cache)
    return out
