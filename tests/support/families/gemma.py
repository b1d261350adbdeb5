"""gemma3, gemma2 and gemma: tiny random GGUF files (gguf-py) and an independent float64 numpy
forward of them, written from llama.cpp's graphs (llama-cpp-python 0.3.36, vendor/llama.cpp:
src/models/gemma3.cpp, gemma2.cpp, gemma.cpp; src/llama-model.cpp load_hparams; src/llama-graph.cpp
build_norm / build_ffn / build_attn_mha; src/llama-hparams.{h,cpp} set_swa_pattern, is_masked_swa;
ggml/src/ggml-cpu/vec.h GELU). No package code here. Importing this module needs gguf.

Spec: the three families as llama.cpp computes them
====================================================

Notation: E = embedding_length, H = head_count, Hkv = head_count_kv, D = attention.key_length
(default E / H; value_length likewise; gemma files write both), F = feed_forward_length,
V = vocabulary, eps = attention.layer_norm_rms_epsilon. RMSNorm(x, w) = x / sqrt(mean(x^2) + eps) * w
over the last axis (ggml_rms_norm then ggml_mul). The stored norm weights ARE the multipliers:
the HF converter already added 1 (conversion/gemma.py: ``data_torch + 1`` for every
``*norm.weight``; Gemma's RMSNorm is x * (1 + w)), llama.cpp multiplies by the stored value as is.
RoPE is NEOX for all three (llama_model_rope_type: pairs (x[i], x[i + n_rot/2])), n_rot =
rope.dimension_count (default D), angle = p * base^(-2i/n_rot) * freq_scale, freq_scale =
1 / rope.scaling.factor (factor absent or 0: 1), rope.scaling.type "linear" (default; yarn
would add ext_factor, not written here). GELU is the tanh form
0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))); on the CPU ggml evaluates it through an fp16
table (GGML_GELU_FP16, vec.h ggml_vec_geglu_f32): x <= -10 -> 0, x >= 10 -> x, else
fp16(gelu_f32(fp16(x))) (``gelu_fp16=True`` below emulates it).

Block, one layer il (x: the residual stream, [seq, E]):

  gemma3                                  gemma2                         gemma
  h = embd[ids] * sqrt(E)   (all three: ggml_scale(inpL, sqrtf(n_embd)))
  a = RMSNorm(x, attn_norm)  [E]          same                           same
  q = a Wq [H*D], k = a Wk, v = a Wv [Hkv*D] (optional attn_{q,k,v}.bias added; fused attn_qkv
      is also accepted by create_tensor_qkv; gemma files have neither)
  q = RMSNorm_D(q, attn_q_norm) per head   (no q/k norm)                  (no q/k norm)
  k = RMSNorm_D(k, attn_k_norm) per head
  q, k = RoPE(base_l, scale_l)             RoPE(base_l, scale_l)          RoPE(freq_base, scale)
  q = q * attn_scale                       q * attn_scale                 q / sqrt(D_v)
  s = q k^T (kq_scale 1.0)                 s = c_a tanh(s / c_a)          s
  s: masked (-inf) where key not visible; softmax over keys; o = softmax(s) v, per head,
     query head j reads kv head j // (H / Hkv)
  x = x + RMSNorm(o Wo, post_attention_norm)   (gemma2 same)            x = x + o Wo
  f = RMSNorm(x, ffn_norm)                  same                           same
  g = gelu(f Wgate) * (f Wup); g Wdown    (all three: LLM_FFN_GELU, LLM_FFN_PAR -> ggml_geglu_split)
  x = x + RMSNorm(g Wdown, post_ffw_norm)  (gemma2 same)                  x = x + g Wdown
  out = RMSNorm(x, output_norm) Whead^T
  gemma3: out = c_f tanh(out / c_f) iff final_logit_softcapping is present and non-zero
  gemma2: out = c_f tanh(out / c_f) always (default c_f 30)                gemma: no cap

Head: gemma3 uses ``output.weight`` when present, else token_embd.weight (tied); gemma2 and
gemma always use token_embd.weight (an output.weight in the file is not created, so the file has
one tensor too many and llama.cpp refuses it: "wrong number of tensors").

Attention scale (llama-model.cpp, each family's load_arch_hparams):
- gemma3, gemma2: attn_scale = 1/sqrt(n_embd / n_head) when the model type is 27B (gemma3: exactly
  62 layers; gemma2: exactly 46 layers), else 1/sqrt(D). A 2- or 4-layer file is LLM_TYPE_UNKNOWN:
  1/sqrt(D). There is no attention.scale key for these families.
- gemma: 1/sqrt(D_v) (n_embd_head_v), always.

Sliding window (llama-hparams.h is_masked_swa, LLAMA_SWA_TYPE_STANDARD): a query at position p
sees key position j iff j <= p (causal) and, on an SWA layer, p - j < n_swa (so n_swa positions
including itself: j in (p - n_swa, p]). Which layers are SWA (set_swa_pattern, dense_first false):
``attention.sliding_window_pattern`` an array of bools: layer il is SWA iff pattern[il]; a uint32
n (default gemma3 6, gemma2 2): il is SWA iff n == 0 or il % n < n - 1 (gemma3: il % 6 < 5, the
6th, 12th, ... layers are global; gemma2: even layers SWA, odd global).
- gemma3: SWA exists only when ``attention.sliding_window`` is present and > 0; absent or 0: no
  layer is SWA and every layer uses rope.freq_base with the linear scale.
- gemma2: always SWA; n_swa = attention.sliding_window, default 4096.
- gemma: no SWA.

RoPE per layer (llama_model::get_rope_freq_base/scale: SWA layers read the _swa values):
- gemma3 with SWA: SWA layers base = rope.freq_base_swa (default 10000), scale 1.0 ALWAYS (the
  linear rope.scaling.factor does not reach the local layers: rope_freq_scale_train_swa stays 1);
  global layers base = rope.freq_base (default 10000), scale = 1 / rope.scaling.factor.
- gemma2: SWA layers base = rope.freq_base_swa if present else rope.freq_base; scale = 1 / factor
  on every layer.
- gemma: every layer rope.freq_base, scale 1 / factor.

Softcaps: gemma2 attention always capped, c_a = attn_logit_softcapping (default 50); applied to
q.k after the q scaling, before the mask and softmax. gemma2 final c_f = final_logit_softcapping
(default 30). gemma3: no attention cap; final cap only if the key is present and non-zero.

Metadata read (``<arch>.``-prefixed; required ones marked *): context_length*,
embedding_length*, block_count*, feed_forward_length, attention.head_count,
attention.head_count_kv (default head_count), attention.layer_norm_rms_epsilon* (required by all three),
attention.key_length / value_length (default E / H), rope.dimension_count (default D),
rope.freq_base (default 10000), rope.scaling.type (default "linear"; an unknown string aborts),
rope.scaling.factor, attention.sliding_window, attention.sliding_window_pattern,
rope.freq_base_swa, attn_logit_softcapping (gemma2), final_logit_softcapping (gemma2, gemma3).

Tensors (numpy shapes [out, in]; ggml's ne is the reverse):
  token_embd.weight [V, E]; output_norm.weight [E]; output.weight [V, E] (gemma3 only, optional)
  blk.N.attn_norm.weight [E]; attn_q.weight [H*D, E]; attn_k.weight, attn_v.weight [Hkv*D, E];
  attn_output.weight [E, H*D]; ffn_norm.weight [E]; ffn_gate.weight, ffn_up.weight [F, E];
  ffn_down.weight [E, F]; gemma3: attn_q_norm.weight, attn_k_norm.weight [D];
  gemma2, gemma3: post_attention_norm.weight, post_ffw_norm.weight [E].
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, RopeScalingType

from support.llm import _payload

ARCHITECTURES = ("gemma3", "gemma2", "gemma")
DEFAULT_SWA_PATTERN = {"gemma3": 6, "gemma2": 2}
TYPE_27B_LAYERS = {"gemma3": 62, "gemma2": 46}  # llama-model.cpp: the n_layer that makes LLM_TYPE_27B


@dataclasses.dataclass
class GemmaConfig:
    architecture: str = "gemma3"
    n_layers: int = 2
    n_embd: int = 256
    n_ff: int = 512
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 64  # attention.key_length = value_length
    n_vocab: int = 96
    context_length: int = 128
    rms_eps: float = 1e-6
    freq_base: float = 10000.0
    # None = the key is not written (llama.cpp's default applies)
    sliding_window: int | None = None  # attention.sliding_window
    sliding_window_pattern: int | list[bool] | None = None  # attention.sliding_window_pattern
    freq_base_swa: float | None = None  # rope.freq_base_swa
    attn_softcap: float | None = None  # attn_logit_softcapping (gemma2)
    final_softcap: float | None = None  # final_logit_softcapping (gemma2, gemma3)
    linear_rope_factor: float | None = None  # rope.scaling.type linear + rope.scaling.factor
    tied: bool = True  # gemma3 only: False writes output.weight
    types: dict[str, str] = dataclasses.field(default_factory=dict)  # tensor kind -> GGML type
    default_type: str = "F32"
    seed: int = 0
    tokens: list[str] | None = None
    token_scores: list[float] | None = None
    token_types: list[int] | None = None
    bos: int = 1
    eos: int = 2


# ------------------------------------------------------------ hyperparameters as llama.cpp derives them


@dataclasses.dataclass
class Derived:
    swa_layers: list[bool]
    n_swa: int
    rope_base: list[float]  # per layer
    rope_scale: list[float]  # per layer
    attn_scale: float  # multiplies q after RoPE
    attn_softcap: float | None
    final_softcap: float | None


def derive(c: GemmaConfig) -> Derived:
    """The per-layer values llama.cpp computes from the metadata ``write_gguf`` writes for ``c``."""
    arch, n = c.architecture, c.n_layers
    scale = 1.0 / c.linear_rope_factor if c.linear_rope_factor else 1.0
    has_swa = arch == "gemma2" or (arch == "gemma3" and bool(c.sliding_window))
    if not has_swa:
        swa = [False] * n
    elif isinstance(c.sliding_window_pattern, list):
        swa = list(c.sliding_window_pattern) + [False] * (n - len(c.sliding_window_pattern))
    else:
        p = DEFAULT_SWA_PATTERN[arch] if c.sliding_window_pattern is None else c.sliding_window_pattern
        swa = [p == 0 or il % p < p - 1 for il in range(n)]  # llama_hparams::set_swa_pattern
    n_swa = c.sliding_window if c.sliding_window is not None else (4096 if arch == "gemma2" else 0)
    if arch == "gemma3":  # rope_freq_base_train_swa default 10000, rope_freq_scale_train_swa stays 1
        base_swa, scale_swa = (c.freq_base_swa or 10000.0), 1.0
    else:  # gemma2: the _swa values start as the global ones
        base_swa, scale_swa = (c.freq_base_swa or c.freq_base), scale
    bases = [base_swa if s else c.freq_base for s in swa]
    scales = [scale_swa if s else scale for s in swa]
    if arch == "gemma":
        attn_scale = 1.0 / np.sqrt(c.head_dim)
    elif n == TYPE_27B_LAYERS[arch]:
        attn_scale = 1.0 / np.sqrt(c.n_embd // c.n_heads)
    else:
        attn_scale = 1.0 / np.sqrt(c.head_dim)
    attn_cap = (c.attn_softcap if c.attn_softcap is not None else 50.0) if arch == "gemma2" else None
    if arch == "gemma2":
        final_cap = c.final_softcap if c.final_softcap is not None else 30.0
    elif arch == "gemma3" and c.final_softcap:  # absent or 0: no cap
        final_cap = c.final_softcap
    else:
        final_cap = None
    return Derived(swa, n_swa, bases, scales, float(attn_scale), attn_cap, final_cap)


# ------------------------------------------------------------------------------ the GGUF writer


def shapes(c: GemmaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor's name and numpy shape [out, in] for config ``c``."""
    q, kv, e = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.n_embd
    out = {"token_embd.weight": (c.n_vocab, e), "output_norm.weight": (e,)}
    if c.architecture == "gemma3" and not c.tied:
        out["output.weight"] = (c.n_vocab, e)
    for i in range(c.n_layers):
        layer = {
            "attn_norm.weight": (e,),
            "attn_q.weight": (q, e),
            "attn_k.weight": (kv, e),
            "attn_v.weight": (kv, e),
            "attn_output.weight": (e, q),
            "ffn_norm.weight": (e,),
            "ffn_gate.weight": (c.n_ff, e),
            "ffn_up.weight": (c.n_ff, e),
            "ffn_down.weight": (e, c.n_ff),
        }
        if c.architecture in ("gemma2", "gemma3"):
            layer |= {"post_attention_norm.weight": (e,), "post_ffw_norm.weight": (e,)}
        if c.architecture == "gemma3":
            layer |= {"attn_q_norm.weight": (c.head_dim,), "attn_k_norm.weight": (c.head_dim,)}
        out |= {f"blk.{i}.{k}": v for k, v in layer.items()}
    return out


def _kind(name: str) -> str:
    parts = name.split(".")
    return parts[2] if parts[0] == "blk" else parts[0]


def write_gguf(path: pathlib.Path, c: GemmaConfig) -> None:
    """Write the tiny model ``c`` to ``path`` with llama.cpp's keys and tensor names for its family."""
    assert c.architecture in ARCHITECTURES, c.architecture
    rng = np.random.default_rng(c.seed)
    w = GGUFWriter(str(path), c.architecture)
    w.add_name("tiny")
    w.add_block_count(c.n_layers)
    w.add_context_length(c.context_length)
    w.add_embedding_length(c.n_embd)
    w.add_feed_forward_length(c.n_ff)
    w.add_head_count(c.n_heads)
    w.add_head_count_kv(c.n_kv_heads)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_layer_norm_rms_eps(c.rms_eps)
    w.add_rope_freq_base(c.freq_base)
    if c.linear_rope_factor is not None:
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(c.linear_rope_factor)
    if c.sliding_window is not None:
        w.add_sliding_window(c.sliding_window)
    if c.sliding_window_pattern is not None:
        w.add_sliding_window_pattern(c.sliding_window_pattern)
    if c.freq_base_swa is not None:
        w.add_rope_freq_base_swa(c.freq_base_swa)
    if c.attn_softcap is not None:
        w.add_attn_logit_softcapping(c.attn_softcap)
    if c.final_softcap is not None:
        w.add_final_logit_softcapping(c.final_softcap)
    w.add_tokenizer_model("llama")
    tokens = c.tokens or [f"t{i}" for i in range(c.n_vocab)]
    w.add_token_list(tokens)
    w.add_token_scores(c.token_scores or [0.0] * len(tokens))
    w.add_token_types(c.token_types or [1] * len(tokens))
    w.add_add_space_prefix(False)  # as the gemma converters write it
    w.add_bos_token_id(c.bos)
    w.add_eos_token_id(c.eos)
    for name, shape in shapes(c).items():
        if len(shape) == 1:  # norms: the stored value is the multiplier (1 + w already)
            w.add_tensor(name, rng.uniform(0.8, 1.2, shape).astype(np.float32))
            continue
        type_name = c.types.get(_kind(name), c.default_type)
        data = _payload(type_name, shape, rng, False)
        w.add_tensor(name, data, raw_dtype=None if type_name == "F32" else GGMLQuantizationType[type_name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------------------------ the oracle


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_neox(x: np.ndarray, positions: np.ndarray, base: float, scale: float) -> np.ndarray:
    """ggml_rope NEOX on x [seq, heads, d]: rotates (x[i], x[i + d/2]) by p * base^(-2i/d) * scale."""
    d = x.shape[-1]
    theta = base ** (-np.arange(0, d, 2) / d) * scale
    angle = positions[:, None, None] * theta[None, None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    x0, x1 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * x * (1.0 + 0.044715 * x * x)))


def gelu_ggml_fp16(x: np.ndarray) -> np.ndarray:
    """ggml-cpu's GELU on F32 (GGML_GELU_FP16): x <= -10 -> 0, x >= 10 -> x, else the fp16 table
    ggml_table_gelu_f16[fp16(x)], each entry fp16(gelu_f32(h)) evaluated in float32 (vec.h)."""
    x32 = x.astype(np.float32)
    h = x32.astype(np.float16).astype(np.float32)
    f = np.float32
    inner = f(0.79788456080286535587989211986876) * h * (f(1.0) + f(0.044715) * h * h)
    table = (f(0.5) * h * (f(1.0) + np.tanh(inner))).astype(np.float16).astype(np.float64)
    return np.where(x32 <= -10.0, 0.0, np.where(x32 >= 10.0, x32.astype(np.float64), table))


def _softcap(x: np.ndarray, cap: float) -> np.ndarray:
    return cap * np.tanh(x / cap)


def empty_cache(c: GemmaConfig) -> list:
    return [(np.zeros((0, c.n_kv_heads, c.head_dim)),) * 2 for _ in range(c.n_layers)]


def forward(
    weights: dict[str, np.ndarray],
    c: GemmaConfig,
    ids: np.ndarray,
    cache: list | None = None,
    *,
    gelu_fp16: bool = False,
) -> tuple[np.ndarray, list]:
    """Logits [seq, V] (float64) of ``ids`` after the positions held in ``cache`` (per layer
    (keys, values) [positions, Hkv, D], keys after their norm and RoPE, every position kept; the
    sliding window is the mask's work). ``gelu_fp16`` emulates ggml-cpu's fp16 GELU table."""
    d = derive(c)
    gelu = gelu_ggml_fp16 if gelu_fp16 else gelu_tanh
    cache = cache or empty_cache(c)
    past, seq = cache[0][0].shape[0], len(ids)
    positions = np.arange(past, past + seq, dtype=np.float64)
    key_positions = np.arange(past + seq)
    causal = key_positions[None, :] <= positions[:, None]
    in_window = positions[:, None] - key_positions[None, :] < d.n_swa  # is_masked_swa: p1 - p0 >= n_swa
    group = c.n_heads // c.n_kv_heads
    gemma3, post_norms = c.architecture == "gemma3", c.architecture in ("gemma2", "gemma3")
    x = weights["token_embd.weight"][np.asarray(ids)] * np.sqrt(np.float32(c.n_embd))
    new_cache = []
    for il in range(c.n_layers):
        w = {k[len(f"blk.{il}.") :]: v for k, v in weights.items() if k.startswith(f"blk.{il}.")}
        a = rms_norm(x, w["attn_norm.weight"], c.rms_eps)
        q, k, v = (a @ w[f"attn_{n}.weight"].T + w.get(f"attn_{n}.bias", 0.0) for n in "qkv")
        q = q.reshape(seq, c.n_heads, c.head_dim)
        k = k.reshape(seq, c.n_kv_heads, c.head_dim)
        if gemma3:  # per-head RMSNorm on width D before RoPE
            q = rms_norm(q, w["attn_q_norm.weight"], c.rms_eps)
            k = rms_norm(k, w["attn_k_norm.weight"], c.rms_eps)
        q = rope_neox(q, positions, d.rope_base[il], d.rope_scale[il]) * d.attn_scale
        k = rope_neox(k, positions, d.rope_base[il], d.rope_scale[il])
        keys = np.concatenate([cache[il][0], k])
        values = np.concatenate([cache[il][1], v.reshape(seq, c.n_kv_heads, c.head_dim)])
        new_cache.append((keys, values))
        scores = np.einsum("qhd,khd->hqk", q, np.repeat(keys, group, axis=1))
        if d.attn_softcap is not None:
            scores = _softcap(scores, d.attn_softcap)
        visible = causal & in_window if d.swa_layers[il] else causal
        scores = np.where(visible[None], scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", scores, np.repeat(values, group, axis=1)).reshape(seq, -1)
        o = o @ w["attn_output.weight"].T
        x = x + (rms_norm(o, w["post_attention_norm.weight"], c.rms_eps) if post_norms else o)
        f = rms_norm(x, w["ffn_norm.weight"], c.rms_eps)
        g = (gelu(f @ w["ffn_gate.weight"].T) * (f @ w["ffn_up.weight"].T)) @ w["ffn_down.weight"].T
        x = x + (rms_norm(g, w["post_ffw_norm.weight"], c.rms_eps) if post_norms else g)
    head = weights.get("output.weight") if gemma3 else None
    head = weights["token_embd.weight"] if head is None else head
    logits = rms_norm(x, weights["output_norm.weight"], c.rms_eps) @ head.T
    if d.final_softcap is not None:
        logits = _softcap(logits, d.final_softcap)
    return logits, new_cache


def greedy(
    weights: dict[str, np.ndarray], c: GemmaConfig, prompt: list[int], n: int, *, gelu_fp16: bool = False
) -> list[int]:
    """n greedy tokens after ``prompt``, one position at a time through the oracle's cache."""
    logits, cache = forward(weights, c, np.array(prompt), gelu_fp16=gelu_fp16)
    out = []
    for _ in range(n):
        out.append(int(np.argmax(logits[-1])))
        logits, cache = forward(weights, c, np.array(out[-1:]), cache, gelu_fp16=gelu_fp16)
    return out


# ---------------------------------------------------------------------------------- the configs

# A Q4_K_M-like mix (gemma3 270M Q4_K_M holds Q4_K, Q5_0, Q6_K, Q8_0 and F32): K-quant rows need a
# multiple of 256 elements, Q5_0 / Q8_0 of 32.
QUANT_MIX = {
    "token_embd": "Q6_K",
    "attn_q": "Q4_K",
    "attn_k": "Q8_0",
    "attn_v": "Q6_K",
    "attn_output": "Q4_K",
    "ffn_gate": "Q5_0",
    "ffn_up": "Q4_K",
    "ffn_down": "Q6_K",
}


def _config(**kwargs) -> GemmaConfig:
    from support.llm import spm_vocab

    return GemmaConfig(**{**spm_vocab(), **kwargs})


def configs() -> dict[str, GemmaConfig]:
    """Tiny configs exercising every feature (the window 5 binds on a 12+ token prompt)."""
    return {
        # 6 layers: layers 0-4 SWA (window 5, base_swa 10000), layer 5 global (base 1e6); GQA 4/2
        "gemma3-swa": _config(
            architecture="gemma3",
            n_layers=6,
            sliding_window=5,
            freq_base=1_000_000.0,
            freq_base_swa=10000.0,
            seed=11,
        ),
        # as gemma3 4B: linear rope factor 8 on the global layers only; pattern 2 (layers 0, 2 SWA);
        # head_dim 32 != E / H = 64; an untied output head; a final softcap that binds
        "gemma3-linear-rope": _config(
            architecture="gemma3",
            n_layers=4,
            n_heads=4,
            n_kv_heads=1,
            head_dim=32,
            sliding_window=4,
            sliding_window_pattern=2,
            freq_base=1_000_000.0,
            linear_rope_factor=8.0,
            final_softcap=3.0,
            tied=False,
            seed=12,
        ),
        # one layer each: ggml's fp16 GELU table then costs at most a few roundings (see STRICT below)
        "gemma3-swa-1layer": _config(
            architecture="gemma3", n_layers=1, sliding_window=5, freq_base=1_000_000.0, freq_base_swa=10000.0, seed=15
        ),
        "gemma3-linear-1layer": _config(
            architecture="gemma3",
            n_layers=1,
            n_kv_heads=1,
            head_dim=32,
            freq_base=1_000_000.0,
            linear_rope_factor=8.0,
            final_softcap=3.0,
            tied=False,
            seed=16,
        ),
        # 62 layers is LLM_TYPE_27B: attn_scale = 1/sqrt(E / H) = 1/4, not 1/sqrt(D) (D = 32); narrow
        "gemma3-27b-scale": _config(
            architecture="gemma3",
            n_layers=62,
            n_embd=64,
            n_ff=128,
            n_heads=4,
            n_kv_heads=2,
            head_dim=32,
            sliding_window=5,
            freq_base=1_000_000.0,
            seed=17,
        ),
        # no attention.sliding_window: every layer global with rope.freq_base
        "gemma3-no-swa": _config(architecture="gemma3", n_layers=2, freq_base=1_000_000.0, seed=13),
        "gemma3-q4km": _config(
            architecture="gemma3", n_layers=2, sliding_window=5, default_type="F32", types=QUANT_MIX, seed=14
        ),
        # gemma2: layers 0, 2 SWA (window 5), softcaps that bind on tiny random weights
        "gemma2-softcap": _config(
            architecture="gemma2",
            n_layers=4,
            sliding_window=5,
            attn_softcap=1.5,
            final_softcap=2.0,
            head_dim=64,
            n_heads=4,
            n_kv_heads=2,
            seed=21,
        ),
        "gemma2-softcap-1layer": _config(
            architecture="gemma2", n_layers=1, sliding_window=5, attn_softcap=1.5, final_softcap=2.0, seed=24
        ),
        # gemma2 with the defaults llama.cpp supplies: window 4096, caps 50 / 30; MHA; head_dim 128
        "gemma2-defaults": _config(architecture="gemma2", n_layers=2, n_heads=2, n_kv_heads=2, head_dim=128, seed=22),
        "gemma2-q4km": _config(
            architecture="gemma2", n_layers=2, sliding_window=5, attn_softcap=1.5, types=QUANT_MIX, seed=23
        ),
        # gemma: MQA, head_dim 128 != E / H = 32 (as gemma 2B: E 2048, H 8, D 256)
        "gemma": _config(architecture="gemma", n_layers=2, n_heads=8, n_kv_heads=1, head_dim=128, seed=31),
        "gemma-q4km": _config(architecture="gemma", n_layers=2, types=QUANT_MIX, seed=32),
    }


CONFIGS: dict[str, GemmaConfig] = configs()

# Logits bars against llama.cpp (F32 weights, F32 KV cache) with the fp16 GELU table emulated.
# The emulation is exact op for op, but the table is a step function: where a gate pre-activation
# lies within ~1e-7 (relative) of an fp16 rounding midpoint, ggml's float32 value and the float64
# oracle's round to neighbouring entries (measured: 2 of 7,168 entries in gemma3-swa-1layer, and
# choosing the other neighbour there takes its distance from 3.3e-6 to 1.9e-7). With post-norms
# (gemma2, gemma3) each such rounding moves the residual by ~1e-5 of its row, and the moved rows
# shift more pre-activations across midpoints in later layers: the distance grows with depth
# (measured 1e-5 at 2 layers, 4e-5 to 7e-5 at 4-6, 4e-4 at 62). Which pre-activations land on a
# midpoint also depends on ggml's build, whose kernels for each instruction set sum in their own
# order (measured under 1e-5 on earlier machines; 1.09e-5 and 1.15e-5 for gemma3-linear-1layer and
# gemma2-defaults with an AVX2-only build, also on CI). So 3e-5 holds where there are few
# opportunities (one or two layers), still 5x under the exact GELU's distance (1.6e-4 to 2.3e-4
# for those), and deeper configs get a depth-aware bar.
STRICT = 3e-5
DEEP = {
    "gemma3-no-swa": 1e-4,
    "gemma3-swa": 2e-4,
    "gemma3-linear-rope": 2e-4,
    "gemma2-softcap": 2e-4,
    "gemma3-27b-scale": 1.5e-3,
}


def f32_bar(name: str) -> float:
    return DEEP.get(name, STRICT)
