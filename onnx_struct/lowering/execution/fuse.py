"""Sibling products fused: the ``MatMulNBits`` nodes that multiply one input, as one node and a Split.

A decoder layer multiplies its normed input by three weights (query, key, value) and its MLP
input by two (gate, up). Each product is a node onnxruntime schedules on its own, with a
per-block minimum adding two more (``MatMul`` over the block sums, ``Sum``); on a small model a
token is ~1,500 such nodes and the time between them is a quarter of the token's. Rule: products
of one input ``A`` with the same ``K``, ``bits``, ``block_size`` and ``accuracy_level``, their
weights in the arrays handed to onnxruntime (each read by that node alone), and all with or all
without a minimum over the same block sums, become one ``MatMulNBits`` whose weight is theirs
stacked along ``N`` (``B`` and ``scales`` concatenated in row order, the minimums along their
columns), then one ``Split`` along the last axis into the names the products had. Each output
column is the same dot product over ``K`` as before, so the values are those of the separate
nodes (docs/execution.md, "Sibling products"). A group is fused in runs of at most
:data:`FUSED_MAX_BYTES`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import onnx
from onnx import helper

from onnx_struct.lowering.execution.emit import MS_DOMAIN, in_memory_placeholder

# onnxruntime prepacks a weight whole while its source is resident: a fused weight adds its size
# to the session's peak where separate ones added the largest of them. The time saved is the time
# between nodes (a few microseconds each), which stops mattering once a product reads a few MiB;
# SmolLM2-135M's groups are 0.3 and 0.9 MiB, a 1.1B llama's query / key / value 2.6 MiB.
FUSED_MAX_BYTES = 4 << 20


@dataclasses.dataclass
class _Minimum:
    matmul: int  # the MatMul over the block sums (node index)
    total: int  # the Sum of the product and that MatMul (node index)
    block_sums: str
    array: str  # the minimum [K/bs, N]


@dataclasses.dataclass
class _Product:
    index: int  # the MatMulNBits node
    n: int
    weights: tuple[str, ...]  # B, scales and zero points (if any): [N, ...] arrays, stacked along N
    output: str  # the name the product's value has (the Sum's output with a minimum)
    minimum: _Minimum | None = None

    @property
    def nodes(self) -> tuple[int, ...]:
        return (self.index, self.minimum.matmul, self.minimum.total) if self.minimum else (self.index,)

    @property
    def arrays(self) -> tuple[str, ...]:
        return (*self.weights, self.minimum.array) if self.minimum else self.weights


def fuse_sibling_products(
    nodes: list, initializers: list[onnx.TensorProto], arrays: dict[str, np.ndarray], fresh, graph_outputs: list[str]
) -> list:
    """``nodes`` (a graph's, in order) with their sibling ``MatMulNBits`` products fused: the
    placeholders in ``initializers`` and the arrays in ``arrays`` replaced in place, new names
    from ``fresh``."""
    reads = Counter(name for node in nodes for name in node.input)
    reads.update(graph_outputs)
    producer = {name: j for j, node in enumerate(nodes) for name in node.output}
    reader = {}  # name -> the first node reading it
    for j, node in enumerate(nodes):
        for name in node.input:
            reader.setdefault(name, j)
    groups: dict[tuple, list[_Product]] = {}
    for j, node in enumerate(nodes):
        product = _product(j, node, nodes, reads, producer, reader, arrays)
        if product is not None:
            block_sums = product.minimum.block_sums if product.minimum else None
            key = (node.input[0], len(node.input), _shared_attributes(node), block_sums)
            groups.setdefault(key, []).append(product)
    replaced: dict[int, list] = {}  # node index -> the fused nodes taking its place
    removed: set[int] = set()
    gone: set[str] = set()  # the separate products' arrays
    for products in (chunk for group in groups.values() for chunk in _chunks(group, arrays)):
        if len(products) < 2:
            continue
        gone.update(name for p in products for name in p.arrays)
        fused_nodes, tensors = _fuse(nodes, products, arrays, fresh)
        initializers += tensors
        # At the first product's last node: its input and block sums are defined before it, and
        # every product's value is read only after that product's own last node.
        replaced[min(p.nodes[-1] for p in products)] = fused_nodes
        removed.update(j for p in products for j in p.nodes)
    initializers[:] = [t for t in initializers if t.name not in gone]
    out = []
    for j, node in enumerate(nodes):
        out.extend(replaced.get(j, []))
        if j not in removed:
            out.append(node)
    return out


def _chunks(products: list[_Product], arrays) -> list[list[_Product]]:
    """``products`` in runs of consecutive ones whose weights (with their minimums) stay within
    :data:`FUSED_MAX_BYTES`."""
    chunks, size = [[]], 0
    for p in products:
        nbytes = sum(arrays[name].nbytes for name in p.arrays)
        if chunks[-1] and size + nbytes > FUSED_MAX_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(p)
        size += nbytes
    return chunks


def _attributes(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _shared_attributes(node) -> tuple:
    """The attributes siblings share: all but ``N``."""
    return tuple(sorted((k, v) for k, v in _attributes(node).items() if k != "N"))


def _in_memory(name: str, arrays, reads) -> bool:
    return name in arrays and reads[name] == 1


def _product(j, node, nodes, reads, producer, reader, arrays) -> _Product | None:
    """The fusable product ``nodes[j]`` computes, or None."""
    if node.op_type != "MatMulNBits" or node.domain != MS_DOMAIN or len(node.input) not in (3, 4):
        return None
    weights = tuple(node.input[1:])  # no g_idx or bias: a fourth input is the zero points
    if not all(_in_memory(name, arrays, reads) for name in weights):
        return None
    output = node.output[0]
    plain = _Product(j, _attributes(node)["N"], weights, output)
    # A minimum: the output feeds only Sum(output, MatMul(block sums, minimum)), the MatMul only it.
    if reads[output] != 1 or output not in reader:  # read twice, or a graph output
        return plain
    total = nodes[reader[output]]
    if total.op_type != "Sum" or total.domain not in ("", "ai.onnx") or list(total.input[:1]) != [output]:
        return plain
    if len(total.input) != 2 or total.input[1] not in producer or reads[total.input[1]] != 1:
        return plain
    m = producer[total.input[1]]
    matmul = nodes[m]
    if (
        matmul.op_type != "MatMul"
        or matmul.domain not in ("", "ai.onnx")
        or not _in_memory(matmul.input[1], arrays, reads)
    ):
        return plain
    minimum = _Minimum(m, reader[output], matmul.input[0], matmul.input[1])
    return dataclasses.replace(plain, output=total.output[0], minimum=minimum)


def _fuse(nodes, products: list[_Product], arrays, fresh) -> tuple[list, list[onnx.TensorProto]]:
    """The nodes and placeholders of ``products`` fused (their arrays replaced in ``arrays``)."""
    first = nodes[products[0].index]
    x = first.input[0]
    base = fresh(f"{x}::fused")

    def placeholder(name: str, parts: list[str], axis: int) -> onnx.TensorProto:
        # Filled part by part, each separate array dropped once copied: the group is never held
        # twice (a model whose every weight multiplies one x is one group).
        head = arrays[parts[0]]
        shape = list(head.shape)
        shape[axis] = sum(arrays[part].shape[axis] for part in parts)
        array = np.empty(shape, head.dtype)
        start = 0
        for part in parts:
            piece = arrays.pop(part)
            index = [slice(None)] * len(shape)
            index[axis] = slice(start, start + piece.shape[axis])
            array[tuple(index)] = piece
            start += piece.shape[axis]
            del piece
        arrays[name] = array
        data_type = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        return in_memory_placeholder(name, data_type, list(array.shape), array.nbytes)

    n = sum(p.n for p in products)
    weights = [fresh(f"{base}::{part}") for part in ("codes", "scale", "zero_point")[: len(products[0].weights)]]
    tensors = [placeholder(name, [p.weights[i] for p in products], 0) for i, name in enumerate(weights)]
    attrs = {**_attributes(first), "N": n}
    product = fresh(f"{base}::product")
    fused = [helper.make_node("MatMulNBits", [x, *weights], [product], name=product, domain=MS_DOMAIN, **attrs)]
    if products[0].minimum:
        minimum = fresh(f"{base}::minimum")
        tensors.append(placeholder(minimum, [p.minimum.array for p in products], 1))
        correction, total = fresh(f"{base}::correction"), fresh(f"{base}::sum")
        fused += [
            helper.make_node("MatMul", [products[0].minimum.block_sums, minimum], [correction], name=correction),
            helper.make_node("Sum", [product, correction], [total], name=total),
        ]
        product = total
    sizes = fresh(f"{base}::sizes")
    tensors.append(onnx.numpy_helper.from_array(np.array([p.n for p in products], np.int64), sizes))
    fused.append(
        helper.make_node("Split", [product, sizes], [p.output for p in products], name=fresh(f"{base}::split"), axis=-1)
    )
    return fused, tensors


__all__ = ["fuse_sibling_products"]
