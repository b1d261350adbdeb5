"""The standard-ONNX (and onnxruntime contrib) nodes a quantized weight becomes.

``MatMul``: ``DequantizeLinear(codes [K, N], scale [K/bs, N], zero_point, axis=0, block_size=bs)``
feeding the ``MatMul``, the pattern onnxruntime fuses into ``MatMulNBits`` at session creation
(every combination of INT4/UINT4/INT8/UINT8, with or without a zero point, block sizes 16..256).
A per-block additive minimum ``m`` cannot ride in ``DequantizeLinear`` without a float zero point
(``MatMulNBits``' slow path), so it is a second, small product:
``x @ (d*q + m) = x @ (d*q) + blocksum(x) @ m`` with ``blocksum(x)``: ``[..., K/bs]``.

``Gather`` (axis 0, an embedding table ``[V, D]`` blocked along D): onnxruntime's
``com.microsoft.GatherBlockQuantized`` over uint8 codes (two 4-bit codes per byte, low nibble
first), which dequantizes only the gathered rows; a minimum is gathered and added per block.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnx_struct.formats.affine import AffineForm

MS_DOMAIN = "com.microsoft"


def pack_nibbles(codes: np.ndarray) -> bytes:
    """ONNX's INT4/UINT4 packing of a C-order array: element 2i in the low nibble of byte i,
    element 2i+1 in the high nibble (an odd count pads the last high nibble with zero)."""
    flat = codes.reshape(-1).view(np.uint8)
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.uint8)])
    return ((flat[0::2] & 0x0F) | ((flat[1::2] & 0x0F) << 4)).astype(np.uint8).tobytes()


def transposed_code_tensor(name: str, codes: np.ndarray, bits: int, xor: int = 0) -> TensorProto:
    """``code_tensor(name, codes.T, bits)`` for 2-D ``codes [N, K]`` with fewer temporaries:
    with N even, the nibble pairs of ``[K, N]`` are rows ``2j`` and ``2j+1`` of ``codes``, packed
    at half size before the one transposing copy. ``xor=8``: 4-bit unsigned codes stored as the
    signed ``q - 8`` (INT4), which is ``q ^ 8`` as a nibble."""
    n, k = codes.shape
    if bits != 4 or n % 2:
        if xor:  # the 4-bit code q becomes the signed q - 8, which q ^ 8 is as a nibble
            codes = (codes.view(np.uint8).astype(np.int16) - 8).astype(np.int8)
        return code_tensor(name, codes.T, bits)
    raw = codes.view(np.uint8)
    packed = raw[0::2] & np.uint8(0x0F)
    high = raw[1::2] << np.uint8(4)  # uint8 arithmetic drops the code's upper nibble
    packed |= high
    del high
    if xor:
        packed ^= np.uint8((xor & 0x0F) * 0x11)
    elem = TensorProto.INT4 if codes.dtype == np.int8 or xor else TensorProto.UINT4
    tensor = TensorProto(name=name, data_type=elem, dims=(k, n))
    tensor.raw_data = np.ascontiguousarray(packed.T).tobytes()
    return tensor


def code_tensor(name: str, codes: np.ndarray, bits: int) -> TensorProto:
    """An INT4/UINT4/INT8/UINT8 initializer of ``codes`` (int8/uint8, any shape)."""
    signed = codes.dtype == np.int8
    if bits == 4:
        elem = TensorProto.INT4 if signed else TensorProto.UINT4
        data = pack_nibbles(codes)
    else:
        elem = TensorProto.INT8 if signed else TensorProto.UINT8
        data = np.ascontiguousarray(codes).tobytes()
    tensor = TensorProto(name=name, data_type=elem, dims=codes.shape)
    tensor.raw_data = data
    return tensor


class Emitter:
    """Collects the initializers and nodes of the rewritten consumers; ``fresh`` gives unused names."""

    def __init__(self, fresh) -> None:
        self.fresh = fresh
        self.initializers: list[TensorProto] = []
        self.nodes: list = []
        self._blocksums: dict[tuple[str, int], str] = {}
        self._constants: dict[tuple, str] = {}

    def constant(self, values, dtype=np.int64) -> str:
        key = (np.dtype(dtype).str, tuple(np.asarray(values).reshape(-1).tolist()))
        if key not in self._constants:
            name = self.fresh("exec::const")
            self.initializers.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
            self._constants[key] = name
        return self._constants[key]

    def node(self, op: str, inputs: list[str], prefix: str, domain: str = "", **attrs) -> str:
        out = self.fresh(prefix)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, domain=domain, **attrs))
        return out

    def add(self, tensor: TensorProto) -> str:
        self.initializers.append(tensor)
        return tensor.name

    # ------------------------------------------------------------------ MatMul
    def matmul_weight(self, base: str, form: AffineForm) -> tuple[list[str], str | None]:
        """Initializers of a weight stored ``[N, K]`` (blocks along K) as ``[K, N]``: the inputs
        of its ``DequantizeLinear`` and the minimum ``[K/bs, N]`` (or None)."""
        codes, zero_point, xor = form.codes, form.zero_point, 0
        if form.bits == 4 and zero_point is not None and np.all(zero_point == 8):
            # Q4_0 and the like: uint4 - 8 is exactly int4 without a zero point, onnxruntime's
            # symmetric MatMulNBits, faster than its zero-point variant (docs/execution.md).
            zero_point, xor = None, 8
        codes = self.add(transposed_code_tensor(self.fresh(f"{base}::codes"), codes, form.bits, xor))
        scale = self.add(numpy_helper.from_array(np.ascontiguousarray(form.scale.T), self.fresh(f"{base}::scale")))
        inputs = [codes, scale]
        if zero_point is not None:
            inputs.append(self.add(code_tensor(self.fresh(f"{base}::zero_point"), zero_point.T, form.bits)))
        minimum = None
        if form.minimum is not None:
            minimum = self.add(
                numpy_helper.from_array(np.ascontiguousarray(form.minimum.T), self.fresh(f"{base}::minimum"))
            )
        return inputs, minimum

    def dequantize(self, base: str, inputs: list[str], block_size: int) -> str:
        """The ``DequantizeLinear`` of one consumer."""
        return self.node("DequantizeLinear", inputs, f"{base}::dequantized", axis=0, block_size=block_size)

    def blocksum(self, x: str, k: int, block_size: int) -> str:
        """``x [..., K]`` -> ``[..., K/bs]``: the sum of each block of ``block_size`` elements
        (shared by every weight of that block size the same ``x`` multiplies)."""
        key = (x, block_size)
        if key not in self._blocksums:
            shape = self.node("Shape", [x], f"{x}::shape", end=-1)
            blocked = self.node(
                "Concat", [shape, self.constant([k // block_size, block_size])], f"{x}::blocked", axis=0
            )
            grouped = self.node("Reshape", [x, blocked], f"{x}::blocks")
            self._blocksums[key] = self.node("ReduceSum", [grouped, self.constant([-1])], f"{x}::blocksum", keepdims=0)
        return self._blocksums[key]

    def matmul(self, x: str, weight: str, minimum: str | None, k: int, block_size: int, output: str) -> None:
        """``output = x @ weight (+ blocksum(x) @ minimum)``."""
        if minimum is None:
            self.nodes.append(helper.make_node("MatMul", [x, weight], [output], name=self.fresh(f"{output}::matmul")))
            return
        main = self.node("MatMul", [x, weight], f"{output}::main")
        correction = self.node("MatMul", [self.blocksum(x, k, block_size), minimum], f"{output}::minimum")
        self.nodes.append(helper.make_node("Sum", [main, correction], [output], name=self.fresh(f"{output}::add")))

    # ------------------------------------------------------------------ Gather
    def gather(self, base: str, form: AffineForm, indices: str, output: str) -> None:
        """``output = Gather(decode(table), indices, axis=0)`` through GatherBlockQuantized."""
        offset = 1 << (form.bits - 1)
        codes = form.codes
        if form.signed:  # uint8 data only: c + 2^(bits-1) with the operator's default zero point
            codes = (codes.astype(np.int16) + offset).astype(np.uint8)
        zero_point = form.zero_point
        if zero_point is not None and form.signed:
            zero_point = (zero_point.astype(np.int16) + offset).astype(np.uint8)
        elif zero_point is None and not form.signed:
            zero_point = np.zeros(form.scale_shape, np.uint8)  # the default would be 2^(bits-1)
        data = self.add(self._uint8(self.fresh(f"{base}::codes"), codes, form.bits))
        scale = self.add(numpy_helper.from_array(np.ascontiguousarray(form.scale), self.fresh(f"{base}::scale")))
        inputs = [data, indices, scale]
        if zero_point is not None:
            inputs.append(self.add(self._uint8(self.fresh(f"{base}::zero_point"), zero_point, form.bits)))
        attrs = dict(gather_axis=0, quantize_axis=1, block_size=form.block_size, bits=form.bits)
        if form.minimum is None:
            self.nodes.append(
                helper.make_node(
                    "GatherBlockQuantized",
                    inputs,
                    [output],
                    name=self.fresh(f"{output}::gather"),
                    domain=MS_DOMAIN,
                    **attrs,
                )
            )
            return
        rows = self.node("GatherBlockQuantized", inputs, f"{output}::rows", domain=MS_DOMAIN, **attrs)
        table = self.add(numpy_helper.from_array(np.ascontiguousarray(form.minimum), self.fresh(f"{base}::minimum")))
        minimum = self.node("Gather", [table, indices], f"{output}::minimum", axis=0)
        lead = self.node("Shape", [indices], f"{output}::lead")
        d, bs = form.shape[1], form.block_size
        blocked = self.node("Concat", [lead, self.constant([d // bs, bs])], f"{output}::blocked", axis=0)
        grouped = self.node("Reshape", [rows, blocked], f"{output}::blocks")
        shifted = self.node(
            "Add", [grouped, self.node("Unsqueeze", [minimum, self.constant([-1])], f"{output}::m")], f"{output}::sum"
        )
        flat = self.node("Concat", [lead, self.constant([d])], f"{output}::flat", axis=0)
        self.nodes.append(helper.make_node("Reshape", [shifted, flat], [output], name=self.fresh(f"{output}::reshape")))

    @staticmethod
    def _uint8(name: str, codes: np.ndarray, bits: int) -> TensorProto:
        """uint8 ``[rows, cols]`` for GatherBlockQuantized: 4-bit codes packed two per byte along
        the last axis (low nibble first), i.e. ``[rows, cols / 2]``."""
        codes = np.ascontiguousarray(codes.view(np.uint8))
        if bits == 4:
            rows, cols = codes.shape
            if cols % 2:
                codes = np.concatenate([codes, np.zeros((rows, 1), np.uint8)], axis=1)
            codes = (codes[:, 0::2] & 0x0F) | ((codes[:, 1::2] & 0x0F) << 4)
        return numpy_helper.from_array(np.ascontiguousarray(codes, dtype=np.uint8), name)
