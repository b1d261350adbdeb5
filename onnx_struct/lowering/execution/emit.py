"""The standard-ONNX (and onnxruntime contrib) nodes a quantized weight becomes.

``MatMul``: blocked ``DequantizeLinear`` feeding the ``MatMul`` (which onnxruntime fuses into
``MatMulNBits``), or with ``accuracy_level`` set ``com.microsoft.MatMulNBits`` itself over the
same bytes; a per-block minimum is a second, small product over the input's block sums.
``Gather``: ``com.microsoft.GatherBlockQuantized``. The arrays come from :mod:`.repack`; with
``arrays`` the initializers are placeholders at :data:`IN_MEMORY_LOCATION` and their arrays go
to the caller, not into the model's bytes.

Notes: docs/modules.md.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnx_struct.lowering.execution.contrib_layouts import GatherLayout, MatMulNBitsLayout
from onnx_struct.lowering.execution.repack import DequantizeLayout, Part
from onnx_struct.lowering.in_memory import IN_MEMORY_LOCATION

MS_DOMAIN = "com.microsoft"


def in_memory_placeholder(name: str, data_type: int, dims, nbytes: int) -> TensorProto:
    """The initializer standing for an array handed to onnxruntime in memory (external data at
    :data:`IN_MEMORY_LOCATION`, ``nbytes`` long)."""
    tensor = TensorProto(name=name, data_type=data_type, dims=dims)
    tensor.data_location = TensorProto.EXTERNAL
    for key, text in (("location", IN_MEMORY_LOCATION), ("offset", 0), ("length", nbytes)):
        tensor.external_data.add(key=key, value=str(text))
    return tensor


class Emitter:
    """Collects the initializers and nodes of the rewritten consumers; ``fresh`` gives unused names.

    ``arrays``: a dict to receive the repacked arrays (the initializers become placeholders);
    ``accuracy_level``: emit ``MatMulNBits`` (with that attribute) instead of DequantizeLinear."""

    def __init__(
        self,
        fresh,
        *,
        arrays: dict[str, np.ndarray] | None = None,
        accuracy_level: int | None = None,
        ranks: dict[str, int] | None = None,
    ):
        self.fresh = fresh
        self.ranks = ranks or {}  # value name -> its rank, where the graph declares one
        self.arrays = arrays
        self.accuracy_level = accuracy_level
        self.initializers: list[TensorProto] = []
        self.nodes: list = []
        self._blocksums: dict[tuple[str, int], str] = {}
        # (x, block size) -> the nodes computing its blocksum, and every request for one, in order:
        # a blocksum shared by weights whose consumers come in another order than their values
        # must move before its first consumer (rewrite_for_execution does).
        self.blocksum_nodes: dict[tuple[str, int], list] = {}
        self.blocksum_requests: list[tuple[str, int]] = []
        self._constants: dict[tuple, str] = {}

    @property
    def emits_nbits(self) -> bool:
        return self.accuracy_level is not None

    def matmul_layout(self, spec, shape) -> DequantizeLayout | MatMulNBitsLayout:
        return (MatMulNBitsLayout if self.emits_nbits else DequantizeLayout)(spec, shape)

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

    def part(self, prefix: str, part: Part) -> str:
        """An initializer of ``part`` named ``fresh(prefix)`` (a placeholder when collecting arrays)."""
        name = self.fresh(prefix)
        if self.arrays is None:
            tensor = TensorProto(name=name, data_type=part.data_type, dims=part.dims)
            tensor.raw_data = part.array.tobytes()
        else:
            tensor = in_memory_placeholder(name, part.data_type, part.dims, part.array.nbytes)
            self.arrays[name] = part.array
        self.initializers.append(tensor)
        return name

    # ------------------------------------------------------------------ MatMul
    def matmul_weight(self, base: str, layout: DequantizeLayout | MatMulNBitsLayout) -> tuple[list[str], str | None]:
        """Initializers of a weight stored ``[N, K]`` (blocks along K): the weight inputs of its
        ``DequantizeLinear`` (codes, scale, zero point) or ``MatMulNBits`` (B, scales, zero
        points), and the minimum ``[K/bs, N]`` (or None)."""
        codes, scale, zero_point, minimum = layout.parts()
        inputs = [self.part(f"{base}::codes", codes), self.part(f"{base}::scale", scale)]
        if zero_point is not None:
            inputs.append(self.part(f"{base}::zero_point", zero_point))
        return inputs, (self.part(f"{base}::minimum", minimum) if minimum is not None else None)

    def dequantize(self, base: str, inputs: list[str], block_size: int) -> str:
        """The ``DequantizeLinear`` of one consumer."""
        return self.node("DequantizeLinear", inputs, f"{base}::dequantized", axis=0, block_size=block_size)

    def blocksum(self, x: str, k: int, block_size: int) -> str:
        """``x [..., K]`` -> ``[..., K/bs]``: the sum of each block of ``block_size`` elements
        (shared by every weight of that block size the same ``x`` multiplies)."""
        key = (x, block_size)
        self.blocksum_requests.append(key)
        if key not in self._blocksums:
            start = len(self.nodes)
            rank = self.ranks.get(x)
            if rank:  # a declared rank: 0 keeps each leading dimension (Reshape's allowzero=0)
                blocked = self.constant([0] * (rank - 1) + [k // block_size, block_size])
            else:
                shape = self.node("Shape", [x], f"{x}::shape", end=-1)
                blocked = self.node(
                    "Concat", [shape, self.constant([k // block_size, block_size])], f"{x}::blocked", axis=0
                )
            grouped = self.node("Reshape", [x, blocked], f"{x}::blocks")
            self._blocksums[key] = self.node("ReduceSum", [grouped, self.constant([-1])], f"{x}::blocksum", keepdims=0)
            self.blocksum_nodes[key] = self.nodes[start:]
        return self._blocksums[key]

    def matmul(self, x: str, weight: str, minimum: str | None, k: int, block_size: int, output: str) -> None:
        """``output = x @ weight (+ blocksum(x) @ minimum)``."""
        if minimum is None:
            self.nodes.append(helper.make_node("MatMul", [x, weight], [output], name=self.fresh(f"{output}::matmul")))
            return
        main = self.node("MatMul", [x, weight], f"{output}::main")
        self._add_minimum(x, main, minimum, k, block_size, output)

    def matmul_nbits(
        self, x: str, inputs: list[str], minimum: str | None, layout: MatMulNBitsLayout, output: str, name: str = ""
    ) -> None:
        """``output = MatMulNBits(x, *inputs) (+ blocksum(x) @ minimum)``; ``name``: the node's."""
        spec = layout.spec
        attrs = dict(
            K=layout.k, N=layout.n, bits=spec.bits, block_size=spec.block_size, accuracy_level=self.accuracy_level
        )
        if minimum is None:
            node_name = name or self.fresh(f"{output}::matmul")
            self.nodes.append(
                helper.make_node("MatMulNBits", [x, *inputs], [output], name=node_name, domain=MS_DOMAIN, **attrs)
            )
            return
        main = self.node("MatMulNBits", [x, *inputs], f"{output}::main", domain=MS_DOMAIN, **attrs)
        self._add_minimum(x, main, minimum, layout.k, spec.block_size, output)

    def _add_minimum(self, x: str, main: str, minimum: str, k: int, block_size: int, output: str) -> None:
        correction = self.node("MatMul", [self.blocksum(x, k, block_size), minimum], f"{output}::minimum")
        self.nodes.append(helper.make_node("Sum", [main, correction], [output], name=self.fresh(f"{output}::add")))

    # ------------------------------------------------------------------ Gather
    def gather(self, base: str, layout: GatherLayout, indices: str, output: str) -> None:
        """``output = Gather(decode(table), indices, axis=0)`` through GatherBlockQuantized."""
        data, scale, zero_point, minimum = layout.parts()
        inputs = [self.part(f"{base}::codes", data), indices, self.part(f"{base}::scale", scale)]
        if zero_point is not None:
            inputs.append(self.part(f"{base}::zero_point", zero_point))
        spec = layout.spec
        attrs = dict(gather_axis=0, quantize_axis=1, block_size=spec.block_size, bits=spec.bits)
        if minimum is None:
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
        table = self.part(f"{base}::minimum", minimum)
        minimum = self.node("Gather", [table, indices], f"{output}::minimum", axis=0)
        lead = self.node("Shape", [indices], f"{output}::lead")
        d, bs = layout.shape[1], spec.block_size
        blocked = self.node("Concat", [lead, self.constant([d // bs, bs])], f"{output}::blocked", axis=0)
        grouped = self.node("Reshape", [rows, blocked], f"{output}::blocks")
        shifted = self.node(
            "Add", [grouped, self.node("Unsqueeze", [minimum, self.constant([-1])], f"{output}::m")], f"{output}::sum"
        )
        flat = self.node("Concat", [lead, self.constant([d])], f"{output}::flat", axis=0)
        self.nodes.append(helper.make_node("Reshape", [shifted, flat], [output], name=self.fresh(f"{output}::reshape")))
