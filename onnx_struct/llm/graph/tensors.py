"""The tensors a family's graph reads, by name and numpy shape, checked against the file's: a
missing one, a wrong shape, or one the graph would not use (a feature it does not build) is a
ValidationError naming the tensor, ``gguf.tensors['blk.0.attn_q.weight']``."""

from __future__ import annotations

import re

from onnx_struct.errors import ValidationError
from onnx_struct.llm.graph.spec import Block, Hyperparameters, Tensors


def uses_fused_qkv(block: Block, tensors: Tensors) -> bool:
    return block.fused_qkv == "always" or (block.fused_qkv == "optional" and "blk.0.attn_qkv.weight" in tensors)


def has_head(block: Block, tensors: Tensors) -> bool:
    """An output.weight of its own (else the head is token_embd)."""
    return block.head == "required" or (block.head == "optional" and "output.weight" in tensors)


def expected_shapes(hp: Hyperparameters, block: Block, tensors: Tensors) -> dict[str, tuple[int, ...]]:
    """Tensor name -> numpy shape, for every tensor the graph reads (``tensors``, the file's,
    decides the optional ones: biases, a fused qkv where both forms are allowed, an untied head)."""
    e, q, kv, ff = hp.n_embd, hp.q_width, hp.kv_width, hp.n_ff
    if uses_fused_qkv(block, tensors):
        layer: dict[str, tuple[int, ...]] = {"attn_qkv": (q + 2 * kv, e)}
    else:
        layer = {"attn_q": (q, e), "attn_k": (kv, e), "attn_v": (kv, e)}
    layer["attn_output"] = (e, q)
    if block.fused_gate_up:
        layer["ffn_up"] = (2 * ff, e)
    else:
        layer.update({"ffn_gate": (ff, e), "ffn_up": (ff, e)})
    layer["ffn_down"] = (e, ff)
    weights = {f"{name}.weight": shape for name, shape in layer.items()}
    norms = {
        "attn_norm": block.attn_pre_norm,
        "post_attention_norm": block.attn_post_norm,
        "ffn_norm": block.ffn_pre_norm,
        "post_ffw_norm": block.ffn_post_norm,
    }
    weights.update({f"{name}.weight": (e,) for name, used in norms.items() if used})
    if block.qk_norm == "head":
        weights.update({"attn_q_norm.weight": (hp.head_dim,), "attn_k_norm.weight": (hp.head_dim,)})
    elif block.qk_norm == "full":
        weights.update({"attn_q_norm.weight": (q,), "attn_k_norm.weight": (kv,)})

    shapes = {"token_embd.weight": (hp.n_vocab, e), "output_norm.weight": (e,)}
    if has_head(block, tensors):
        shapes["output.weight"] = (hp.n_vocab, e)
    for rope in {layer.rope for layer in block.layers if layer.rope is not None and layer.rope.factors}:
        shapes[rope.factors] = ((rope.dims or hp.head_dim) // 2,)
    for i in range(hp.n_layers):
        shapes.update({f"blk.{i}.{name}": shape for name, shape in weights.items()})
        for name in block.biases | block.required_biases:
            bias = f"blk.{i}.{name}.bias"
            if f"{name}.weight" not in weights:  # attn_q's bias where the layer reads a fused attn_qkv: unused
                continue
            if name in block.required_biases or bias in tensors:
                shapes[bias] = (weights[f"{name}.weight"][0],)
    return shapes


def check_tensors(hp: Hyperparameters, block: Block, tensors: Tensors) -> None:
    """Raises ValidationError: see the module docstring."""
    expected = expected_shapes(hp, block, tensors)
    for name, shape in expected.items():
        where = f"gguf.tensors[{name!r}]"
        if name not in tensors:
            raise ValidationError(where, "missing: the decoder graph reads it", code="missing_tensor")
        actual = tuple(tensors[name][1])
        if actual != shape:
            raise ValidationError(where, f"has shape {list(actual)}; the metadata makes it {list(shape)}")
    extra = sorted(set(tensors) - set(expected) - block.unread)
    if extra:
        layer = re.match(r"blk\.\d+\.(.*)", extra[0])
        what = layer.group(1) if layer else extra[0]
        raise ValidationError(
            f"gguf.tensors[{extra[0]!r}]",
            f"the decoder graph has no use for {what!r} ({len(extra)} unused tensor(s)): a feature of "
            f"{hp.architecture} it does not build",
            code="unsupported_architecture",
        )
