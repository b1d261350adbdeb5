"""One round trip of a registered block format against its independent oracle.

``common(name, shape, payload=..., x=...)`` is the one place that knows how to check a format end to
end (like construct's ``common(format, data, obj, size)``): the declared size against the oracle's
block bytes, the view of the payload against the declared fields, ``onnx_struct.decode`` against
the oracle's dequantizer, and, where the format has an encoder, ``onnx_struct.encode`` against the
oracle's quantizer. The oracles: gguf-py for the GGUF family (support/oracle_gguf.py), ml_dtypes
for OCP MX (support/oracle_mx.py), a bitsandbytes transcription for NF4 (support/oracle_nf4.py)
and a numpy transcription for the linear family (support/oracle_linear.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from onnx_struct import formats, size_in_bits
from onnx_struct.payload.view import view_buffer
from support import oracle_linear, oracle_mx, oracle_nf4
from support.formats import assert_same_floats, run_decode, run_encode

# Formats whose functions onnxruntime cannot run, so decode/encode fall back to onnx's reference
# evaluator (with a warning): MXFP4/MXFP6 element casts. Every other format must run in onnxruntime.
FALLS_BACK_IN_ORT = {"OCP_MXFP4", "OCP_MXFP6_E2M3", "OCP_MXFP6_E3M2"}


@dataclasses.dataclass(frozen=True)
class Oracle:
    block_bytes: Callable[[str], int]  # from the oracle's own source, not from the declaration
    dequantize: Callable[[str, bytes, tuple[int, ...]], np.ndarray]  # float32 of the logical shape
    quantize: Callable[[str, np.ndarray], bytes]  # NotImplementedError where the oracle has none


def _mx_bits(name: str) -> int:
    return oracle_mx.SPEC[name][1]


def _gguf() -> Oracle:
    from support import oracle_gguf  # needs gguf; only the GGUF family pays for the import

    return Oracle(oracle_gguf.block_bytes, oracle_gguf.dequantize, oracle_gguf.quantize)


_ORACLES: dict[str, Callable[[], Oracle]] = {
    "gguf": _gguf,
    "mx": lambda: Oracle(
        lambda name: 1 + 4 * _mx_bits(name),
        lambda name, payload, shape: (
            oracle_mx.oracle_decode(name, *oracle_mx.unpack_blocks(payload, _mx_bits(name)))
            .reshape(shape)
            .astype(np.float32)
        ),
        lambda name, x: oracle_mx.pack_blocks(*oracle_mx.oracle_encode(name, x), _mx_bits(name)),
    ),
    "nf4": lambda: Oracle(
        lambda name: oracle_nf4.BLOCK.itemsize,
        lambda name, payload, shape: oracle_nf4.bnb_dequantize(payload).reshape(shape).astype(np.float32),
        lambda name, x: oracle_nf4.bnb_quantize(x),
    ),
    "linear": lambda: Oracle(
        lambda name: oracle_linear.block_dtype(*oracle_linear.spec_of(name)).itemsize,
        lambda name, payload, shape: (
            oracle_linear.oracle_decode(payload, oracle_linear.spec_of(name)).reshape(shape).astype(np.float32)
        ),
        lambda name, x: oracle_linear.oracle_encode(x, oracle_linear.spec_of(name)),
    ),
}


def _format(name):
    """A registered format by name, or an (unregistered) BlockFormat as is."""
    return formats.get(name) if isinstance(name, str) else name


def oracle(name) -> Oracle:
    return _ORACLES[_format(name).family]()


def _field_shapes(fmt) -> dict[str, tuple[int, ...]]:
    """Payload fields of the block as written in its declaration (constants take no bytes)."""
    return {
        f.name: tuple(d.dim_value for d in f.type.tensor_type.shape.dim)
        for f in fmt.block_fields()
        if f.WhichOneof("content") == "type"
    }


def common(
    name: str | formats.BlockFormat,
    shape: tuple[int, ...],
    *,
    payload: bytes | None = None,
    x: np.ndarray | None = None,
    runtime: str = "onnxruntime",
    nan_bits: bool = False,
) -> bytes:
    """Check format ``name`` (a registered name or a BlockFormat) for a tensor of ``shape`` end to end; returns the payload decoded.

    ``payload`` is decoded; without it, the oracle's quantization of ``x`` is. With ``x`` and an
    encoder, ``onnx_struct.encode(x)`` must equal the oracle's bytes. ``nan_bits`` also compares
    the sign and payload of NaNs (see assert_same_floats)."""
    fmt = _format(name)
    name = fmt.name
    reference = oracle(fmt)
    fallback = runtime == "onnxruntime" and name in FALLS_BACK_IN_ORT

    # size: the declaration's bits are the oracle's bytes per block, for the block and the tensor
    block = fmt.block_declaration()
    n_blocks = fmt.num_blocks(shape)
    assert size_in_bits(block) == 8 * reference.block_bytes(name) == 8 * fmt.bytes_per_block
    root = fmt.root_declaration(shape, 0)
    assert size_in_bits(root, [block]) == 8 * reference.block_bytes(name) * n_blocks

    expected_payload = None
    if x is not None and fmt.encoder is not None:
        expected_payload = reference.quantize(name, x)
        assert run_encode(fmt, x, runtime, fallback=fallback) == expected_payload
    if payload is None:
        payload = expected_payload if expected_payload is not None else reference.quantize(name, x)
    assert len(payload) == n_blocks * reference.block_bytes(name)

    # view: one leaf per declared field, each [n_blocks, *field dims]
    leaves = view_buffer(payload, root, [block]).leaves()
    fields = _field_shapes(fmt)
    assert {path: leaves[path].shape for path in fields} == {f: (n_blocks, *dims) for f, dims in fields.items()}

    # decode: bit for bit (NaN positions; their bits with nan_bits)
    expected = reference.dequantize(name, payload, tuple(shape))
    assert_same_floats(run_decode(fmt, shape, payload, runtime, fallback=fallback), expected, nan_bits=nan_bits)
    return payload


def sample_input(name: str, seed: int = 0) -> tuple[tuple[int, ...], np.ndarray]:
    """(shape, float32 x): two rows of two blocks (64 values for the one-value plain types),
    normal values at a different magnitude per block, plus zeros and a negative zero."""
    block_size = formats.get(name).block_size
    shape = (2, 2 * block_size if block_size > 1 else 64)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).reshape(-1, max(block_size, 32))
    x *= np.ldexp(1.0, rng.integers(-8, 8, (len(x), 1)))
    x[0, :3] = [0.0, -0.0, 1.0]
    return shape, x.reshape(shape).astype(np.float32)


def random_payload(name: str, shape: tuple[int, ...], seed: int = 0) -> bytes:
    """Random block bytes (for formats without an encoder every byte pattern is a valid block)."""
    size = formats.get(name).num_blocks(shape) * oracle(name).block_bytes(name)
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


__all__ = ["FALLS_BACK_IN_ORT", "Oracle", "common", "oracle", "random_payload", "sample_input"]
