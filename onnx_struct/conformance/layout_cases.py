"""Size and view cases: declarations whose size in bits is derived by hand (the arithmetic is the
case's description), and payloads whose leaves are read by an independent numpy bit reader at
offsets written here, never through onnx_struct's views."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
from onnx import TensorProto as T

from onnx_struct.schema import builders as B
from onnx_struct.schema.model import StructTypeProto


@dataclasses.dataclass(frozen=True)
class SizeCase:
    name: str
    declarations: list[StructTypeProto]
    sizes: dict[int, int]  # struct_types index -> size in bits
    description: str


def ref(index: int):
    return B.make_type_reference(index)


def tensor(elem_type: int, dims=()):
    return B.make_tensor_type(elem_type, list(dims))


SIZE_CASES = [
    SizeCase("bytes", [B.make_array(T.UINT8, 4)], {0: 32}, "UINT8[4]: 4 * 8 = 32"),
    SizeCase(
        "q4_block",
        [B.make_structure([B.make_field("d", T.FLOAT16), B.make_field("qs", tensor(T.UINT4, [32]))])],
        {0: 144},
        "{d: FLOAT16, qs: UINT4[32]}: 16 + 32 * 4 = 144",
    ),
    SizeCase(
        "nested_arrays",
        [B.make_array(tensor(T.UINT4, [3]), 5), B.make_array(ref(0), 7)],
        {0: 60, 1: 420},
        "Array(UINT4[3], 5) = 5 * 3 * 4 = 60; Array(that, 7) = 7 * 60 = 420",
    ),
    SizeCase(
        "bit_packing_odd",
        [B.make_bit_packing([("a", 3), ("b", 5), ("c", 7)], 3)],
        {0: 45},
        "BitPacking(a:3, b:5, c:7) x 3: (3 + 5 + 7) * 3 = 45",
    ),
    SizeCase(
        "zero_size_constant",
        [
            B.make_structure([B.make_constant_field("k", np.zeros(2, np.float32))]),
            B.make_structure([B.make_field("x", T.UINT8), B.make_constant_field("k", np.int64(7))]),
        ],
        {0: 0, 1: 8},
        "a constant takes no payload bits: {k: const} = 0; {x: UINT8, k: const} = 8",
    ),
    SizeCase("zero_dimension", [B.make_array(T.UINT8, 0)], {0: 0}, "UINT8 x 0 = 0"),
    SizeCase(
        "type_index_chain",
        [
            B.make_array(T.UINT16, 2),
            B.make_array(ref(0), 3),
            B.make_structure([B.make_field("a", ref(1)), B.make_field("b", tensor(T.INT2, [5]))]),
        ],
        {0: 32, 1: 96, 2: 106},
        "UINT16[2] = 32; Array(#0, 3) = 96; {a: #1, b: INT2[5]} = 96 + 10 = 106",
    ),
    SizeCase(
        "sub_byte_leaves",
        [B.make_structure([B.make_field("f4", tensor(T.FLOAT4E2M1, [7])), B.make_field("u2", tensor(T.UINT2, [3]))])],
        {0: 34},
        "{f4: FLOAT4E2M1[7], u2: UINT2[3]}: 7 * 4 + 3 * 2 = 34",
    ),
]


# ---------------------------------------------------------------------- view cases
@dataclasses.dataclass(frozen=True)
class Leaf:
    """A leaf as the oracle reads it: ``count`` elements of ``width`` bits from ``offset``, each
    ``stride`` bits after the last, as ``dtype`` (shape ``shape``)."""

    path: str
    offset: int
    width: int
    shape: tuple[int, ...]
    dtype: np.dtype
    stride: int = 0

    def read(self, bits: np.ndarray) -> np.ndarray:
        count = int(np.prod(self.shape, dtype=np.int64))
        stride = self.stride or self.width
        starts = self.offset + stride * np.arange(count)
        codes = (
            bits[starts[:, None] + np.arange(self.width)].astype(np.uint64) << np.arange(self.width, dtype=np.uint64)
        ).sum(axis=1, dtype=np.uint64)
        return _as_dtype(codes, self.width, self.dtype).reshape(self.shape)


def _as_dtype(codes: np.ndarray, width: int, dtype: np.dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if width % 8 == 0 and dtype.itemsize * 8 == width:  # whole bytes: reinterpret little-endian
        return codes.astype(f"<u{dtype.itemsize}").view(dtype)
    if dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.int2)):  # two's complement in width bits
        signed = codes.astype(np.int64) - ((codes >> np.uint64(width - 1)) << np.uint64(width)).astype(np.int64)
        return signed.astype(dtype)
    if dtype == np.dtype(ml_dtypes.float4_e2m1fn):
        return codes.astype(np.uint8).view(dtype)
    return codes.astype(dtype)  # unsigned codes (UINT4, UINT2, bit_packing components)


@dataclasses.dataclass(frozen=True)
class ViewCase:
    name: str
    declarations: list[StructTypeProto]
    root: int
    size_bytes: int
    leaves: list[Leaf]
    description: str


U4, I4, U2, I2, F4 = (
    np.dtype(t) for t in (ml_dtypes.uint4, ml_dtypes.int4, ml_dtypes.uint2, ml_dtypes.int2, ml_dtypes.float4_e2m1fn)
)
BLOCK = B.make_structure([B.make_field("d", T.FLOAT16), B.make_field("qs", tensor(T.UINT4, [4]))])
EVERY_KIND = [  # (name, element type, width, dtype): each after a 3-bit pad, so at odd bit offsets
    ("u8", T.UINT8, 8, np.uint8), ("i8", T.INT8, 8, np.int8), ("u16", T.UINT16, 16, np.uint16),
    ("i16", T.INT16, 16, np.int16), ("u32", T.UINT32, 32, np.uint32), ("i32", T.INT32, 32, np.int32),
    ("u64", T.UINT64, 64, np.uint64), ("i64", T.INT64, 64, np.int64), ("f16", T.FLOAT16, 16, np.float16),
    ("bf16", T.BFLOAT16, 16, ml_dtypes.bfloat16), ("f32", T.FLOAT, 32, np.float32), ("f64", T.DOUBLE, 64, np.float64),
    ("f8e4m3", T.FLOAT8E4M3FN, 8, ml_dtypes.float8_e4m3fn), ("f8e5m2", T.FLOAT8E5M2, 8, ml_dtypes.float8_e5m2),
    ("u4", T.UINT4, 4, U4), ("i4", T.INT4, 4, I4), ("u2", T.UINT2, 2, U2), ("i2", T.INT2, 2, I2),
    ("f4", T.FLOAT4E2M1, 4, F4),
]  # fmt: skip


def _every_kind() -> ViewCase:
    fields, leaves, offset = [], [], 0
    for name, elem_type, width, dtype in EVERY_KIND:
        fields.append(B.make_field(f"pad_{name}", tensor(T.UINT2, [1])))
        leaves.append(Leaf(f"pad_{name}", offset, 2, (1,), U2))
        offset += 2
        fields.append(B.make_field(name, tensor(elem_type, [3])))
        leaves.append(Leaf(name, offset, width, (3,), np.dtype(dtype)))
        offset += 3 * width
    tail = -offset % 8
    fields.append(
        B.make_field("tail", tensor(T.UINT2, [tail // 2])) if tail else B.make_field("tail", tensor(T.UINT8, [1]))
    )
    leaves.append(
        Leaf("tail", offset, 2, (tail // 2,), U2) if tail else Leaf("tail", offset, 8, (1,), np.dtype(np.uint8))
    )
    size = (offset + (tail or 8)) // 8
    return ViewCase(
        "every_leaf_kind",
        [B.make_structure(fields)],
        0,
        size,
        leaves,
        "each kind as [3] after a UINT2[1] pad: offsets are the running sum of 2 + 3 * width",
    )


VIEW_CASES = [
    ViewCase(
        "odd_offsets",
        [
            B.make_structure(
                [
                    B.make_field("a", T.UINT8),
                    B.make_field("b", tensor(T.INT4, [3])),
                    B.make_field("c", T.FLOAT16),
                    B.make_field("d", T.UINT4),
                ]
            )
        ],
        0,
        5,
        [
            Leaf("a", 0, 8, (), np.dtype(np.uint8)),
            Leaf("b", 8, 4, (3,), I4),
            Leaf("c", 20, 16, (), np.dtype(np.float16)),
            Leaf("d", 36, 4, (), U4),
        ],
        "a at bit 0, b at 8 (3 x 4 bits), c at 8 + 12 = 20, d at 36; 40 bits",
    ),
    ViewCase(
        "bit_packing",
        [B.make_bit_packing([("x", 3), ("y", 5), ("z", 9)], 8)],
        0,
        17,
        [
            Leaf("x", 0, 3, (8,), np.dtype(np.uint8), 17),
            Leaf("y", 3, 5, (8,), np.dtype(np.uint8), 17),
            Leaf("z", 8, 9, (8,), np.dtype(np.uint16), 17),
        ],
        "each 17-bit record: x bits 0-2, y 3-7, z 8-16; record k at 17 * k; 136 bits",
    ),
    ViewCase(
        "array_of_blocks",
        [BLOCK, B.make_array(ref(0), 3)],
        1,
        12,
        [Leaf("d", 0, 16, (3,), np.dtype(np.float16), 32), Leaf("qs", 16, 4, (3, 4), U4)],
        "block {d: FLOAT16, qs: UINT4[4]} is 32 bits; d of block k at 32 * k (qs read per block below)",
    ),
    _every_kind(),
]


def payload(case: ViewCase, seed: int) -> bytes:
    """Random payload bytes of the case (fixed seed), with float16 exponents kept finite."""
    return np.random.default_rng(seed).integers(0, 256, case.size_bytes, dtype=np.uint8).tobytes()


def expected_leaves(case: ViewCase, data: bytes) -> dict[str, np.ndarray]:
    bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
    if case.name == "array_of_blocks":  # qs of block k: 4 nibbles from bit 32 * k + 16
        d = case.leaves[0].read(bits)
        qs = np.stack([Leaf("qs", 32 * k + 16, 4, (4,), U4).read(bits) for k in range(3)])
        return {"d": d, "qs": qs}
    return {leaf.path: leaf.read(bits) for leaf in case.leaves}
