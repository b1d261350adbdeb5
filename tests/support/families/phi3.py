"""phi3: tiny GGUF files and an independent float64 forward, written from llama.cpp's
src/models/phi3.cpp, src/llama-graph.cpp (build_qkv, build_ffn LLM_FFN_SWIGLU), src/llama-model.cpp
(load_hparams, get_rope_factors, llama_model_rope_type), src/llama-context.cpp (n_ctx_seq,
yarn_attn_factor) and ggml-cpu's rope (rope_yarn, rotate_pairs). No package code here.

Spec (llama.cpp's dense phi3 block; h is the residual stream, width n_embd):

- embedding: h = token_embd[ids] (no scale).
- each layer:
  x = RMSNorm(h) * attn_norm (eps ``attention.layer_norm_rms_epsilon``, over n_embd);
  qkv = x @ attn_qkv.T, rows [n_embd + 2 * n_kv_heads*head_dim]: q = qkv[:n_embd],
  k = qkv[n_embd : n_embd + kv], v = qkv[n_embd + kv :] (kv = n_kv_heads * head_dim); separate
  attn_q / attn_k / attn_v tensors are accepted instead (create_tensor_qkv); no biases;
  RoPE NEOX mode on q and k, every layer: with n_rot = ``rope.dimension_count`` (may be < head_dim:
  partial rotary, e.g. Phi-4-mini's 0.75), pairs (x[i], x[i + n_rot/2]) for i < n_rot/2 rotate by
  angle p * freq_base^(-2i/n_rot) / factor[i], the dims from n_rot on pass through unrotated; both
  cos and sin are multiplied by attn_factor = ``rope.scaling.attn_factor`` (default 1; LongRoPE's
  sqrt(1 + ln(s)/ln(n_ctx_orig)), s = context_length / n_ctx_orig, written by the converter), so
  scores carry attn_factor^2;
  factor = rope_factors_long if n_ctx_seq > n_ctx_orig_yarn, else rope_factors_short, else none
  (get_rope_factors); n_ctx_seq is the context llama.cpp runs with, rounded up to a multiple of 256
  (llama-context.cpp GGML_PAD(n_ctx, 256); the test peer uses 512); n_ctx_orig_yarn =
  ``rope.scaling.original_context_length``, default ``context_length``. The converter writes no
  ``rope.scaling.type`` (so "linear", factor 1: freq_scale 1, no YaRN ramp);
  q = q / sqrt(head_dim) (ggml_scale before attention), then attention with kq_scale 1.0: causal
  (a query at p sees keys 0..p), GQA (query head j reads kv head j // (n_heads / n_kv_heads));
  NO sliding window: ``attention.sliding_window`` > 0 is read and then disabled by llama.cpp
  ("Phi SWA is currently disabled", n_swa = 0, pattern 1), so every layer attends to all keys;
  h = h + attn @ attn_output.T;
  x = RMSNorm(h) * ffn_norm;
  u = x @ ffn_up.T, rows [2 * n_ff]: gate = u[:n_ff], up = u[n_ff:] (ggml_swiglu: silu of the first
  half times the second half);  h = h + (silu(gate) * up) @ ffn_down.T.
- head: logits = (RMSNorm(h) * output_norm) @ output.T; output falls back to token_embd (tied).

Metadata read (prefix ``phi3.``): block_count, context_length, embedding_length (required),
feed_forward_length, attention.head_count, attention.head_count_kv (default head_count),
attention.layer_norm_rms_epsilon (required), rope.freq_base (default 10000), rope.dimension_count
(default head_dim), rope.scaling.original_context_length, rope.scaling.attn_factor,
attention.sliding_window (read, then ignored). head_dim is n_embd / n_heads: phi3's tensors are
shaped with n_embd for q and the output (attn_output is [n_embd, n_embd]).

Tensors (numpy shapes, rows first): token_embd [n_vocab, n_embd], output_norm [n_embd], output
[n_vocab, n_embd] (optional), rope_factors_long / rope_factors_short [n_rot/2] F32 (optional, one
copy for all layers), per layer blk.N.: attn_norm [n_embd], attn_qkv [n_embd + 2*kv, n_embd] (or
attn_q [n_embd, n_embd], attn_k / attn_v [kv, n_embd]), attn_output [n_embd, n_embd], ffn_norm
[n_embd], ffn_up [2*n_ff, n_embd] (gate rows then up rows), ffn_down [n_embd, n_ff].
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from support.llm import _payload, spm_vocab

Cache = list[tuple[np.ndarray, np.ndarray]]


@dataclasses.dataclass
class Phi3Config:
    architecture: str = "phi3"
    n_layers: int = 2
    n_embd: int = 256
    n_ff: int = 512
    n_heads: int = 4
    n_kv_heads: int = 4
    n_vocab: int = 96
    context_length: int = 4096
    rms_eps: float = 1e-5
    freq_base: float = 10000.0
    rope_dims: int | None = None  # rope.dimension_count (None: head_dim)
    original_context_length: int | None = None  # rope.scaling.original_context_length
    rope_factors: bool = False  # write rope_factors_long / rope_factors_short
    rope_attn_factor: float | None = None  # rope.scaling.attn_factor
    sliding_window: int | None = None  # attention.sliding_window (llama.cpp ignores it for phi3)
    fused_qkv: bool = True  # attn_qkv, as converters write it; else attn_q / attn_k / attn_v
    tied: bool = False
    n_ctx: int = 512  # the context llama.cpp runs with (the peer's n_ctx): picks long or short factors
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

    @property
    def n_rot(self) -> int:
        return self.rope_dims or self.head_dim

    @property
    def n_ctx_orig(self) -> int:
        return self.original_context_length or self.context_length

    @property
    def uses_long_factors(self) -> bool:
        """llama_model::get_rope_factors: long iff n_ctx_seq (n_ctx padded to 256) > n_ctx_orig_yarn."""
        return -(-self.n_ctx // 256) * 256 > self.n_ctx_orig


def longrope_attn_factor(context_length: int, original: int) -> float:
    """The converter's attention factor (conversion/phi.py): sqrt(1 + ln(s) / ln(original))."""
    scale = context_length / original
    return math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0


def _config(**fields) -> Phi3Config:
    return Phi3Config(**{**spm_vocab(), "seed": 3, **fields})


CONFIGS: dict[str, Phi3Config] = {
    # Phi-3-mini-4k style: MHA, no factors; its file has a sliding window (2047), here 6 < the prompt
    "phi3-mini-f32": _config(sliding_window=6),
    # LongRoPE, 512 <= the original 4096: the short factors; GQA and a tied head (Phi-4-mini style)
    "phi3-longrope-short-f32": _config(
        n_heads=8,
        n_kv_heads=2,
        context_length=16384,
        original_context_length=4096,
        rope_factors=True,
        rope_attn_factor=longrope_attn_factor(16384, 4096),
        tied=True,
    ),
    # LongRoPE, 512 > the original 256: the long factors; partial rotary 48 of 64 (Phi-4-mini: 0.75)
    "phi3-longrope-long-f32": _config(
        n_layers=3,
        n_kv_heads=2,
        rope_dims=48,
        context_length=1024,
        original_context_length=256,
        rope_factors=True,
        rope_attn_factor=longrope_attn_factor(1024, 256),
        sliding_window=4,
    ),
    "phi3-q4k-mix": _config(
        n_kv_heads=2,
        context_length=1024,
        original_context_length=256,
        rope_factors=True,
        rope_attn_factor=longrope_attn_factor(1024, 256),
        fused_qkv=False,
        default_type="Q4_K",
        types={"attn_q": "Q5_0", "attn_k": "Q5_0", "attn_v": "Q8_0", "ffn_down": "Q6_K", "output": "Q6_K"},
    ),
}


def tensor_shapes(c: Phi3Config) -> dict[str, tuple[int, ...]]:
    """Every tensor the file holds, numpy shapes (rows first)."""
    kv = c.n_kv_heads * c.head_dim
    shapes = {"token_embd.weight": (c.n_vocab, c.n_embd), "output_norm.weight": (c.n_embd,)}
    if not c.tied:
        shapes["output.weight"] = (c.n_vocab, c.n_embd)
    if c.rope_factors:
        shapes |= {"rope_factors_long.weight": (c.n_rot // 2,), "rope_factors_short.weight": (c.n_rot // 2,)}
    for i in range(c.n_layers):
        layer = {"attn_norm.weight": (c.n_embd,)}
        if c.fused_qkv:
            layer["attn_qkv.weight"] = (c.n_embd + 2 * kv, c.n_embd)
        else:
            layer |= {"attn_q.weight": (c.n_embd, c.n_embd), "attn_k.weight": (kv, c.n_embd)}
            layer["attn_v.weight"] = (kv, c.n_embd)
        layer |= {
            "attn_output.weight": (c.n_embd, c.n_embd),
            "ffn_norm.weight": (c.n_embd,),
            "ffn_up.weight": (2 * c.n_ff, c.n_embd),
            "ffn_down.weight": (c.n_embd, c.n_ff),
        }
        shapes |= {f"blk.{i}.{k}": v for k, v in layer.items()}
    return shapes


def _kind(name: str) -> str:
    parts = name.split(".")
    return parts[2] if parts[0] == "blk" else parts[0]


def _vector(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if name.startswith("rope_factors_long"):  # real long factors run 1 .. ~60
        return rng.uniform(1.0, 8.0, shape)
    if name.startswith("rope_factors_short"):  # real short factors run 1 .. ~3
        return rng.uniform(1.0, 2.0, shape)
    return rng.uniform(0.8, 1.2, shape)  # a norm weight


def write_gguf(path: pathlib.Path, c: Phi3Config) -> None:
    """The tiny phi3 file ``c``, with llama.cpp's keys and tensor names."""
    rng = np.random.default_rng(c.seed)
    w = GGUFWriter(str(path), c.architecture)
    # general.name: llama-vocab.cpp gives a model named "*phi3*" / "*phi-3*" phi-3 token attributes and
    # then needs "</s>", "<unk>", "<s>" and "<|endoftext|>" in the vocabulary (unordered_map::at)
    w.add_name("tiny")
    w.add_block_count(c.n_layers)
    w.add_context_length(c.context_length)
    w.add_embedding_length(c.n_embd)
    w.add_feed_forward_length(c.n_ff)
    w.add_head_count(c.n_heads)
    w.add_head_count_kv(c.n_kv_heads)
    w.add_layer_norm_rms_eps(c.rms_eps)
    w.add_rope_freq_base(c.freq_base)
    w.add_rope_dimension_count(c.n_rot)
    if c.original_context_length is not None:
        w.add_rope_scaling_orig_ctx_len(c.original_context_length)
    if c.rope_attn_factor is not None:
        w.add_rope_scaling_attn_factors(c.rope_attn_factor)
    if c.sliding_window is not None:
        w.add_sliding_window(c.sliding_window)
    w.add_tokenizer_model("llama")
    tokens = c.tokens or [f"t{i}" for i in range(c.n_vocab)]
    w.add_token_list(tokens)
    w.add_token_scores(c.token_scores or [0.0] * len(tokens))
    w.add_token_types(c.token_types or [1] * len(tokens))
    w.add_bos_token_id(c.bos)
    w.add_eos_token_id(c.eos)
    for name, shape in tensor_shapes(c).items():
        if len(shape) == 1:
            w.add_tensor(name, _vector(name, shape, rng).astype(np.float32))
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


def rope_factors(weights: dict[str, np.ndarray], c: Phi3Config) -> np.ndarray | None:
    """The factors llama.cpp divides the frequencies by: long, short or none (get_rope_factors)."""
    return weights.get("rope_factors_long.weight" if c.uses_long_factors else "rope_factors_short.weight")


def _rope_neox(x: np.ndarray, positions: np.ndarray, c: Phi3Config, factors: np.ndarray | None) -> np.ndarray:
    """ggml_rope_ext NEOX on x [seq, heads, head_dim]: (x[i], x[i + n_rot/2]), i < n_rot/2, rotated
    by p * base^(-2i/n_rot) / factors[i]; cos and sin times attn_factor; dims >= n_rot unchanged."""
    half = c.n_rot // 2
    theta = c.freq_base ** (-np.arange(half) * 2 / c.n_rot)
    if factors is not None:
        theta = theta / factors
    angle = positions[:, None, None] * theta[None, None, :]
    mscale = c.rope_attn_factor if c.rope_attn_factor is not None else 1.0
    cos, sin = np.cos(angle) * mscale, np.sin(angle) * mscale
    x0, x1 = x[..., :half], x[..., half : c.n_rot]
    out = x.copy()
    out[..., :half], out[..., half : c.n_rot] = x0 * cos - x1 * sin, x0 * sin + x1 * cos
    return out


def _attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Causal GQA, kq_scale 1 (q is already scaled): q [seq, heads, d] -> [seq, heads * d]."""
    group = q.shape[1] // keys.shape[1]
    kh, vh = np.repeat(keys, group, axis=1), np.repeat(values, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, kh)
    allowed = np.arange(keys.shape[0])[None, :] <= positions[:, None]  # all keys 0..p: no window
    scores = np.where(allowed[None], scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", scores, vh).reshape(q.shape[0], -1)


def _qkv(w: dict[str, np.ndarray], x: np.ndarray, c: Phi3Config) -> tuple[np.ndarray, ...]:
    if "attn_qkv.weight" not in w:
        return tuple(x @ w[f"attn_{n}.weight"].T for n in "qkv")
    kv = c.n_kv_heads * c.head_dim
    qkv = x @ w["attn_qkv.weight"].T  # rows: q (n_embd), k (kv), v (kv)
    return qkv[:, : c.n_embd], qkv[:, c.n_embd : c.n_embd + kv], qkv[:, c.n_embd + kv :]


def forward(weights: dict[str, np.ndarray], c: Phi3Config, ids: np.ndarray, cache: Cache | None = None):
    """Logits [seq, n_vocab] (float64) of ``ids`` after the positions in ``cache`` (per layer
    (keys, values) [positions, n_kv_heads, head_dim], keys after RoPE); returns (logits, cache)."""
    cache = cache or [(np.zeros((0, c.n_kv_heads, c.head_dim)),) * 2 for _ in range(c.n_layers)]
    past, seq = cache[0][0].shape[0], len(ids)
    positions = np.arange(past, past + seq, dtype=np.float64)
    factors = rope_factors(weights, c)
    h = weights["token_embd.weight"][np.asarray(ids)]
    new_cache = []
    for i in range(c.n_layers):
        w = {k[len(f"blk.{i}.") :]: v for k, v in weights.items() if k.startswith(f"blk.{i}.")}
        x = _rms_norm(h, w["attn_norm.weight"], c.rms_eps)
        q, k, v = _qkv(w, x, c)
        q = _rope_neox(q.reshape(seq, c.n_heads, c.head_dim), positions, c, factors) / np.sqrt(c.head_dim)
        k = _rope_neox(k.reshape(seq, c.n_kv_heads, c.head_dim), positions, c, factors)
        keys = np.concatenate([cache[i][0], k])
        values = np.concatenate([cache[i][1], v.reshape(seq, c.n_kv_heads, c.head_dim)])
        new_cache.append((keys, values))
        h = h + _attention(q, keys, values, positions) @ w["attn_output.weight"].T
        x = _rms_norm(h, w["ffn_norm.weight"], c.rms_eps)
        u = x @ w["ffn_up.weight"].T
        gate, up = u[:, : c.n_ff], u[:, c.n_ff :]  # ggml_swiglu: silu(first half) * second half
        h = h + (gate / (1 + np.exp(-gate)) * up) @ w["ffn_down.weight"].T
    head = weights.get("output.weight", weights["token_embd.weight"])
    return _rms_norm(h, weights["output_norm.weight"], c.rms_eps) @ head.T, new_cache


def greedy(weights: dict[str, np.ndarray], c: Phi3Config, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens after ``prompt``, one position at a time through the cache."""
    logits, cache = forward(weights, c, np.array(prompt))
    out: list[int] = []
    for _ in range(n):
        out.append(int(np.argmax(logits[-1])))
        logits, cache = forward(weights, c, np.array(out[-1:]), cache)
    return out
