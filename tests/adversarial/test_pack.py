"""pack / make_struct_value_from_leaves / encode never allocate from a declaration's size alone.

A 30-byte declaration states a 1 TiB payload; packing it from no leaves (or from a one-byte
encoder output) must be refused before anything is allocated, not die in MemoryError.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from support.models import model_with

import onnx_struct as S
from adversarial.bounded import run_bounded
from onnx_struct.limits import MAX_PACK_ZERO_FILL_BYTES

TIB = 1 << 40


def huge_padded() -> S.StructTypeProto:
    """{x: UINT8, pad: UINT8[2^40]} with an encoder producing x only: a 1 TiB payload."""
    encoder = oh.make_function(
        "e", "enc", ["v"], ["x"], [oh.make_node("Identity", ["v"], ["x"])], [oh.make_opsetid("", 21)]
    )
    return S.make_structure(
        [S.make_field("x", T.UINT8), S.make_field("pad", S.make_tensor_type(T.UINT8, [TIB]))], encoder=encoder
    )


CASES = {
    "pack": "S.pack({}, 0, ARG, fill_missing=True)",
    "pack_some": "S.pack({'x': np.uint8(1)}, 0, ARG, fill_missing=True)",
    "make_struct_value_from_leaves": "S.make_struct_value_from_leaves('w', {'x': 1}, 0, ARG, fill_missing=True)",
    "encode": "S.encode(np.array(3, dtype=np.uint8), 0, ARG)",
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_payload_not_backed_by_leaves_is_refused_before_allocating(tmp_path, case):
    path = tmp_path / "m.onnx"
    onnx.save(model_with([huge_padded()]), path)
    out = run_bounded(CASES[case], str(path), cpu_seconds=10, memory_mib=200)
    prefix = "struct_types[0].encoder ('enc')" if case == "encode" else "struct_type"
    out.assert_validation_error(prefix, contains=f"zero-fill more than their size plus {MAX_PACK_ZERO_FILL_BYTES}")


def test_padding_as_large_as_the_given_leaves_is_still_written():
    # {a: 4 bits, pad: 4 bits} x 2^20 records: half the payload is zero-filled padding, the
    # encoders' common case, and must keep working without passing the padding.
    declaration = S.make_bit_packing([("a", 4), ("pad", 4)], 1 << 20)
    payload = S.pack({"a": [15] * (1 << 20)}, declaration, fill_missing=True)
    assert payload == b"\x0f" * (1 << 20)


# ---------------------------------------------------------------------- the caller's arguments
def _tiny_matmul() -> onnx.ModelProto:
    weight = onnx.numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [oh.make_tensor_value_info("x", T.FLOAT, [1, 64])],
        [oh.make_tensor_value_info("y", T.FLOAT, [1, 64])],
        [weight],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])


ARGUMENTS = {
    # found by a red-team pass: ValueError, OverflowError, AttributeError, KeyError escaped, or 32.5 was taken as 32
    "format shape negative": (lambda: S.formats.get("Q4_0").add_to_model(_tiny_matmul(), (-32,)), S.ValidationError),
    "format shape 2^63": (lambda: S.formats.get("Q4_0").add_to_model(_tiny_matmul(), (2**63, 32)), S.ValidationError),
    "format shape 32.5": (lambda: S.formats.get("Q4_0").add_to_model(_tiny_matmul(), (32.5,)), TypeError),
    "pack leaves a list": (lambda: S.pack([1, 2], S.make_array(T.UINT8, 2)), TypeError),
    "pack struct_type None": (lambda: S.pack({}, None), TypeError),
    "pack struct_type str": (lambda: S.pack({}, "Q4_0"), TypeError),
    "quantize format None": (lambda: S.quantize(_tiny_matmul(), None), TypeError),
    "quantize op_types str": (lambda: S.quantize(_tiny_matmul(), "Q8_0", op_types="MatMul"), TypeError),
}


@pytest.mark.parametrize("case", sorted(ARGUMENTS))
def test_wrong_arguments_are_a_type_error_or_a_validation_error(case):
    call, expected = ARGUMENTS[case]
    with pytest.raises(expected) as raised:
        call()
    assert type(raised.value) is expected or isinstance(raised.value, S.ValidationError)


def test_a_numpy_integer_dimension_is_an_integer():
    model = _tiny_matmul()
    index = S.formats.get("Q4_0").add_to_model(model, (S.formats.get("Q4_0").block_size * np.int64(2),))
    assert S.get_struct_types(model)[index].name == "Q4_0[64]"
