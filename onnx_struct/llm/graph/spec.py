"""What a decoder graph is built from: the hyperparameters every family shares (read from the
GGUF metadata by :func:`read_hyperparameters`), and the :class:`Block` a family's module states:
how its layers differ from llama's, as data.

Rules shared by the families (llama.cpp's ``llama_model::load_hparams``):
- the head size is ``attention.key_length`` (default ``embedding_length / head_count``);
  ``attention.value_length`` must equal it (GroupQueryAttention has one head size);
- ``rope.scaling.type`` none or linear (``freq_scale = 1 / rope.scaling.factor``);
- a sliding-window pattern (:func:`swa_layers`): an integer n marks layer il windowed iff
  ``n == 0 or il % n < n - 1``; an array of bools marks each layer, full attention past its end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.formats.gguf.metadata import checked_context_length, value_kind
from onnx_struct.limits import MAX_ROPE_TABLE_BYTES
from onnx_struct.llm.graph.keys import FLOAT32_MAX, INT32_MAX, Keys

# Why a mixture of experts is refused (kept here, below families/, which imports this module).
MOE_KERNEL = (
    "onnxruntime's CPU QMoE kernel reads experts only in its own 4/8-bit layout, not GGUF's blocks, "
    "and MoEPacked has no CPU kernel"
)
# The head sizes onnxruntime's GroupQueryAttention runs with do_rotary=1: multiples of 16.
GQA_HEAD_MULTIPLE = 16

# Tensor name -> (GGML type name, numpy shape), as convert read them from the file.
Tensors = Mapping[str, tuple[str, tuple[int, ...]]]


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """The keys every family reads (``{arch}.*``), checked."""

    architecture: str
    n_layers: int
    n_embd: int
    n_ff: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    n_vocab: int
    context_length: int
    rms_eps: float
    freq_base: float
    freq_scale: float  # 1 / the linear rope scaling factor
    rope_dims: int  # rope.dimension_count

    @property
    def q_width(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim


@dataclasses.dataclass(frozen=True)
class Rope:
    """One rotary embedding: pair i of the first ``dims`` of a head turns by
    ``position * scale * base^(-2i/dims) / factors[i]``; cos and sin are multiplied by ``attn_factor``."""

    base: float
    scale: float = 1.0
    neox: bool = False  # pairs (i, i + dims/2); otherwise (2i, 2i + 1)
    factors: str | None = None  # the tensor of per-pair frequency divisors (rope_freqs.weight, ...)
    attn_factor: float = 1.0
    dims: int | None = None  # None: the whole head
    base_key: str = dataclasses.field(default="rope.freq_base", compare=False)  # for messages


@dataclasses.dataclass(frozen=True)
class Layer:
    rope: Rope | None  # None: this layer attends without positions (smollm3's every 4th)
    window: int | None = None  # a query at p sees keys j with p - window < j <= p


@dataclasses.dataclass(frozen=True)
class Block:
    """How a family's decoder differs from llama's: x += attn(norm(x)); x += ffn(norm(x))."""

    layers: tuple[Layer, ...]
    attention_scale: float  # multiplies q . k
    attn_pre_norm: bool = True  # attn_norm
    attn_post_norm: bool = False  # post_attention_norm on the attention output
    ffn_pre_norm: bool = True  # ffn_norm
    ffn_post_norm: bool = False  # post_ffw_norm on the FFN output
    qk_norm: str | None = None  # "head": attn_q_norm/attn_k_norm per head; "full": over q's/k's width
    activation: str = "silu"  # or "gelu_tanh": act(gate) * up
    fused_qkv: str = "never"  # "never", "optional" (attn_qkv or attn_q/k/v), "always"
    fused_gate_up: bool = False  # ffn_up holds [gate; up] (2 * n_ff rows), no ffn_gate
    biases: frozenset[str] = frozenset()  # optional bias tensors (attn_q, attn_k, attn_v, attn_output, ffn_*)
    required_biases: frozenset[str] = frozenset()
    embedding_scale: float | None = None
    residual_scale: float | None = None  # multiplies the attention and FFN outputs before each residual add
    logit_scale: float | None = None  # divides the logits
    attn_softcap: float | None = None  # cap * tanh(scores / cap), before the mask and softmax
    final_softcap: float | None = None  # cap * tanh(logits / cap)
    head: str = "optional"  # output.weight: "optional" (absent: token_embd), "tied" (never), "required"
    unread: frozenset[str] = frozenset()  # tensors the file may hold that this graph does not read


def read_hyperparameters(metadata: Mapping[str, object], tensors: Tensors, arch: str) -> Hyperparameters:
    """The shared keys of ``arch``, checked against each other and the tensors' count.

    Raises:
        ValidationError: a key is missing or out of range; the path names it.
    """
    keys = Keys(metadata, arch)
    for moe in ("expert_count", "expert_used_count"):
        if metadata.get(f"{arch}.{moe}", 0):
            raise ValidationError(
                keys.path(moe),
                f"a mixture of experts: the decoder graph has no expert routing (ffn_gate_inp, ffn_*_exps): {MOE_KERNEL}",
                code="unsupported_architecture",
            )
    n_layers = keys.positive_int("block_count", maximum=2**64)
    if n_layers > len(tensors):  # each layer has several tensors: refused before a table per layer is built
        raise ValidationError(
            keys.path("block_count"),
            f"{n_layers} layers, but the file holds {len(tensors)} tensors in all",
            code="missing_tensor",
        )
    n_embd, n_ff = keys.positive_int("embedding_length"), keys.positive_int("feed_forward_length")
    n_heads = keys.positive_int("attention.head_count")
    n_kv_heads = keys.positive_int("attention.head_count_kv", n_heads)
    if n_heads % n_kv_heads:
        raise ValidationError(
            keys.path("attention.head_count_kv"), f"{n_kv_heads} kv heads must divide the {n_heads} heads"
        )
    if not keys.has("attention.key_length") and n_embd % n_heads:
        raise ValidationError(
            keys.path("attention.head_count"),
            f"{n_heads} heads must divide embedding_length {n_embd} (no attention.key_length gives the head size)",
        )
    head_dim = keys.positive_int("attention.key_length", n_embd // n_heads)
    if head_dim % GQA_HEAD_MULTIPLE:
        # onnxruntime's CPU GroupQueryAttention refuses at run time a head size that is not a
        # multiple of 8, and with its fused rotary (do_rotary) of 16 (tests/adversarial/test_gguf_graph.py)
        raise ValidationError(
            keys.path("attention.key_length" if keys.has("attention.key_length") else "embedding_length"),
            f"head size {head_dim} is not a multiple of {GQA_HEAD_MULTIPLE}: onnxruntime's "
            "GroupQueryAttention with rotary embedding cannot run it",
            code="unsupported_architecture",
        )
    value_length = keys.positive_int("attention.value_length", head_dim)
    if value_length != head_dim:
        raise ValidationError(
            keys.path("attention.value_length"),
            f"{value_length} differs from the key length {head_dim}: GroupQueryAttention has one head size",
            code="unsupported_architecture",
        )
    rope_dims = keys.positive_int("rope.dimension_count", head_dim)
    scaling = keys.string("rope.scaling.type", "none")
    if scaling not in ("none", "linear"):
        raise ValidationError(
            keys.path("rope.scaling.type"),
            f"rope scaling {scaling!r} is not built (none and linear are)",
            code="unsupported_architecture",
        )
    factor = keys.positive_float("rope.scaling.factor", 1.0) if scaling == "linear" else 1.0
    vocab = tensors.get("token_embd.weight", (None, (0, 0)))[1][0]
    context = checked_context_length(metadata, arch)
    table_bytes = context * head_dim * 4  # cos and sin: head_dim / 2 float32 each per position
    if table_bytes > MAX_ROPE_TABLE_BYTES:  # folded when the session is created
        raise limit_exceeded(
            keys.path("context_length"),
            f"{context} positions x head size {head_dim}: the rotary cos/sin tables would take {table_bytes} "
            f"bytes, over the limit of {MAX_ROPE_TABLE_BYTES}",
            table_bytes,
            MAX_ROPE_TABLE_BYTES,
        )
    return Hyperparameters(
        architecture=arch,
        n_layers=n_layers,
        n_embd=n_embd,
        n_ff=n_ff,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        n_vocab=vocab,
        context_length=context,
        rms_eps=keys.positive_float("attention.layer_norm_rms_epsilon"),
        freq_base=keys.positive_float("rope.freq_base", 10000.0),
        freq_scale=1.0 / factor,
        rope_dims=rope_dims,
    )


def check_rope_tables(keys: Keys, hp: Hyperparameters, block: Block) -> None:
    """The cos/sin tables of every distinct RoPE of ``block`` together (gemma3's windowed and
    global layers have one each) within MAX_ROPE_TABLE_BYTES: each is folded at session creation."""
    ropes = {layer.rope for layer in block.layers if layer.rope is not None}
    for rope in ropes:  # every angle position * scale * base^(-2i/d) a finite float32 (cos(inf) is NaN)
        dims = rope.dims or hp.head_dim
        unscaled = float(np.max(rope.base ** -(np.arange(0, dims, 2, dtype=np.float64) / dims)))
        if hp.context_length * unscaled > FLOAT32_MAX:
            raise ValidationError(keys.path(rope.base_key), f"{rope.base}: the RoPE angles overflow float32")
        if hp.context_length * unscaled * rope.scale > FLOAT32_MAX:
            raise ValidationError(
                keys.path("rope.scaling.factor"), f"1 / {1 / rope.scale}: the RoPE angles overflow float32"
            )
    table_bytes = sum(hp.context_length * (rope.dims or hp.head_dim) * 4 for rope in ropes)
    if table_bytes > MAX_ROPE_TABLE_BYTES:
        raise limit_exceeded(
            keys.path("context_length"),
            f"{hp.context_length} positions x {len(ropes)} RoPEs of head size {hp.head_dim}: the rotary cos/sin "
            f"tables would take {table_bytes} bytes, over the limit of {MAX_ROPE_TABLE_BYTES}",
            table_bytes,
            MAX_ROPE_TABLE_BYTES,
        )


def heads_span_embedding(keys: Keys, hp: Hyperparameters) -> None:
    """Refuse a head size other than embedding_length / head_count where the family's tensors are
    created with it (olmo2, phi3 in llama.cpp)."""
    if hp.head_dim * hp.n_heads != hp.n_embd:
        raise ValidationError(
            keys.path("attention.key_length"),
            f"head size {hp.head_dim} x {hp.n_heads} heads differs from embedding_length {hp.n_embd}",
            code="unsupported_architecture",
        )


def full_rope_dims(keys: Keys, hp: Hyperparameters) -> None:
    """Refuse partial rotary where the family rotates whole heads (llama.cpp asserts it)."""
    if hp.rope_dims != hp.head_dim:
        raise ValidationError(
            keys.path("rope.dimension_count"),
            f"{hp.rope_dims} differs from the head size {hp.head_dim}: {hp.architecture} rotates whole heads",
            code="unsupported_architecture",
        )


def window(keys: Keys, hp: Hyperparameters, default: object = None) -> int | None:
    """``attention.sliding_window``: absent (with no default) is None; a window covering the whole
    context attends like no window and is None too."""
    if not keys.has("attention.sliding_window") and default is None:
        return None
    size = keys.positive_int("attention.sliding_window", default)
    return None if size >= hp.context_length else size


def has_window(keys: Keys) -> bool:
    """gemma3, olmo2: windowed iff ``attention.sliding_window`` > 0 (llama.cpp reads it as a uint32:
    a bool or a float is refused, not taken for 0)."""
    value = keys.raw("attention.sliding_window", 0)
    if type(value) is int and value == 0:
        return False
    keys.positive_int("attention.sliding_window")  # a bool, a float, a negative: refused naming the key
    return True


def swa_layers(keys: Keys, hp: Hyperparameters, default_pattern: int) -> list[bool]:
    """Which layers are windowed, from ``attention.sliding_window_pattern`` (see the module rule).

    Raises:
        ValidationError: the pattern is malformed, or marks no layer: llama.cpp asserts
            ``hparams.is_swa_any()`` for every family with sliding-window attention.
    """
    name = "attention.sliding_window_pattern"
    pattern = keys.raw(name, default_pattern)
    if isinstance(pattern, list):
        # llama.cpp reads bool, int32 or uint32 arrays (non-zero: windowed), one entry per layer
        if len(pattern) > hp.n_layers:
            raise ValidationError(
                keys.path(name), f"must be at most {hp.n_layers} values (one per layer), not {len(pattern)}"
            )
        if not all(isinstance(v, (bool, int)) for v in pattern):
            raise ValidationError(keys.path(name), "must hold bools or integers (non-zero: the layer is windowed)")
        layers = [il < len(pattern) and bool(pattern[il]) for il in range(hp.n_layers)]
    elif isinstance(pattern, bool) or not isinstance(pattern, int) or not 0 <= pattern <= INT32_MAX:
        raise ValidationError(
            keys.path(name),
            f"must be a non-negative integer or an array of bools, not {pattern!r} ({value_kind(pattern)})",
        )
    else:
        layers = [pattern == 0 or il % pattern < pattern - 1 for il in range(hp.n_layers)]
    if not any(layers):  # llama-model.cpp create_memory: GGML_ASSERT(hparams.is_swa_any()) aborts
        raise ValidationError(
            keys.path(name),
            f"marks no layer sliding-window although {hp.architecture} attends within a window (llama.cpp refuses it)",
        )
    return layers
