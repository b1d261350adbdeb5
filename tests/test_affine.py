"""Affine forms of the block formats against independent oracles.

For every format with an affine form, ``affine_form(...).dequantize()`` must reproduce the
format's reference decoding bit for bit: ``gguf.quants.dequantize`` for GGUF types, ml_dtypes
element values times the E8M0 scale for OCP MX (where -0.0 elements may come out +0.0, as
docs/execution.md states), and a numpy transcription of ``(q - zero_point) * scale`` for the
linear family. Payloads are random bytes (every byte pattern is a valid block), once with finite,
sane FLOAT16 scales and once with random scale bits (NaN, inf and subnormal scales included:
then only the NaN positions are compared, as elsewhere in the suite).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from support.formats import assert_same_floats

from onnx_struct import ValidationError, formats
from onnx_struct.formats.affine import AffineForm, affine_spec, affine_table, has_affine_form
from onnx_struct.payload.affine import affine_form

gguf = pytest.importorskip("gguf")
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants  # noqa: E402

# Byte offsets of the FLOAT16 scale fields in each GGUF block, from ggml-common.h.
GGUF_F16_OFFSETS = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "TQ1_0": (52,), "TQ2_0": (64,), "IQ4_NL": (0,), "IQ4_XS": (0,), "IQ2_XXS": (0,), "IQ2_XS": (0,),
    "IQ2_S": (0,), "IQ3_XXS": (0,), "IQ3_S": (0,), "IQ1_S": (0,),
    "IQ1_M": (), "MXFP4": (), "NVFP4": (),  # no FLOAT16 field (IQ1_M's is split, see sane_payload)
}  # fmt: skip
MX = {
    "OCP_MXFP4": (ml_dtypes.float4_e2m1fn, 4),
    "OCP_MXFP6_E2M3": (ml_dtypes.float6_e2m3fn, 6),
    "OCP_MXINT8": (None, 8),
}
LINEAR = {  # name -> (element, scale dtype, zero point)
    "INT4_B32_F16": ("INT4", "<f2", False),
    "INT4_B128_F16": ("INT4", "<f2", False),
    "INT8_B32_F16": ("INT8", "<f2", False),
    "INT8_B32_F32": ("INT8", "<f4", False),
    "UINT4_B32_F16_ZP": ("UINT4", "<f2", True),
    "UINT4_B128_F16_ZP": ("UINT4", "<f2", True),
    "UINT8_B32_F32_ZP": ("UINT8", "<f4", True),
}
# Formats with no exact 4/8-bit affine form, and why (docs/execution.md has the same list).
WITHOUT = ["F32", "F16", "BF16", "NF4", "OCP_MXFP8_E4M3", "OCP_MXFP8_E5M2", "OCP_MXFP6_E3M2"]
SIGNED_ZERO_ONLY = {"OCP_MXFP4", "OCP_MXFP6_E2M3"}
# bits, block size, zero point, minimum: written out by hand from each format's definition.
EXPECTED_SPECS = {
    "Q4_0": (4, 32, True, False), "Q4_1": (4, 32, False, True), "Q5_0": (8, 32, False, False),
    "Q5_1": (8, 32, False, True), "Q8_0": (8, 32, False, False), "Q2_K": (4, 16, False, True),
    "Q3_K": (4, 16, True, False), "Q4_K": (4, 32, False, True), "Q5_K": (8, 32, False, True),
    "Q6_K": (8, 16, False, False), "TQ1_0": (4, 256, True, False), "TQ2_0": (4, 256, True, False),
    "IQ4_NL": (8, 32, False, False), "IQ4_XS": (8, 32, False, False), "IQ2_XXS": (8, 32, False, False),
    "IQ2_XS": (8, 16, False, False), "IQ2_S": (8, 16, False, False), "IQ3_XXS": (8, 32, False, False),
    "IQ3_S": (8, 32, False, False), "IQ1_S": (8, 32, False, False), "IQ1_M": (8, 16, False, False),
    "MXFP4": (8, 32, False, False), "NVFP4": (8, 16, False, False), "OCP_MXFP4": (8, 32, False, False),
    "OCP_MXFP6_E2M3": (8, 32, False, False), "OCP_MXINT8": (8, 32, False, False),
    "INT4_B32_F16": (4, 32, False, False), "INT4_B128_F16": (4, 128, False, False),
    "INT8_B32_F16": (8, 32, False, False), "INT8_B32_F32": (8, 32, False, False),
    "UINT4_B32_F16_ZP": (4, 32, True, False), "UINT4_B128_F16_ZP": (4, 128, True, False),
    "UINT8_B32_F32_ZP": (8, 32, True, False),
}  # fmt: skip
WITH = sorted(EXPECTED_SPECS)


def shape_for(name: str) -> tuple[int, ...]:
    return (3, 2, 2 * formats.get(name).block_size * 3)


def random_payload(name: str, shape: tuple[int, ...], seed: int, sane: bool) -> bytes:
    """Random blocks; with ``sane`` every FLOAT16 scale is finite (normal, subnormal or zero)."""
    fmt = formats.get(name)
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (fmt.num_blocks(shape), fmt.bytes_per_block), dtype=np.uint8)
    if sane:
        for offset in GGUF_F16_OFFSETS.get(name, ()):
            values = (rng.standard_normal(len(blocks)) * 10.0 ** rng.uniform(-6, 2, len(blocks))).astype(np.float16)
            values[:4] = np.array([0.0, -0.0, 6e-8, 65504.0], dtype=np.float16)[: len(values[:4])]
            blocks[:, offset : offset + 2] = values.view(np.uint8).reshape(-1, 2)
        if name == "IQ1_M":  # the f16 scale's exponent MSB (bit 14) is bit 6 of byte 55: clear it
            blocks[:, 55] &= 0xBF
        if name in MX or name == "MXFP4":  # E8M0 scale byte first: 2**-27 .. 2**22
            blocks[:, 0] = rng.integers(100, 150, len(blocks))
        if name in LINEAR and LINEAR[name][1] == "<f4":
            values = rng.standard_normal(len(blocks)).astype(np.float32)
            blocks[:, :4] = values.view(np.uint8).reshape(-1, 4)
        elif name in LINEAR:
            values = rng.standard_normal(len(blocks)).astype(np.float16)
            blocks[:, :2] = values.view(np.uint8).reshape(-1, 2)
    if name in LINEAR and LINEAR[name][2] and LINEAR[name][0] == "UINT4":
        blocks[:, 2] &= 0x0F  # the padding nibble after a 4-bit zero point is zero
    return blocks.tobytes()


# ---------------------------------------------------------------------- oracles (no package code)
def gguf_oracle(name: str, payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
    rows = np.frombuffer(payload, np.uint8).reshape(-1, shape[-1] // block_size * type_size)
    with np.errstate(all="ignore"):
        return quants.dequantize(rows, GGMLQuantizationType[name]).astype(np.float32).reshape(shape)


def mx_oracle(name: str, payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """X * P[i]: E8M0 scale byte, then 32 element codes packed LSB-first (see formats/mx.py)."""
    dtype, bits = MX[name]
    raw = np.unpackbits(np.frombuffer(payload, np.uint8).reshape(-1, 1 + 4 * bits), axis=1, bitorder="little")
    codes = (raw[:, 8:].reshape(len(raw), 32, bits).astype(np.uint16) << np.arange(bits)).sum(axis=2).astype(np.uint8)
    scale = np.packbits(raw[:, :8], axis=1, bitorder="little")[:, 0].view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    values = (
        codes.view(np.int8).astype(np.float32) * np.float32(2**-6)
        if dtype is None
        else codes.view(dtype).astype(np.float32)
    )
    with np.errstate(all="ignore"):
        return (values * scale[:, None]).reshape(shape)


def linear_oracle(name: str, payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    element, scale_dtype, zero = LINEAR[name]
    block_size = formats.get(name).block_size
    blocks = np.frombuffer(payload, np.uint8).reshape(formats.get(name).num_blocks(shape), -1)
    width = np.dtype(scale_dtype).itemsize
    scale = blocks[:, :width].copy().view(scale_dtype)[:, 0].astype(np.float32)
    body = blocks[:, width + (1 if zero else 0) :]
    if element.endswith("4"):
        q = np.stack([body & 0xF, body >> 4], axis=-1).reshape(len(blocks), block_size).astype(np.int16)
        zp = (blocks[:, width] & 0xF).astype(np.int16) if zero else None
        if element == "INT4":
            q = np.where(q > 7, q - 16, q)
    else:
        q = body.view(element.lower()).astype(np.int16)
        zp = blocks[:, width].view(element.lower()).astype(np.int16) if zero else None
    qf = q.astype(np.float32) - (zp.astype(np.float32)[:, None] if zero else np.float32(0))
    with np.errstate(all="ignore"):
        return (qf * scale[:, None]).reshape(shape)


def oracle(name: str, payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    if name in MX:
        return mx_oracle(name, payload, shape)
    if name in LINEAR:
        return linear_oracle(name, payload, shape)
    return gguf_oracle(name, payload, shape)


def assert_matches(name: str, actual: np.ndarray, expected: np.ndarray) -> None:
    if name in SIGNED_ZERO_ONLY:
        # The one stated difference: a -0.0 element is +0.0; check exactly that, then compare
        # everything else bit for bit.
        zero = expected == 0
        assert np.all(actual[zero] == 0) and not np.any(np.signbit(actual[zero]))
        expected = np.where(zero, np.float32(0), expected)
    assert_same_floats(actual, expected)


# ---------------------------------------------------------------------- tests
def test_every_registered_format_is_classified():
    table = affine_table()
    assert sorted(table) == sorted(WITH + WITHOUT)
    assert sorted(n for n, spec in table.items() if spec is None) == sorted(WITHOUT)


@pytest.mark.parametrize("name", WITH)
def test_spec_matches_hand_table(name):
    spec = affine_spec(name)
    assert (spec.bits, spec.block_size, spec.zero_point, spec.minimum) == EXPECTED_SPECS[name]
    assert has_affine_form(name)
    assert spec.exactness == ("bit-exact except -0.0 elements give +0.0" if name in SIGNED_ZERO_ONLY else "bit-exact")


@pytest.mark.parametrize("sane", [True, False], ids=["finite-scales", "random-scale-bits"])
@pytest.mark.parametrize("name", WITH)
def test_dequantize_matches_oracle(name, sane):
    shape = shape_for(name)
    for seed in range(3):
        payload = random_payload(name, shape, seed, sane)
        form = affine_form(name, payload, shape)
        spec = affine_spec(name)
        assert isinstance(form, AffineForm) and form.shape == shape
        assert form.bits == spec.bits and form.block_size == spec.block_size and form.signed == spec.signed
        assert form.scale.dtype == np.float32 and form.scale.shape == (*shape[:-1], shape[-1] // spec.block_size)
        assert (form.zero_point is not None) == spec.zero_point and (form.minimum is not None) == spec.minimum
        low, high = (-(1 << (form.bits - 1)), (1 << (form.bits - 1)) - 1) if form.signed else (0, (1 << form.bits) - 1)
        assert form.codes.dtype == (np.int8 if form.signed else np.uint8)
        assert low <= form.codes.min() and form.codes.max() <= high, (form.codes.min(), form.codes.max())
        if form.zero_point is not None:
            assert low <= form.zero_point.min() and form.zero_point.max() <= high
        if sane:  # finite scales give finite values: the comparison is not vacuous
            assert np.isfinite(oracle(name, payload, shape)).mean() > 0.99
        assert_matches(name, form.dequantize(), oracle(name, payload, shape))


@pytest.mark.parametrize("name", WITHOUT)
def test_formats_without_a_form_return_none(name):
    fmt = formats.get(name)
    shape = (2, fmt.block_size * 4)
    payload = bytes(fmt.num_blocks(shape) * fmt.bytes_per_block)
    assert not has_affine_form(name)
    assert affine_form(name, payload, shape) is None


def test_q4_0_by_hand():
    # One block: d = 0.5, qs[0] = 0x1F (value 0: low nibble 15, value 16: high nibble 1), rest 0x88.
    payload = np.float16(0.5).tobytes() + bytes([0x1F]) + bytes([0x88] * 15)
    form = affine_form("Q4_0", payload, (32,))
    assert form.codes[0] == 15 and form.codes[16] == 1 and form.codes[1] == 8
    assert form.scale.tolist() == [0.5] and form.zero_point.tolist() == [8] and form.minimum is None
    y = form.dequantize()
    assert y[0] == 3.5 and y[16] == -3.5 and y[1] == 0.0


def test_q4_k_by_hand():
    # d = 1, dmin = 0.25; sub-block 0 has scale 3, min 4 (bytes 0 and 4 of scales); code 5.
    scales = bytes([3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0])
    payload = np.float16(1).tobytes() + np.float16(0.25).tobytes() + scales + bytes([0x05] * 128)
    form = affine_form("Q4_K", payload, (256,))
    assert form.scale[0] == 3 and form.minimum[0] == -1.0
    assert form.dequantize()[0] == 5 * 3 - 1.0


def test_wrong_payload_length_and_shape_are_validation_errors():
    with pytest.raises(ValidationError, match="payload is 17 bytes"):
        affine_form("Q4_0", bytes(17), (32,))
    with pytest.raises(ValidationError, match="not a multiple of the block size"):
        affine_form("Q4_0", bytes(18), (16,))
    with pytest.raises(KeyError):
        has_affine_form("Q4_9")


def test_affine_form_checks_its_parts():
    codes = np.zeros((2, 64), np.uint8)
    with pytest.raises(ValidationError, match="scale"):
        AffineForm(codes, 4, 32, np.zeros((2, 3), np.float32))
    with pytest.raises(ValidationError, match="zero_point"):
        AffineForm(codes, 4, 32, np.zeros((2, 2), np.float32), zero_point=np.zeros((2, 2), np.int8))


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1"])
@pytest.mark.parametrize("shape", [(3, 64), (1, 32), (6, 96)])
def test_packed_form_is_the_affine_form_with_its_codes_paired(name, shape):
    """packed_form's pairs (read straight from the nibble runs) are the affine form's codes
    packed two per byte along each row, value 2i low and 2i+1 high, computed here by hand from
    the oracle's codes (gguf-py's dequantize agrees with them, test_dequantize_matches_oracle);
    its scale, zero point and minimum are the affine form's, and its unpacked codes its codes."""
    from onnx_struct.formats.affine import PairedForm
    from onnx_struct.payload.affine import packed_form

    fmt = formats.get(name)
    rng = np.random.default_rng(len(name) * shape[0])
    payload = rng.integers(0, 256, fmt.num_blocks(shape) * fmt.bytes_per_block, dtype=np.uint8).tobytes()
    form = affine_form(name, payload, shape)
    packed = packed_form(fmt, payload, shape)
    assert isinstance(packed, PairedForm)
    by_hand = (form.codes[:, 0::2] | (form.codes[:, 1::2] << 4)).astype(np.uint8)
    np.testing.assert_array_equal(packed.pairs, by_hand)
    np.testing.assert_array_equal(packed.codes, form.codes)
    for part in ("scale", "zero_point", "minimum"):
        mine, theirs = getattr(packed, part), getattr(form, part)
        assert (mine is None) == (theirs is None), part
        if theirs is not None:
            np.testing.assert_array_equal(mine.view(np.uint8), theirs.view(np.uint8), err_msg=part)
    rebuilt = AffineForm(packed.codes, 4, packed.block_size, packed.scale, packed.zero_point, packed.minimum)
    np.testing.assert_array_equal(rebuilt.dequantize().view(np.uint32), form.dequantize().view(np.uint32))


def test_packed_form_is_the_affine_form_for_other_formats():
    from onnx_struct.payload.affine import packed_form

    fmt = formats.get("Q4_K")
    payload = bytes(fmt.num_blocks((2, 256)) * fmt.bytes_per_block)
    assert isinstance(packed_form(fmt, payload, (2, 256)), AffineForm)
