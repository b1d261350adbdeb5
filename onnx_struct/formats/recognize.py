"""Which registered format a decoder FunctionProto is, trusted only when it is the registry's own.

A declaration's name is free text, so recognition never reads it: the decoder's exact identity
(domain, name) picks a registered format (:func:`onnx_struct.formats.format_of_decoder`), the
constant its final Reshape reshapes to gives the candidate logical shape (every registered decoder
ends so, :meth:`FunctionBuilder.finish`), and the decoder must then be byte-identical to the one
the registry builds for that shape. Block-range decode (runtime/parallel.py) and quantized
execution (lowering/execution/) both recognize formats here, and nowhere else.
"""

from __future__ import annotations

import functools

import onnx
from onnx import numpy_helper

from onnx_struct.formats import format_of_decoder, get
from onnx_struct.formats.base import FORMAT_DOMAIN, BlockFormat


def registered_decoder(decoder: onnx.FunctionProto) -> tuple[BlockFormat, tuple[int, ...]] | None:
    """(format, logical shape) when ``decoder`` is exactly a registered format's decoder for a
    shape; else None."""
    if decoder.domain != FORMAT_DOMAIN:
        return None
    fmt = format_of_decoder(decoder.domain, decoder.name)
    shape = final_shape(decoder)
    if fmt is None or shape is None or shape[-1] % fmt.block_size:
        return None
    if decoder.SerializeToString(deterministic=True) != _decoder_bytes(fmt.name, shape):
        return None
    return fmt, shape


def final_shape(decoder: onnx.FunctionProto) -> tuple[int, ...] | None:
    """The shape a decoder ends with: the 1-D int64 Constant its last node, a Reshape producing its
    one output, reshapes to; None for any other ending. Only a candidate: the caller compares the
    whole decoder."""
    if len(decoder.output) != 1 or not decoder.node:
        return None
    last = decoder.node[-1]
    if last.op_type != "Reshape" or last.domain not in ("", "ai.onnx") or list(last.output) != list(decoder.output):
        return None
    if len(last.input) != 2:
        return None
    for node in decoder.node:
        if node.op_type == "Constant" and list(node.output) == [last.input[1]] and len(node.attribute) == 1:
            attribute = node.attribute[0]
            if (
                attribute.name != "value"
                or attribute.t.data_type != onnx.TensorProto.INT64
                or len(attribute.t.dims) != 1
            ):
                return None
            shape = tuple(int(d) for d in numpy_helper.to_array(attribute.t))
            return shape if shape and all(d > 0 for d in shape) else None
    return None


@functools.lru_cache(maxsize=256)
def registry_decoder(format_name: str, shape: tuple[int, ...]) -> onnx.FunctionProto:
    """The registry's decoder of ``format_name`` for ``shape`` (built once per pair)."""
    return get(format_name).decoder(shape)


@functools.lru_cache(maxsize=256)
def _decoder_bytes(format_name: str, shape: tuple[int, ...]) -> bytes:
    return registry_decoder(format_name, shape).SerializeToString(deterministic=True)
