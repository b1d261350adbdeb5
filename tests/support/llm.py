"""Tiny random llama-shaped GGUF files written with gguf-py, and an independent float64 numpy
forward of them (gguf-py's dequantize, ggml's RoPE and RMSNorm, grouped-query attention written
out), the oracle for the decoder graph of onnx_struct.llm.graph. No package code here.
Importing this module needs gguf; callers importorskip it first."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter, RopeScalingType
from gguf import quants as gq

# ggml block layouts: where each block's FLOAT16 scales sit, so random blocks get sane ones.
SCALES = {
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q2_K": (80, 82),
    "Q6_K": (208,),
    "Q3_K": (108,),
    "Q4_0": (0,),
    "Q8_0": (0,),
}
# weight = d * (about this): the random scales d give weights of about 1/sqrt(fan_in)
CODE_SIZE = {"Q4_K": 128, "Q5_K": 128, "Q2_K": 128, "Q6_K": 512, "Q3_K": 512, "Q4_0": 5, "Q8_0": 64}


@dataclasses.dataclass
class TinyLlama:
    architecture: str = "llama"
    n_layers: int = 2
    n_embd: int = 256
    n_ff: int = 512
    n_heads: int = 8
    n_kv_heads: int = 2
    n_vocab: int = 96
    context_length: int = 128
    rms_eps: float = 1e-5
    freq_base: float = 10000.0
    tied: bool = True
    rope_freqs: bool = False
    linear_rope_factor: float | None = None  # rope.scaling.type linear with this factor
    # tensor kind ("attn_q", "ffn_down", "token_embd", "output", ...) -> GGML type; default default_type
    types: dict[str, str] = dataclasses.field(default_factory=dict)
    default_type: str = "Q4_0"
    seed: int = 0
    random_blocks: bool = False  # Q4_0/Q8_0 as random blocks too (fast for big files), not quantized floats
    tokens: list[str] | None = None  # the vocabulary (tokenizer.ggml.tokens); default "t0", "t1", ...
    token_scores: list[float] | None = None
    token_types: list[int] | None = None
    tokenizer_model: str = "llama"
    merges: list[str] | None = None
    pre: str | None = None  # tokenizer.ggml.pre
    add_bos: bool | None = None  # tokenizer.ggml.add_bos_token
    bos: int = 1
    eos: int = 2

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_heads

    @property
    def biases(self) -> bool:
        return self.architecture == "qwen2"

    @property
    def neox(self) -> bool:
        return self.architecture == "qwen2"


def _shapes(c: TinyLlama) -> dict[str, tuple[int, ...]]:
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    shapes = {"token_embd.weight": (c.n_vocab, c.n_embd), "output_norm.weight": (c.n_embd,)}
    if not c.tied:
        shapes["output.weight"] = (c.n_vocab, c.n_embd)
    if c.rope_freqs:
        shapes["rope_freqs.weight"] = (c.head_dim // 2,)
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
            layer.update({"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)})
        shapes.update({f"blk.{i}.{k}": v for k, v in layer.items()})
    return shapes


def _kind(name: str) -> str:
    parts = name.split(".")
    return parts[2] if parts[0] == "blk" else parts[0]


def _payload(type_name: str, shape: tuple[int, ...], rng: np.random.Generator, random_blocks: bool) -> np.ndarray:
    """uint8 [rows, bytes per row] for a quantized type, the float32 array for F32."""
    scale = 1.0 / np.sqrt(shape[-1])
    qtype = GGMLQuantizationType[type_name] if type_name != "F32" else None
    if type_name not in SCALES or (type_name in ("Q4_0", "Q8_0") and not random_blocks):
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        return x if qtype is None else gq.quantize(x, qtype)
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (int(np.prod(shape)) // block_size, type_size), dtype=np.uint8)
    for offset in SCALES[type_name]:
        d = (rng.uniform(0.5, 1.5, len(blocks)) * scale / CODE_SIZE[type_name]).astype(np.float16)
        blocks[:, offset : offset + 2] = d.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(shape[0], -1)


def write_gguf(path: pathlib.Path, c: TinyLlama) -> None:
    """Write the tiny model ``c`` to ``path`` with gguf-py (the metadata llama.cpp requires)."""
    rng = np.random.default_rng(c.seed)
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
    w.add_rope_dimension_count(c.head_dim)
    if c.linear_rope_factor is not None:
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(c.linear_rope_factor)
    w.add_tokenizer_model(c.tokenizer_model)
    tokens = c.tokens or [f"t{i}" for i in range(c.n_vocab)]
    w.add_token_list(tokens)
    if c.token_scores is not None or c.tokenizer_model == "llama":
        w.add_token_scores(c.token_scores or [0.0] * len(tokens))
    w.add_token_types(c.token_types or [1] * len(tokens))
    if c.merges is not None:
        w.add_token_merges(c.merges)
    if c.pre is not None:
        w.add_tokenizer_pre(c.pre)
    if c.add_bos is not None:
        w.add_add_bos_token(c.add_bos)
    w.add_bos_token_id(c.bos)
    w.add_eos_token_id(c.eos)
    for name, shape in _shapes(c).items():
        kind = _kind(name)
        if len(shape) == 1:
            values = rng.uniform(0.8, 1.2, shape).astype(np.float32) if "norm" in name else None
            if kind == "rope_freqs":
                values = rng.uniform(1.0, 8.0, shape).astype(np.float32)
            if values is None:  # a bias
                values = (rng.standard_normal(shape) * 0.1).astype(np.float32)
            w.add_tensor(name, values)
            continue
        type_name = c.types.get(kind, c.default_type)
        data = _payload(type_name, shape, rng, c.random_blocks)
        w.add_tensor(name, data, raw_dtype=None if type_name == "F32" else GGMLQuantizationType[type_name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------------------- the oracle


def read_weights(path: pathlib.Path) -> dict[str, np.ndarray]:
    """Every tensor of the file as float64, dequantized by gguf-py."""
    from gguf import GGUFReader

    out = {}
    for t in GGUFReader(str(path)).tensors:
        data = np.asarray(t.data)
        if t.tensor_type != GGMLQuantizationType.F32:
            data = gq.dequantize(data, GGMLQuantizationType(t.tensor_type))
        out[t.name] = data.astype(np.float64).reshape([int(d) for d in reversed(t.shape.tolist())])
    return out


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, positions: np.ndarray, c: TinyLlama, freqs: np.ndarray | None) -> np.ndarray:
    """ggml_rope on x [seq, heads, d]: NORM mode rotates (x[2i], x[2i+1]), NEOX (x[i], x[i+d/2]),
    by the angle p * base^(-2i/d) / freq_factor[i] * freq_scale (1 / the linear factor)."""
    d = x.shape[-1]
    theta = c.freq_base ** (-np.arange(0, d, 2) / d) / (c.linear_rope_factor or 1.0)
    if freqs is not None:
        theta = theta / freqs
    angle = positions[:, None, None] * theta[None, None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    if c.neox:
        x0, x1 = x[..., : d // 2], x[..., d // 2 :]
    else:
        x0, x1 = x[..., 0::2], x[..., 1::2]
    r0, r1 = x0 * cos - x1 * sin, x0 * sin + x1 * cos
    out = np.empty_like(x)
    if c.neox:
        out[..., : d // 2], out[..., d // 2 :] = r0, r1
    else:
        out[..., 0::2], out[..., 1::2] = r0, r1
    return out


def forward(
    weights: dict[str, np.ndarray], c: TinyLlama, ids: np.ndarray, cache: list | None = None
) -> tuple[np.ndarray, list]:
    """Logits [seq, vocab] (float64) of ``ids`` after the tokens held in ``cache`` (a list of
    (keys, values) per layer, [seq, kv_heads, d]); returns the logits and the longer cache."""
    cache = cache or [(np.zeros((0, c.n_kv_heads, c.head_dim)),) * 2 for _ in range(c.n_layers)]
    past = cache[0][0].shape[0]
    seq = len(ids)
    positions = np.arange(past, past + seq, dtype=np.float64)
    freqs = weights.get("rope_freqs.weight")
    h = weights["token_embd.weight"][ids]
    group = c.n_heads // c.n_kv_heads
    new_cache = []
    for i in range(c.n_layers):
        w = {k[len(f"blk.{i}.") :]: v for k, v in weights.items() if k.startswith(f"blk.{i}.")}
        x = _rms_norm(h, w["attn_norm.weight"], c.rms_eps)
        q, k, v = (x @ w[f"attn_{n}.weight"].T + w.get(f"attn_{n}.bias", 0.0) for n in "qkv")
        q = _rope(q.reshape(seq, c.n_heads, c.head_dim), positions, c, freqs)
        k = _rope(k.reshape(seq, c.n_kv_heads, c.head_dim), positions, c, freqs)
        keys = np.concatenate([cache[i][0], k])
        values = np.concatenate([cache[i][1], v.reshape(seq, c.n_kv_heads, c.head_dim)])
        new_cache.append((keys, values))
        kh = np.repeat(keys, group, axis=1)  # query head j reads kv head j // group
        vh = np.repeat(values, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, kh) / np.sqrt(c.head_dim)
        allowed = np.arange(past + seq)[None, :] <= positions[:, None]  # causal
        scores = np.where(allowed[None], scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", scores, vh).reshape(seq, -1)
        h = h + attn @ w["attn_output.weight"].T
        x = _rms_norm(h, w["ffn_norm.weight"], c.rms_eps)
        gate, up = x @ w["ffn_gate.weight"].T, x @ w["ffn_up.weight"].T
        h = h + (gate / (1 + np.exp(-gate)) * up) @ w["ffn_down.weight"].T
    head = weights["token_embd.weight" if c.tied else "output.weight"]
    return _rms_norm(h, weights["output_norm.weight"], c.rms_eps) @ head.T, new_cache


def relative_rms(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.sqrt(np.mean((actual - expected) ** 2)) / np.sqrt(np.mean(expected**2)))


# ------------------------------------------------------------------------- test vocabularies
SPM_PIECES = [
    "▁", "e", "t", "a", "o", "n", "h", "l", "r", "s", "d", "w", "i", "c", "u", "f", "é", "🙂",
    "▁t", "he", "▁the", "▁a", "ll", "llo", "▁he", "▁hello", "▁w", "or", "▁wor", "ld", "▁world",
    "▁c", "af", "▁caf", "▁café", "in", "▁in", "on", "▁on", "▁▁", "▁▁▁", "st", "▁st", "an", "▁an", "and", "▁and",
]  # fmt: skip


def spm_vocab(n_vocab: int | None = None) -> dict[str, object]:
    """A llama (SentencePiece-style) vocabulary: <unk>, <s>, </s>, the 256 byte pieces, then
    SPM_PIECES with distinct scores (then "▁p<i>" pieces up to ``n_vocab``). As in a trained
    SentencePiece vocabulary, every character of a piece is a piece."""
    pieces = SPM_PIECES + [f"▁p{i}" for i in range((n_vocab or 0) - 259 - len(SPM_PIECES))]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    return {"tokens": tokens, "token_scores": scores, "token_types": types, "n_vocab": len(tokens)}


# Strings for tokenizer comparisons: runs of spaces, tabs, newlines, accents, CJK, emoji (byte fallback).
TEXTS = [
    "hello world",
    "the café 🙂",
    "  and   in",
    "xyz",
    "",
    " leading and trailing ",
    "naïve 日本語 \t tab\nnewline",
    "andandand hellohello",
    "<s> is text here",
]


def byte_level(data: bytes) -> str:
    """GPT-2's byte-to-character mapping: printable Latin-1 bytes stay, the others move to 256+."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    table = {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}
    return "".join(table[b] for b in data)


BPE_MERGES = ["h e", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "l l", "Ġ t", "Ġt he", "he ll", "hell o", "1 2"]


def bpe_vocab() -> dict[str, object]:
    """A byte-level BPE (gpt2) vocabulary: the 256 byte characters (ids 0-255, in byte order),
    the results of BPE_MERGES (ids 256-267, in merge order), then <|begin_of_text|> (268) and
    <|end_of_text|> (269), control tokens."""
    tokens = [byte_level(bytes([b])) for b in range(256)]
    tokens += ["".join(m.split(" ")) for m in BPE_MERGES] + ["<|begin_of_text|>", "<|end_of_text|>"]
    types = [1] * (len(tokens) - 2) + [3, 3]
    return {
        "tokens": tokens,
        "token_types": types,
        "merges": BPE_MERGES,
        "tokenizer_model": "gpt2",
        "pre": "llama-bpe",
        "bos": 268,
        "eos": 269,
        "add_bos": True,
        "n_vocab": len(tokens),
    }


def prompt_feeds(c: TinyLlama, ids: list[int]) -> dict[str, np.ndarray]:
    """The decoder graph's inputs for a whole prompt: past length 0."""
    empty = np.zeros((1, c.n_kv_heads, 0, c.head_dim), np.float32)
    feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64)}
    for i in range(c.n_layers):
        feeds[f"past_key_values.{i}.key"] = feeds[f"past_key_values.{i}.value"] = empty
    return feeds


def spm_tokenize(tokens: list[str], scores: list[float], text: str, bos: int = 1) -> list[int]:
    """llama.cpp's llm_tokenizer_spm written out plainly: one space prefixed, spaces as "▁", the
    text split into characters, then the adjacent pair whose concatenation is the piece of highest
    score merged (ties: leftmost) until none is a piece; leftover characters become <0xXX> bytes."""
    ids = {piece: i for i, piece in enumerate(tokens)}  # llama.cpp's token_to_id[word] = i: the last wins
    symbols = list((" " + text).replace(" ", "\u2581")) if text else []  # llama.cpp: no fragment, no prefix
    while True:
        best = None
        for i in range(len(symbols) - 1):
            merged = symbols[i] + symbols[i + 1]
            if merged in ids and (best is None or scores[ids[merged]] > scores[ids[best[1]]]):
                best = (i, merged)
        if best is None:
            break
        symbols[best[0] : best[0] + 2] = [best[1]]
    out = [bos]
    for s in symbols:
        out += [ids[s]] if s in ids else [ids[f"<0x{b:02X}>"] for b in s.encode()]
    return out


def spm_detokenize(tokens: list[str], ids: list[int]) -> str:
    """The text of ids as llama_detokenize gives it: pieces joined, <0xXX> pieces as bytes, "▁" as
    a space, control pieces (<s>, </s>) left out, and the prefixed space removed from the very first
    token only (after a BOS the next token keeps it)."""
    data = b""
    for position, i in enumerate(ids):
        piece = tokens[i]
        if piece in ("<s>", "</s>", "<unk>"):
            continue
        if piece.startswith("<0x") and len(piece) == 6:
            data += bytes([int(piece[3:5], 16)])
        else:
            text = piece.replace("\u2581", " ")
            data += (text[1:] if position == 0 and text.startswith(" ") else text).encode()
    return data.decode(errors="replace")


def greedy(weights: dict[str, np.ndarray], c: TinyLlama, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens after prompt, through the oracle's cache."""
    logits, cache = forward(weights, c, np.array(prompt))
    out = []
    for _ in range(n):
        out.append(int(np.argmax(logits[-1])))
        logits, cache = forward(weights, c, np.array(out[-1:]), cache)
    return out


def run_llama_cpp(python: str, request: dict, workdir: pathlib.Path) -> dict[str, np.ndarray]:
    """llama.cpp's answer to ``request`` (benchmarks/_llama_cpp_peer.py, run by ``python``, an
    interpreter with llama-cpp-python)."""
    import json
    import subprocess

    peer = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "_llama_cpp_peer.py"
    (workdir / "request.json").write_text(json.dumps(request))
    result = subprocess.run(
        [python, str(peer), str(workdir / "request.json"), str(workdir / "result.npz")],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if result.returncode:
        raise RuntimeError(f"llama.cpp peer failed ({result.returncode}): {result.stderr[-2000:]}")
    with np.load(workdir / "result.npz") as data:
        return dict(data)
