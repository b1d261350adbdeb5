"""The decoder graph of a GGUF file: ``add_decoder_graph(model, tensors)`` builds the computation
llama.cpp runs for the file's ``general.architecture`` from the family's :class:`Block`
(families/): embedding, per layer attention through GroupQueryAttention with the KV cache and the
gated MLP, each with the norms, scales and softcaps the family states, then the output head.
I/O names follow onnxruntime-genai (``input_ids``, ``attention_mask``,
``past_key_values.{i}.key``, ``logits``, ``present.{i}.key``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_struct.errors import ValidationError
from onnx_struct.formats.gguf.metadata import decode_metadata, value_kind
from onnx_struct.llm.graph.blocks import MS_DOMAIN, GraphBuilder
from onnx_struct.llm.graph.families import FAMILIES, nearest_supported
from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import Block, Hyperparameters, Tensors, check_rope_tables, read_hyperparameters
from onnx_struct.llm.graph.tensors import check_tensors, expected_shapes, has_head, uses_fused_qkv


@dataclasses.dataclass(frozen=True)
class DecoderPlan:
    """Everything the graph is built from: the shared hyperparameters and the family's block."""

    hp: Hyperparameters
    block: Block
    tensors: Tensors

    # The names the rest of the package and the tests read.
    def __getattr__(self, name: str):
        return getattr(self.hp, name)

    @property
    def tied(self) -> bool:
        return not has_head(self.block, self.tensors)

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        return expected_shapes(self.hp, self.block, self.tensors)


def plan_decoder(metadata: Mapping[str, object], tensors: Tensors) -> DecoderPlan:
    """The decoder's shape and its family's block, checked against the tensors.

    Raises:
        ValidationError: the architecture has no module (the message names the nearest supported
            one) or is a mixture of experts, a key the graph needs is missing or out of range, a
            tensor is missing or has the wrong shape, or the file holds a tensor the graph would
            not use; the path names the key (``gguf.kv['llama.block_count']``) or the tensor
            (``gguf.tensors['blk.0.attn_q.weight']``).
    """
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or arch not in FAMILIES:
        raise ValidationError(
            "gguf.kv['general.architecture']",
            f"architecture {arch!r} has no decoder graph{nearest_supported(arch)}; "
            f"supported: {', '.join(sorted(FAMILIES))}",
            code="unsupported_architecture",
        )
    hp = read_hyperparameters(metadata, tensors, arch)
    keys = Keys(metadata, arch)
    block = FAMILIES[arch](keys, hp, tensors)
    check_rope_tables(keys, hp, block)
    check_tensors(hp, block, tensors)
    _check_vocabulary(metadata, hp.n_vocab)
    return DecoderPlan(hp, block, tensors)


def _build_for_context(model: onnx.ModelProto, metadata: dict[str, object], context_length: int) -> None:
    """Set ``{arch}.context_length`` to ``context_length`` in ``metadata`` and the model's props."""
    if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length <= 0:
        raise ValidationError("convert(context_length)", f"must be a positive integer, not {context_length!r}")
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or arch not in FAMILIES:
        return  # plan_decoder refuses the architecture, naming the nearest supported one
    key = f"{arch}.context_length"
    trained = metadata.get(key)
    # The file's own key must be sound (as without a context size; only MAX_CONTEXT_LENGTH is left
    # to the context built): a missing or non-integer one is not replaced by context_length.
    if trained is None:
        raise ValidationError(f"gguf.kv[{key!r}]", "missing: the decoder graph needs it", code="missing_metadata")
    if isinstance(trained, bool) or not isinstance(trained, int) or trained <= 0:
        raise ValidationError(
            f"gguf.kv[{key!r}]", f"must be a positive integer, not {trained!r} ({value_kind(trained)})"
        )
    if context_length > trained:
        raise ValidationError(
            "convert(context_length)", f"{context_length} positions exceed the file's {key} of {trained}"
        )
    metadata[key] = context_length
    for prop in model.metadata_props:
        if prop.key == key:
            prop.value = str(context_length)


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


def add_decoder_graph(
    model: onnx.ModelProto, tensors: Tensors, context_length: int | None = None, *, all_logits: bool = False
) -> onnx.ModelProto:
    """Give ``model`` (converted from a GGUF file, no nodes yet) the decoder graph of its architecture.

    Args:
        model: the converted model; its ``metadata_props`` hold the GGUF metadata and its struct
            values the GGUF tensors, named as in the file. Changed in place.
        tensors: tensor name -> (GGML type name, numpy shape) for every tensor of the file.
        context_length: the positions to build for (at most the file's ``{arch}.context_length``,
            which the model's metadata then says instead); None: the file's.
        all_logits: ``logits`` for every position of ``input_ids`` (``[batch, seq, n_vocab]``, as
            for a perplexity); by default only for the last one (``[batch, 1, n_vocab]``), all
            generation reads: the head runs on one position and a prompt of n tokens does not
            hold n rows of logits (docs/llm.md, "Logits").

    Returns:
        ``model``, with the graph's nodes, inputs, outputs and the ``com.microsoft`` opset import.

    Raises:
        ValidationError: see :func:`plan_decoder`; ``context_length`` is not a positive integer
            up to the file's.
    """
    metadata = decode_metadata(model)
    if context_length is not None:
        _build_for_context(model, metadata, context_length)
    plan = plan_decoder(metadata, tensors)
    hp, block = plan.hp, plan.block
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=1)
    b = GraphBuilder(opset)

    # GroupQueryAttention's lengths: seqlens_k = attended positions - 1 per row, total = mask width.
    mask_sum = b.one("ReduceSum", ["attention_mask", b.ints(1)], "mask/sum", keepdims=0)
    one = b.const("const/one", np.array(1, np.int64))
    seqlens = b.one("Cast", [b.one("Sub", [mask_sum, one], "mask/last")], "mask/seqlens_k", to=TensorProto.INT32)
    width = b.one("Gather", [b.one("Shape", ["attention_mask"], "mask/shape"), one], "mask/width", axis=0)
    total = b.one("Cast", [width], "mask/total", to=TensorProto.INT32)

    hidden = b.one("Gather", ["token_embd.weight", "input_ids"], "embed", axis=0)
    hidden = b.mul(hidden, block.embedding_scale, "embed/scale")
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
    ]
    positions = "seq" if all_logits else 1
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", positions, hp.n_vocab])]
    past_shape = ["batch", hp.n_kv_heads, "past", hp.head_dim]
    present_shape = ["batch", hp.n_kv_heads, "present", hp.head_dim]
    fused_qkv = uses_fused_qkv(block, tensors)
    shapes = plan.expected_shapes()
    for i, layer in enumerate(block.layers):
        w = f"blk.{i}."

        def bias(name: str, w: str = w) -> str | None:  # the optional biases the file has
            full = f"{w}{name}.bias"
            return full if full in shapes else None

        cache = (f"past_key_values.{i}.key", f"past_key_values.{i}.value", f"present.{i}.key", f"present.{i}.value")
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, past_shape) for n in cache[:2]]
        outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, present_shape) for n in cache[2:]]

        x = b.rms_norm(hidden, f"{w}attn_norm.weight", f"{w}attn_norm", hp.rms_eps) if block.attn_pre_norm else hidden
        if fused_qkv:
            packed = b.linear(x, f"{w}attn_qkv.weight", f"{w}attn_qkv", bias("attn_qkv"))
            q, k, v = b.split(packed, [hp.q_width, hp.kv_width, hp.kv_width], f"{w}attn_qkv/split")
        else:
            q, k, v = (b.linear(x, f"{w}{n}.weight", f"{w}{n}", bias(n)) for n in ("attn_q", "attn_k", "attn_v"))
        if block.qk_norm == "head":
            q = b.head_norm(q, f"{w}attn_q_norm.weight", f"{w}attn_q_norm", hp.rms_eps, hp.head_dim)
            k = b.head_norm(k, f"{w}attn_k_norm.weight", f"{w}attn_k_norm", hp.rms_eps, hp.head_dim)
        elif block.qk_norm == "full":
            q = b.rms_norm(q, f"{w}attn_q_norm.weight", f"{w}attn_q_norm", hp.rms_eps)
            k = b.rms_norm(k, f"{w}attn_k_norm.weight", f"{w}attn_k_norm", hp.rms_eps)
        attn = b.attention(
            hp, layer, (q, k, v), cache, (seqlens, total), f"{w}attn", block.attention_scale, block.attn_softcap
        )
        out = b.linear(attn, f"{w}attn_output.weight", f"{w}attn_output", bias("attn_output"))
        if block.attn_post_norm:
            out = b.rms_norm(out, f"{w}post_attention_norm.weight", f"{w}post_attention_norm", hp.rms_eps)
        hidden = b.one("Add", [hidden, b.mul(out, block.residual_scale, f"{w}attn_out_scale")], f"{w}attn_res")

        x = b.rms_norm(hidden, f"{w}ffn_norm.weight", f"{w}ffn_norm", hp.rms_eps) if block.ffn_pre_norm else hidden
        if block.fused_gate_up:
            packed = b.linear(x, f"{w}ffn_up.weight", f"{w}ffn_up", bias("ffn_up"))
            gate, up = b.split(packed, [hp.n_ff, hp.n_ff], f"{w}ffn_up/split")
        else:
            gate = b.linear(x, f"{w}ffn_gate.weight", f"{w}ffn_gate", bias("ffn_gate"))
            up = b.linear(x, f"{w}ffn_up.weight", f"{w}ffn_up", bias("ffn_up"))
        gated = b.one("Mul", [b.activation(gate, block.activation, f"{w}ffn_act"), up], f"{w}ffn_gated")
        out = b.linear(gated, f"{w}ffn_down.weight", f"{w}ffn_down", bias("ffn_down"))
        if block.ffn_post_norm:
            out = b.rms_norm(out, f"{w}post_ffw_norm.weight", f"{w}post_ffw_norm", hp.rms_eps)
        hidden = b.one("Add", [hidden, b.mul(out, block.residual_scale, f"{w}ffn_out_scale")], f"{w}ffn_res")

    if not all_logits:  # the last position only: [batch, 1, n_embd] (indices [-1] keep the axis)
        hidden = b.one("Gather", [hidden, b.const("const/last", np.array([-1], np.int64))], "output/last", axis=1)
    x = b.rms_norm(hidden, "output_norm.weight", "output_norm", hp.rms_eps)
    logits = b.linear(x, "output.weight" if not plan.tied else "token_embd.weight", "output")
    if block.logit_scale is not None:
        logits = b.one("Div", [logits, b.scalar(block.logit_scale)], "output/logit_scale")
    logits = b.softcap(logits, block.final_softcap, "output/softcap")
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="logits"))

    graph = model.graph
    graph.node.extend(b.nodes)
    graph.initializer.extend(b.initializers)
    graph.input.extend(inputs)
    graph.output.extend(outputs)
    # The rank of what the weights multiply, so that lowering's blocksums reshape to constants.
    graph.value_info.extend(
        helper.make_tensor_value_info(x, TensorProto.FLOAT, [None, None, None]) for x in sorted(b.activations)
    )
    model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    model.doc_string = (
        f"{hp.architecture} decoder, {hp.n_layers} layers, built from the GGUF file's metadata; "
        "the weights are the GGUF tensors' bytes"
    )
    return model
