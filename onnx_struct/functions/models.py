"""Decoders and encoders in plain ONNX terms: function models, and leaves as ONNX tensors.

A decoder (or encoder) runs as a tiny *function model*: the function registered as a model-local
function (under :data:`PRIVATE_DOMAIN` when its own domain is the default one), its inputs as graph
inputs or initializers, one call node. Sub-byte leaves travel in ONNX's packed form (several
elements per byte, LSB first), which for byte-aligned dense rows of a payload is the payload's own
layout (:func:`packed_rows`).

Nothing here imports onnxruntime: :mod:`onnx_struct.runtime` runs these models, and
:mod:`onnx_struct.lower` and :mod:`onnx_struct.check.inference` build on them without a session.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_struct.functions.structure import STANDARD_DOMAINS
from onnx_struct.layout.bits import byte_strided, merged_dims
from onnx_struct.layout.leaves import Leaf

# A decoder/encoder whose domain is "" would shadow standard operators once registered as a
# model-local function, so it is registered under this domain instead.
PRIVATE_DOMAIN = "onnx_struct.local"
# Element types stored packed (several per byte) in onnxruntime tensors and TensorProto.raw_data.
PACKED_TYPES = frozenset(
    t for t in (getattr(TensorProto, n, None) for n in ("INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1")) if t
)


# ---------------------------------------------------------------------- leaves as ONNX tensors
def signature_digest(
    function: onnx.FunctionProto,
    inputs: Sequence[tuple[str, onnx.TypeProto]],
    initializers: Sequence[TensorProto],
    *labels: str,
) -> bytes:
    """A digest of ``function`` bound to ``inputs`` (name, type) and ``initializers``, and of
    ``labels``: the key of the caches of analyses and runners. Every piece goes in after its
    length, so no two different signatures give one byte stream (with bare concatenation a decoder
    with a trailing unknown field and a constant without those bytes would hash alike, and one
    declaration would take another's analysis)."""
    digest = hashlib.blake2b(digest_size=32)

    def piece(data: bytes) -> None:
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)

    def text(name: str | bytes) -> None:  # a name that is not UTF-8 comes as bytes
        piece(b"b" + name if isinstance(name, bytes) else b"s" + name.encode("utf-8", "surrogatepass"))

    for label in labels:
        text(label)
    piece(function.SerializeToString(deterministic=True))
    piece(len(inputs).to_bytes(8, "little"))
    for name, type_proto in inputs:
        text(name)
        piece(type_proto.SerializeToString(deterministic=True))
    for tensor in initializers:
        piece(tensor.SerializeToString(deterministic=True))
    return digest.digest()


def contiguous(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``array`` (the array itself if it already is).

    Leaves of arrays of blocks are strided views with contiguous rows (``qs: [n, 16]`` at a stride
    of 18 bytes); numpy copies such rows element by element, but copies them as single void items
    of the row's size several times faster (docs/benchmarks.md).
    """
    if array.flags.c_contiguous:
        return array
    if array.ndim >= 2 and array.strides[-1] == array.itemsize and array.shape[-1] > 1 and array.size:
        rows = array.view(np.dtype((np.void, array.shape[-1] * array.itemsize)))
        return np.ascontiguousarray(rows).view(array.dtype).reshape(array.shape)
    return np.ascontiguousarray(array)


def packed_rows(data: np.ndarray, leaf: Leaf) -> np.ndarray | None:
    """The bytes of a sub-byte leaf in ONNX packing, gathered straight from the payload ``data``.

    Applies when the leaf is dense along its merged innermost dimension, that run is a whole
    number of bytes starting on a byte boundary, and the outer strides are whole bytes: then the
    payload's LSB-first bytes *are* the packed form, and only whole rows are copied (not at all
    when the leaf is contiguous). Returns None for any other layout.
    """
    width = leaf.bit_width
    shape, strides = merged_dims(leaf.shape, leaf.strides)
    if leaf.count == 0:
        return np.zeros(0, dtype=np.uint8)
    if not shape:  # a single element
        shape, strides = (1,), (width,)
    if strides[-1] != width or leaf.bit_offset % 8 or (shape[-1] * width) % 8 or any(s % 8 for s in strides[:-1]):
        return None
    row_bytes = shape[-1] * width // 8
    rows = byte_strided(data, shape[:-1] + (row_bytes,), np.uint8, leaf.bit_offset, strides[:-1] + (8,))
    return contiguous(rows).reshape(-1)


def onnx_elem_type(leaf: Leaf) -> int:
    """The ONNX element type a leaf is passed as (components: their unsigned integer dtype)."""
    if leaf.kind == "component":
        return helper.np_dtype_to_tensor_dtype(leaf.dtype)
    return leaf.elem_type


# ---------------------------------------------------------------------- function models
def tensor_type(elem_type: int, shape: Sequence[int]) -> onnx.TypeProto:
    return helper.make_tensor_type_proto(elem_type, list(shape))


# Domains whose operators runtimes implement themselves: onnx's other operator sets and
# onnxruntime's contrib ones. onnxruntime runs its own kernel for a node whose (domain, name) it
# knows, not the model-local function of that id (a decoder com.microsoft::Gelu would compute Gelu).
RUNTIME_DOMAINS = frozenset(
    {
        "ai.onnx.ml",
        "ai.onnx.preview",
        "ai.onnx.training",
        "ai.onnx.preview.training",
        "com.microsoft",
        "com.microsoft.nchwc",
        "com.microsoft.experimental",
        "com.microsoft.dml",
        "com.microsoft.extensions",
        "com.ms.internal.nhwc",
        "org.pytorch.aten",
    }
)


def registered_function(function: onnx.FunctionProto) -> onnx.FunctionProto:
    """A copy of ``function`` under PRIVATE_DOMAIN when its own is the default domain ("" or
    "ai.onnx"; neither onnx nor onnxruntime resolves a model-local function there) or one of the
    :data:`RUNTIME_DOMAINS` (a runtime's own operator would run instead)."""
    copy = onnx.FunctionProto()
    copy.CopyFrom(function)
    if copy.domain in STANDARD_DOMAINS or copy.domain in RUNTIME_DOMAINS:
        copy.domain = PRIVATE_DOMAIN
    return copy


def function_model(
    function: onnx.FunctionProto,
    inputs: Sequence[tuple[str, onnx.TypeProto]],
    initializers: Sequence[TensorProto] = (),
) -> onnx.ModelProto:
    """A model calling ``function`` once: its inputs are graph inputs or initializers, its outputs
    the graph outputs. The model imports exactly the function's own opsets, so every operator
    resolves to the version the function was written for."""
    fn = registered_function(function)
    node = helper.make_node(fn.name, list(fn.input), list(fn.output), domain=fn.domain, name="call")
    outputs = [helper.make_value_info(name, onnx.TypeProto()) for name in fn.output]  # onnxruntime infers them
    graph = helper.make_graph(
        [node], "function", [helper.make_value_info(n, t) for n, t in inputs], outputs, initializer=list(initializers)
    )
    opsets = {o.domain: o.version for o in fn.opset_import}
    opsets.setdefault(fn.domain, 1)
    opset_ids = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    # IR 10 is the first with INT4/UINT4; newer opsets may need more (find_min_ir_version_for).
    ir_version = max(10, helper.find_min_ir_version_for(opset_ids, True))
    return helper.make_model(
        graph, opset_imports=opset_ids, functions=[fn], ir_version=min(ir_version, onnx.IR_VERSION)
    )
