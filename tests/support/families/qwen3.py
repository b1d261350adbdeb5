"""qwen3: a tiny GGUF writer and an independent float64 oracle, written from llama.cpp 0.3.36's
src/models/qwen3.cpp, src/llama-model.cpp (load_hparams), src/llama-graph.cpp (build_qkv,
build_norm, build_ffn, build_attn) and ggml-cpu's rope. Also the shared float64 pieces
(rms_norm, rope, attention, swiglu, the GGUF header and tensors) that smollm3.py and olmo2.py use.

Spec (qwen3, one block il; x is [seq, n_embd]):

1. ``a = rms_norm(x) * attn_norm``  (RMSNorm over n_embd, eps = attention.layer_norm_rms_epsilon:
   ``v / sqrt(mean(v^2) + eps)``).
2. ``q = a @ attn_q^T (+ attn_q.bias)``, k, v likewise (biases optional: llama.cpp adds
   ``attn_{q,k,v}.bias`` when the file has them; real qwen3 files have none). A fused
   ``attn_qkv.weight`` [n_embd, q+k+v] replaces the three when present. q is [seq, n_heads,
   head_dim], k and v [seq, n_kv_heads, head_dim]; head_dim = attention.key_length, which may
   differ from n_embd / n_heads (qwen3-0.6B: 1024 / 16 = 64 but head_dim 128).
3. q/k norm PER HEAD: ``q = rms_norm(q over head_dim) * attn_q_norm`` [head_dim],
   ``k = rms_norm(k over head_dim) * attn_k_norm`` [head_dim] (same eps), before RoPE.
4. RoPE NEOX (rotates the pairs (x[i], x[i + d/2])) on q and k, every layer, all head_dim
   dimensions, angle ``p * freq_scale * freq_base^(-2i/d)``; freq_base = rope.freq_base (default
   10000), freq_scale = 1 / rope.scaling.factor (linear; default 1).
5. The cache stores k after norm and RoPE, and v. Attention: ``softmax(q k^T * kq_scale)`` over
   the keys at positions <= p (causal, no window), kq_scale = 1/sqrt(head_dim) (qwen3.cpp passes
   1.0f/sqrtf(n_embd_head); attention.scale is not read); query head j reads kv head
   j // (n_heads / n_kv_heads).
6. ``x = x + attn @ attn_output^T`` (attn_output [n_embd, n_heads * head_dim] in ggml order,
   i.e. numpy [n_embd, n_heads*head_dim]).
7. ``f = rms_norm(x) * ffn_norm``; ``x = x + (silu(f @ ffn_gate^T) * (f @ ffn_up^T)) @ ffn_down^T``.
Head: ``rms_norm(x) * output_norm @ output^T``; output.weight optional: absent = tied to
token_embd. No embedding scale, no softcap.

Metadata read (prefix qwen3.): context_length, embedding_length, block_count,
attention.layer_norm_rms_epsilon (all four REQUIRED: llama.cpp refuses the file without them);
feed_forward_length, attention.head_count (optional to the loader, but 0 makes every tensor shape
wrong, so the load fails); attention.head_count_kv (default head_count); attention.key_length and
attention.value_length (default n_embd / head_count; llama.cpp ASSERTS key_length ==
value_length and == rope.dimension_count, an abort, not an error); rope.dimension_count (default
key_length); rope.freq_base (default 10000); rope.scaling.type (default linear) and
rope.scaling.factor (default none = 1).

Tensors (numpy shapes, i.e. ggml's reversed): token_embd.weight [n_vocab, n_embd],
output_norm.weight [n_embd], output.weight [n_vocab, n_embd] (optional), per layer blk.N.:
attn_norm [n_embd], attn_q [n_heads*head_dim, n_embd], attn_k / attn_v [n_kv_heads*head_dim,
n_embd], attn_q_norm / attn_k_norm [head_dim], attn_output [n_embd, n_heads*head_dim], ffn_norm
[n_embd], ffn_gate / ffn_up [n_ff, n_embd], ffn_down [n_embd, n_ff]. A tensor the file has and
the architecture does not create is refused ("wrong number of tensors").

Refused by llama.cpp (tests/test_oracle_qwen_llama_cpp.py test_llama_cpp_refuses): any of the four
required keys, head_count or feed_forward_length missing; key_length missing when head_dim !=
n_embd / n_heads (shapes); rope.dimension_count != key_length (GGML_ASSERT abort in qwen3.cpp);
a missing attn_q_norm / attn_k_norm; a tensor the architecture does not create.

No reduced-precision op: ggml's SiLU, RMSNorm, softmax and RoPE on F32 are plain float math.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, RopeScalingType

from support.llm import _payload, spm_vocab

# ------------------------------------------------------------------------ shared float64 pieces


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """ggml_rms_norm over the last axis, then the weight (build_norm LLM_NORM_RMS)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, positions: np.ndarray, base: float, freq_scale: float, neox: bool) -> np.ndarray:
    """ggml_rope_ext (ext_factor 0, attn_factor 1) on x [seq, heads, d]: angle p * freq_scale *
    base^(-2i/d); NORM rotates (x[2i], x[2i+1]), NEOX rotates (x[i], x[i+d/2])."""
    d = x.shape[-1]
    angle = positions[:, None, None] * (freq_scale * base ** (-np.arange(0, d, 2) / d))[None, None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    x0, x1 = (x[..., : d // 2], x[..., d // 2 :]) if neox else (x[..., 0::2], x[..., 1::2])
    r0, r1 = x0 * cos - x1 * sin, x0 * sin + x1 * cos
    return np.concatenate([r0, r1], axis=-1) if neox else np.stack([r0, r1], axis=-1).reshape(x.shape)


def attention(
    q: np.ndarray, keys: np.ndarray, values: np.ndarray, positions: np.ndarray, scale: float, window: int | None = None
) -> np.ndarray:
    """softmax(q k^T * scale) v with grouped kv heads; a query at p sees key positions k with
    k <= p and, when window is set, p - k < window (llama_hparams::is_masked_swa STANDARD)."""
    group = q.shape[1] // keys.shape[1]
    kh, vh = np.repeat(keys, group, axis=1), np.repeat(values, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, kh) * scale
    k_pos = np.arange(keys.shape[0])[None, :]
    allowed = k_pos <= positions[:, None]
    if window is not None:
        allowed &= positions[:, None] - k_pos < window
    scores = np.where(allowed[None], scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", scores, vh).reshape(q.shape[0], -1)


def swiglu(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """build_ffn LLM_FFN_SILU LLM_FFN_PAR: down(silu(gate(x)) * up(x))."""
    gate, up = x @ w["ffn_gate.weight"].T, x @ w["ffn_up.weight"].T
    return (gate / (1 + np.exp(-gate)) * up) @ w["ffn_down.weight"].T


def layer_weights(weights: dict[str, np.ndarray], il: int) -> dict[str, np.ndarray]:
    prefix = f"blk.{il}."
    return {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}


def qkv(x: np.ndarray, w: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """build_qkv's separate path: each projection plus its bias when the file has one."""
    return tuple(x @ w[f"attn_{n}.weight"].T + w.get(f"attn_{n}.bias", 0.0) for n in "qkv")


def empty_cache(c) -> list:
    return [(np.zeros((0, c.n_kv_heads, c.head_dim)),) * 2 for _ in range(c.n_layers)]


def greedy_with(forward, weights: dict[str, np.ndarray], c, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens after prompt, one token a step through the forward's cache."""
    logits, cache = forward(weights, c, np.array(prompt))
    out = []
    for _ in range(n):
        out.append(int(np.argmax(logits[-1])))
        logits, cache = forward(weights, c, np.array(out[-1:]), cache)
    return out


def start_gguf(path: pathlib.Path, c) -> GGUFWriter:
    """A writer with the keys every family here shares (and the SentencePiece vocabulary)."""
    w = GGUFWriter(str(path), c.architecture)
    w.add_name("tiny")
    w.add_block_count(c.n_layers)
    w.add_context_length(c.context_length)
    w.add_embedding_length(c.n_embd)
    w.add_feed_forward_length(c.n_ff)
    w.add_head_count(c.n_heads)
    w.add_head_count_kv(c.n_kv_heads)
    w.add_layer_norm_rms_eps(c.rms_eps)
    w.add_rope_freq_base(c.freq_base)
    if c.linear_rope_factor is not None:
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(c.linear_rope_factor)
    w.add_tokenizer_model("llama")
    tokens = c.tokens or [f"t{i}" for i in range(c.n_vocab)]
    w.add_token_list(tokens)
    w.add_token_scores(c.token_scores or [0.0] * len(tokens))
    w.add_token_types(c.token_types or [1] * len(tokens))
    w.add_bos_token_id(c.bos)
    w.add_eos_token_id(c.eos)
    return w


def tensor_kind(name: str) -> str:
    parts = name.split(".")
    return parts[2] if parts[0] == "blk" else parts[0]


def finish_gguf(w: GGUFWriter, shapes: dict[str, tuple[int, ...]], c) -> None:
    """Random tensors: norms near 1, biases small, matrices of type c.types[kind] (default
    c.default_type; K-quants as random blocks, the others quantized from floats)."""
    rng = np.random.default_rng(c.seed)
    for name, shape in shapes.items():
        if len(shape) == 1:
            if "norm" in name:
                values = rng.uniform(0.8, 1.2, shape).astype(np.float32)
            else:
                values = (rng.standard_normal(shape) * 0.1).astype(np.float32)
            w.add_tensor(name, values)
            continue
        type_name = c.types.get(tensor_kind(name), c.default_type)
        data = _payload(type_name, shape, rng, False)
        w.add_tensor(name, data, raw_dtype=None if type_name == "F32" else GGMLQuantizationType[type_name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------------------------ qwen3

# a mix as Q4_K_M files mix them (head Q6_K; K-quant rows need 256 elements, Q5_0 / Q8_0 rows 32)
QUANT_MIX = {
    "token_embd": "Q6_K",
    "output": "Q6_K",
    "attn_q": "Q4_K",
    "attn_k": "Q5_0",
    "attn_v": "Q8_0",
    "ffn_down": "Q6_K",
}


@dataclasses.dataclass
class Qwen3Config:
    architecture: str = "qwen3"
    n_layers: int = 2
    n_embd: int = 256
    n_ff: int = 512
    n_heads: int = 8
    n_kv_heads: int = 2
    head_dim: int = 64  # attention.key_length = value_length; 8 * 64 = 512 != n_embd on purpose
    n_vocab: int = 96
    context_length: int = 128
    rms_eps: float = 1e-6
    freq_base: float = 1000000.0
    linear_rope_factor: float | None = None
    tied: bool = True  # no output.weight: the head is token_embd
    biases: bool = False  # attn_q/k/v.bias (optional in llama.cpp, absent in real qwen3 files)
    types: dict[str, str] = dataclasses.field(default_factory=dict)
    default_type: str = "F32"
    seed: int = 0
    tokens: list[str] | None = None
    token_scores: list[float] | None = None
    token_types: list[int] | None = None
    bos: int = 1
    eos: int = 2


def _tiny(**fields) -> Qwen3Config:
    return Qwen3Config(**{**spm_vocab(), **fields})


CONFIGS: dict[str, Qwen3Config] = {
    # GQA 8:2, head_dim 64 with 8 heads (q width 512 != n_embd 256), tied head
    "qwen3-gqa": _tiny(),
    # head_dim 32 = n_embd / n_heads, 8:4, untied, q/k/v biases, linear rope scaling
    "qwen3-untied": _tiny(
        n_kv_heads=4, head_dim=32, tied=False, biases=True, linear_rope_factor=2.0, freq_base=10000.0, seed=1
    ),
    # three layers, GQA 4:1 head_dim 128
    "qwen3-wide-heads": _tiny(n_layers=3, n_heads=4, n_kv_heads=1, head_dim=128, seed=2),
    # the quantized mix
    "qwen3-q4_k_m": _tiny(default_type="Q4_K", types=QUANT_MIX, tied=False, seed=3),
}


def tensor_shapes(c: Qwen3Config) -> dict[str, tuple[int, ...]]:
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
            "attn_q_norm.weight": (c.head_dim,),
            "attn_k_norm.weight": (c.head_dim,),
            "attn_output.weight": (c.n_embd, q),
            "ffn_norm.weight": (c.n_embd,),
            "ffn_gate.weight": (c.n_ff, c.n_embd),
            "ffn_up.weight": (c.n_ff, c.n_embd),
            "ffn_down.weight": (c.n_embd, c.n_ff),
        }
        if c.biases:
            layer.update({"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)})
        shapes.update({f"blk.{il}.{k}": v for k, v in layer.items()})
    return shapes


def write_gguf(path: pathlib.Path, c: Qwen3Config) -> None:
    """The tiny qwen3 file: llama.cpp's keys (key_length / value_length / rope.dimension_count
    carry head_dim) and tensor names."""
    w = start_gguf(path, c)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    finish_gguf(w, tensor_shapes(c), c)


def forward(
    weights: dict[str, np.ndarray], c: Qwen3Config, ids: np.ndarray, cache: list | None = None
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
        # qwen3.cpp: q/k RMSNorm per head (weight [head_dim]) before NEOX RoPE
        q = rms_norm(q.reshape(seq, c.n_heads, c.head_dim), w["attn_q_norm.weight"], c.rms_eps)
        k = rms_norm(k.reshape(seq, c.n_kv_heads, c.head_dim), w["attn_k_norm.weight"], c.rms_eps)
        q = rope(q, positions, c.freq_base, freq_scale, neox=True)
        k = rope(k, positions, c.freq_base, freq_scale, neox=True)
        keys = np.concatenate([cache[il][0], k])
        values = np.concatenate([cache[il][1], v.reshape(seq, c.n_kv_heads, c.head_dim)])
        new_cache.append((keys, values))
        h = h + attention(q, keys, values, positions, 1.0 / np.sqrt(c.head_dim)) @ w["attn_output.weight"].T
        h = h + swiglu(rms_norm(h, w["ffn_norm.weight"], c.rms_eps), w)
    head = weights.get("output.weight", weights["token_embd.weight"])
    return rms_norm(h, weights["output_norm.weight"], c.rms_eps) @ head.T, new_cache


def greedy(weights: dict[str, np.ndarray], c: Qwen3Config, prompt: list[int], n: int) -> list[int]:
    return greedy_with(forward, weights, c, prompt, n)
