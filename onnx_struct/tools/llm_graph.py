"""The decoder graph of a llama-shaped GGUF model: ``convert("model.gguf", graph=True)``.

:func:`add_decoder_graph` gives the model :func:`onnx_struct.tools.gguf.convert`
made of a GGUF file the computation llama.cpp runs for ``general.architecture`` llama, mistral or
qwen2 (docs/llm.md): embedding Gather, per layer RMSNorm, q/k/v projections, GroupQueryAttention
with llama.cpp's RoPE mode and the KV cache, SwiGLU MLP and residuals, then the output head. I/O
names follow onnxruntime-genai (``input_ids``, ``attention_mask``, ``past_key_values.{i}.key``,
``logits``, ``present.{i}.key``). No onnxruntime import here.

Notes: docs/modules.md.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.formats.gguf.metadata import checked_context_length, decode_metadata, value_kind
from onnx_struct.limits import MAX_ROPE_TABLE_BYTES

FLOAT32_MAX = float(np.finfo(np.float32).max)

MS_DOMAIN = "com.microsoft"
# The head sizes onnxruntime's GroupQueryAttention runs with do_rotary=1: multiples of 16.
GQA_HEAD_MULTIPLE = 16
# general.architecture -> (ggml rope mode is NEOX, q/k/v projections carry biases)
ARCHITECTURES = {"llama": (False, False), "mistral": (False, False), "qwen2": (True, True)}
LAYER_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
BIASES = ("attn_q", "attn_k", "attn_v")

# Tensor name -> (GGML type name, numpy shape), as convert read them from the file.
Tensors = Mapping[str, tuple[str, tuple[int, ...]]]


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """What the graph is built from, read from the GGUF metadata (``{arch}.*`` keys)."""

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
    freq_scale: float
    neox: bool
    biases: bool
    tied: bool
    rope_freqs: bool


def hyperparameters(metadata: Mapping[str, object], tensors: Tensors) -> Hyperparameters:
    """The decoder's shape, checked against the tensors.

    Raises:
        ValidationError: the architecture is not llama, mistral or qwen2 (or is a mixture of
            experts), a key the graph needs is missing or out of range, a tensor is missing or
            has the wrong shape, or the file holds a tensor the graph would not use (a feature it
            does not implement); the path names the key (``gguf.kv['llama.block_count']``) or the
            tensor (``gguf.tensors['blk.0.attn_q.weight']``).
    """
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise ValidationError(
            "gguf.kv['general.architecture']",
            f"architecture {arch!r} has no decoder graph; supported: {', '.join(sorted(ARCHITECTURES))}",
            code="unsupported_architecture",
        )
    neox, biases = ARCHITECTURES[arch]

    def key(name: str, default: object = None, kind: type = int) -> object:
        full = f"{arch}.{name}"
        value = metadata.get(full, default)
        if value is None:
            raise ValidationError(f"gguf.kv[{full!r}]", "missing: the decoder graph needs it", code="missing_metadata")
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ValidationError(
                f"gguf.kv[{full!r}]", f"must be a positive integer, not {value!r} ({value_kind(value)})"
            )
        if kind is float and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= FLOAT32_MAX
        ):  # the graph holds it as a float32 constant: a larger value would become inf
            raise ValidationError(
                f"gguf.kv[{full!r}]", f"must be a positive, finite float32 number, not {value!r} ({value_kind(value)})"
            )
        if kind is str and not isinstance(value, str):
            raise ValidationError(f"gguf.kv[{full!r}]", f"must be a string, not {value!r} ({value_kind(value)})")
        return value

    for moe in ("expert_count", "expert_used_count"):
        if metadata.get(f"{arch}.{moe}", 0):
            raise ValidationError(
                f"gguf.kv['{arch}.{moe}']",
                "a mixture of experts: the decoder graph has no expert routing (ffn_gate_inp, ffn_*_exps)",
                code="unsupported_architecture",
            )
    n_layers, n_embd, n_ff = key("block_count"), key("embedding_length"), key("feed_forward_length")
    if n_layers > len(tensors):  # each layer has several tensors: refused before a table per layer is built
        raise ValidationError(
            f"gguf.kv['{arch}.block_count']",
            f"{n_layers} layers, but the file holds {len(tensors)} tensors in all",
            code="missing_tensor",
        )
    n_heads = key("attention.head_count")
    n_kv_heads = key("attention.head_count_kv", n_heads)
    if n_embd % n_heads or n_heads % n_kv_heads:
        raise ValidationError(
            f"gguf.kv['{arch}.attention.head_count']",
            f"{n_heads} heads must divide embedding_length {n_embd}, and {n_kv_heads} kv heads must divide them",
        )
    head_dim = n_embd // n_heads
    for name in ("attention.key_length", "attention.value_length", "rope.dimension_count"):
        size = key(name, head_dim)
        if size != head_dim:
            raise ValidationError(
                f"gguf.kv['{arch}.{name}']",
                f"{size} differs from the head size {head_dim}: the graph rotates and "
                "attends over whole heads of embedding_length / head_count",
                code="unsupported_architecture",
            )
    if head_dim % 2:
        raise ValidationError(f"gguf.kv['{arch}.embedding_length']", f"head size {head_dim} is odd: RoPE rotates pairs")
    if head_dim % GQA_HEAD_MULTIPLE:
        # onnxruntime's CPU GroupQueryAttention refuses at run time a head size that is not a
        # multiple of 8, and with its fused rotary (do_rotary, which the graph uses) of 16
        # (tried from 2 to 512 on onnxruntime 1.32: tests/adversarial/test_gguf_graph.py)
        raise ValidationError(
            f"gguf.kv['{arch}.embedding_length']",
            f"head size {head_dim} (embedding_length {n_embd} / head_count {n_heads}) is not a multiple of "
            f"{GQA_HEAD_MULTIPLE}: onnxruntime's GroupQueryAttention with rotary embedding cannot run it",
            code="unsupported_architecture",
        )
    if metadata.get(f"{arch}.attention.sliding_window"):
        raise ValidationError(
            f"gguf.kv['{arch}.attention.sliding_window']",
            "sliding-window attention is not built (GroupQueryAttention's local_window_size is not wired)",
            code="unsupported_architecture",
        )
    scaling = metadata.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", "linear"):
        raise ValidationError(
            f"gguf.kv['{arch}.rope.scaling.type']",
            f"rope scaling {scaling!r} is not built (none and linear are)",
            code="unsupported_architecture",
        )
    factor = float(key("rope.scaling.factor", 1.0, float)) if scaling == "linear" else 1.0
    tied = "output.weight" not in tensors
    vocab = tensors.get("token_embd.weight", (None, (0, 0)))[1][0]
    context = checked_context_length(metadata, arch)
    table_bytes = context * head_dim * 4  # cos and sin: head_dim / 2 float32 each per position
    if table_bytes > MAX_ROPE_TABLE_BYTES:  # folded when the session is created
        raise limit_exceeded(
            f"gguf.kv['{arch}.context_length']",
            f"{context} positions x head size {head_dim}: the rotary cos/sin tables would take {table_bytes} "
            f"bytes, over the limit of {MAX_ROPE_TABLE_BYTES}",
            table_bytes,
            MAX_ROPE_TABLE_BYTES,
        )
    params = Hyperparameters(
        architecture=arch,
        n_layers=n_layers,
        n_embd=n_embd,
        n_ff=n_ff,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        n_vocab=vocab,
        context_length=context,
        rms_eps=float(key("attention.layer_norm_rms_epsilon", kind=float)),
        freq_base=float(key("rope.freq_base", 10000.0, float)),
        freq_scale=1.0 / factor,
        neox=neox,
        biases=biases,
        tied=tied,
        rope_freqs="rope_freqs.weight" in tensors,
    )
    _check_tensors(params, tensors)
    _check_vocabulary(metadata, vocab)
    return params


def _check_vocabulary(metadata: Mapping[str, object], n_vocab: int) -> None:
    # llama.cpp sizes token_embd and output from the tokenizer's token count and refuses a file
    # whose tensors disagree; a shorter vocabulary would let the sampler pick an id with no token.
    tokens = metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list) and len(tokens) != n_vocab:
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.tokens']",
            f"{len(tokens)} tokens, but token_embd.weight (and the output head) have {n_vocab} rows",
            expected=n_vocab,
            actual=len(tokens),
        )


def expected_shapes(p: Hyperparameters) -> dict[str, tuple[int, ...]]:
    """Tensor name -> numpy shape, for every tensor the graph reads."""
    q, kv = p.n_heads * p.head_dim, p.n_kv_heads * p.head_dim
    layer = {
        "attn_norm": (p.n_embd,),
        "attn_q": (q, p.n_embd),
        "attn_k": (kv, p.n_embd),
        "attn_v": (kv, p.n_embd),
        "attn_output": (p.n_embd, q),
        "ffn_norm": (p.n_embd,),
        "ffn_gate": (p.n_ff, p.n_embd),
        "ffn_up": (p.n_ff, p.n_embd),
        "ffn_down": (p.n_embd, p.n_ff),
    }
    shapes = {"token_embd.weight": (p.n_vocab, p.n_embd), "output_norm.weight": (p.n_embd,)}
    if not p.tied:
        shapes["output.weight"] = (p.n_vocab, p.n_embd)
    if p.rope_freqs:
        shapes["rope_freqs.weight"] = (p.head_dim // 2,)
    for i in range(p.n_layers):
        shapes.update({f"blk.{i}.{name}.weight": shape for name, shape in layer.items()})
        if p.biases:
            shapes.update({f"blk.{i}.{name}.bias": (layer[name][0],) for name in BIASES})
    return shapes


def _check_tensors(p: Hyperparameters, tensors: Tensors) -> None:
    expected = expected_shapes(p)
    for name, shape in expected.items():
        where = f"gguf.tensors[{name!r}]"
        if name not in tensors:
            raise ValidationError(where, "missing: the decoder graph reads it", code="missing_tensor")
        actual = tuple(tensors[name][1])
        if actual != shape:
            raise ValidationError(where, f"has shape {list(actual)}; the metadata makes it {list(shape)}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        layer = re.match(r"blk\.\d+\.(.*)", extra[0])
        what = layer.group(1) if layer else extra[0]
        raise ValidationError(
            f"gguf.tensors[{extra[0]!r}]",
            f"the decoder graph has no use for {what!r} ({len(extra)} unused tensor(s)): a feature of "
            f"{p.architecture} it does not build",
            code="unsupported_architecture",
        )


def rope_inverse_frequencies(p: Hyperparameters) -> np.ndarray:
    """``freq_scale * freq_base^(-2i/d)`` for each pair ``i`` (float64, rounded once to float32)."""
    exponents = np.arange(0, p.head_dim, 2, dtype=np.float64) / p.head_dim
    return (p.freq_scale * p.freq_base**-exponents).astype(np.float32)


# ------------------------------------------------------------------------------------ the graph


class _Builder:
    """Nodes and initializers of one graph, with unique names per call site."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def op(self, op_type: str, inputs: list[str], name: str, outputs: int = 1, domain: str = "", **attrs) -> list[str]:
        names = [name] if outputs == 1 else [f"{name}/{k}" for k in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=name, domain=domain, **attrs))
        return names

    def one(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        return self.op(op_type, inputs, name, **attrs)[0]

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def rms_norm(self, x: str, weight: str, name: str, eps: str) -> str:
        # ggml_rms_norm then the weight: x / sqrt(mean(x^2) + eps) * w, in the pattern onnxruntime
        # fuses into SimplifiedLayerNormalization.
        square = self.one("Pow", [x, "const/two"], f"{name}/pow")
        mean = self.one("ReduceMean", [square, "const/last_axis"], f"{name}/mean", keepdims=1)
        root = self.one("Sqrt", [self.one("Add", [mean, eps], f"{name}/add_eps")], f"{name}/sqrt")
        return self.one("Mul", [self.one("Div", [x, root], f"{name}/div"), weight], f"{name}/scale")

    def linear(self, x: str, weight: str, name: str, bias: str | None = None) -> str:
        # MatMul(x, Transpose(W)) with W [out, in] as GGUF stores it: lowering turns this pattern
        # into MatMulNBits on the GGUF codes (docs/execution.md).
        product = self.one("MatMul", [x, self.one("Transpose", [weight], f"{name}/wt", perm=[1, 0])], name)
        return self.one("Add", [product, bias], f"{name}/bias") if bias else product


def add_decoder_graph(model: onnx.ModelProto, tensors: Tensors) -> onnx.ModelProto:
    """Give ``model`` (converted from a GGUF file, no nodes yet) the decoder graph of its architecture.

    Args:
        model: the converted model; its ``metadata_props`` hold the GGUF metadata and its struct
            values the GGUF tensors, named as in the file. Changed in place.
        tensors: tensor name -> (GGML type name, numpy shape) for every tensor of the file.

    Returns:
        ``model``, with the graph's nodes, inputs, outputs and the ``com.microsoft`` opset import.

    Raises:
        ValidationError: see :func:`hyperparameters`.
    """
    p = hyperparameters(decode_metadata(model), tensors)
    b = _Builder()
    b.const("const/two", np.array(2.0, np.float32))
    b.const("const/last_axis", np.array([-1], np.int64))
    eps = b.const("const/rms_eps", np.array(p.rms_eps, np.float32))
    b.const("const/one", np.array(1, np.int64))
    b.const("const/axis1", np.array([1], np.int64))

    # GroupQueryAttention's lengths: seqlens_k = attended positions - 1 per row, total = mask width.
    mask_sum = b.one("ReduceSum", ["attention_mask", "const/axis1"], "mask/sum", keepdims=0)
    seqlens = b.one(
        "Cast", [b.one("Sub", [mask_sum, "const/one"], "mask/last")], "mask/seqlens_k", to=TensorProto.INT32
    )
    width = b.one("Gather", [b.one("Shape", ["attention_mask"], "mask/shape"), "const/one"], "mask/width", axis=0)
    total = b.one("Cast", [width], "mask/total", to=TensorProto.INT32)
    cos, sin = _rope_tables(b, p)

    hidden = b.one("Gather", ["token_embd.weight", "input_ids"], "embed", axis=0)
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", p.n_vocab])]
    cache = ["batch", p.n_kv_heads, "past", p.head_dim]
    present = ["batch", p.n_kv_heads, "present", p.head_dim]
    for i in range(p.n_layers):
        w = f"blk.{i}."
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, cache) for n in (past_k, past_v)]
        out_k, out_v = f"present.{i}.key", f"present.{i}.value"
        outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, present) for n in (out_k, out_v)]

        x = b.rms_norm(hidden, f"{w}attn_norm.weight", f"{w}attn_norm", eps)
        q, k, v = (
            b.linear(x, f"{w}{n}.weight", f"{w}{n}", f"{w}{n}.bias" if p.biases else None)
            for n in ("attn_q", "attn_k", "attn_v")
        )
        attn = f"{w}attn"
        b.nodes.append(
            helper.make_node(
                "GroupQueryAttention",
                [q, k, v, past_k, past_v, seqlens, total, cos, sin],
                [attn, out_k, out_v],
                name=attn,
                domain=MS_DOMAIN,
                num_heads=p.n_heads,
                kv_num_heads=p.n_kv_heads,
                do_rotary=1,
                rotary_interleaved=0 if p.neox else 1,
                scale=1.0 / math.sqrt(p.head_dim),
            )
        )
        hidden = b.one("Add", [hidden, b.linear(attn, f"{w}attn_output.weight", f"{w}attn_output")], f"{w}attn_res")
        x = b.rms_norm(hidden, f"{w}ffn_norm.weight", f"{w}ffn_norm", eps)
        gate = b.linear(x, f"{w}ffn_gate.weight", f"{w}ffn_gate")
        silu = b.one("Mul", [gate, b.one("Sigmoid", [gate], f"{w}ffn_sigmoid")], f"{w}ffn_silu")
        up = b.one("Mul", [silu, b.linear(x, f"{w}ffn_up.weight", f"{w}ffn_up")], f"{w}ffn_swiglu")
        hidden = b.one("Add", [hidden, b.linear(up, f"{w}ffn_down.weight", f"{w}ffn_down")], f"{w}ffn_res")

    x = b.rms_norm(hidden, "output_norm.weight", "output_norm", eps)
    head = "token_embd.weight" if p.tied else "output.weight"
    b.nodes.append(helper.make_node("Identity", [b.linear(x, head, "output")], ["logits"], name="logits"))

    graph = model.graph
    graph.node.extend(b.nodes)
    graph.initializer.extend(b.initializers)
    graph.input.extend(inputs)
    graph.output.extend(outputs)
    model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    model.doc_string = (
        f"{p.architecture} decoder, {p.n_layers} layers, built from the GGUF file's metadata; "
        "the weights are the GGUF tensors' bytes"
    )
    return model


def _rope_tables(b: _Builder, p: Hyperparameters) -> tuple[str, str]:
    """cos/sin [context_length, head_dim / 2] of ``position * inverse frequency`` (constant inputs
    only, so onnxruntime folds them at session creation)."""
    inverse = b.const("rope/inverse_frequencies", rope_inverse_frequencies(p))
    if p.rope_freqs:  # Llama 3.1-style scaling: each pair's angle divided by its factor
        inverse = b.one("Div", [inverse, "rope_freqs.weight"], "rope/scaled_frequencies")
    b.const("rope/zero", np.array(0.0, np.float32))
    b.const("rope/length", np.array(float(p.context_length), np.float32))
    b.const("rope/step", np.array(1.0, np.float32))
    positions = b.one("Range", ["rope/zero", "rope/length", "rope/step"], "rope/positions")
    column = b.one("Unsqueeze", [positions, "const/axis1"], "rope/column")
    angles = b.one("Mul", [column, inverse], "rope/angles")
    return b.one("Cos", [angles], "rope/cos"), b.one("Sin", [angles], "rope/sin")
