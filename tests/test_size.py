"""size_in_bits: the proposal's size function against hand-computed sizes and an independent walk."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from support.models import linear_int4_128, model_with

import onnx_struct as S

# Independent oracle: bit widths written down from the ONNX type definitions, not from onnx_struct.
WIDTHS = {
    T.FLOAT: 32,
    T.UINT8: 8,
    T.INT8: 8,
    T.UINT16: 16,
    T.INT16: 16,
    T.INT32: 32,
    T.INT64: 64,
    T.BOOL: 8,
    T.FLOAT16: 16,
    T.DOUBLE: 64,
    T.UINT32: 32,
    T.UINT64: 64,
    T.COMPLEX64: 64,
    T.COMPLEX128: 128,
    T.BFLOAT16: 16,
    T.FLOAT8E4M3FN: 8,
    T.FLOAT8E4M3FNUZ: 8,
    T.FLOAT8E5M2: 8,
    T.FLOAT8E5M2FNUZ: 8,
    T.UINT4: 4,
    T.INT4: 4,
    T.FLOAT4E2M1: 4,
    T.FLOAT8E8M0: 8,
    T.UINT2: 2,
    T.INT2: 2,
    T.FLOAT6E2M3: 6,
    T.FLOAT6E3M2: 6,
}


def test_every_fixed_width_type_of_installed_onnx_is_covered():
    known = {v for k, v in T.DataType.items() if k not in ("UNDEFINED", "STRING")}
    assert known == set(WIDTHS), "a new onnx type: add its width to the oracle"


@pytest.mark.parametrize("elem_type", sorted(WIDTHS))
def test_scalar_and_tensor_widths(elem_type):
    assert S.size_in_bits(S.make_array(elem_type, 1)) == WIDTHS[elem_type]
    assert S.size_in_bits(S.make_array(S.make_tensor_type(elem_type, [3, 5]), 7)) == 105 * WIDTHS[elem_type]


@pytest.mark.parametrize("elem_type", [T.STRING, T.UNDEFINED, 9999])
def test_non_physical_leaf_types(elem_type):
    with pytest.raises(S.ValidationError, match="not a fixed-width physical leaf"):
        S.size_in_bits(S.make_array(elem_type, 2))


def test_proposal_example_is_512_bits():
    assert S.size_in_bits(linear_int4_128()) == 128 * 4


def test_bit_packing_structure_and_references():
    record = S.make_bit_packing([("a", 3), ("b", 5), ("c", 6)], 10)  # 14 bits x 10
    block = S.make_structure(
        [
            S.make_field("d", T.FLOAT16),
            S.make_field("r", S.make_type_reference(0)),
            S.make_constant_field("k", np.zeros((4, 4), np.float32)),
        ]
    )
    table = [record, block, S.make_array(S.make_type_reference(1), 3)]
    assert S.size_in_bits(0, table) == 140
    assert S.size_in_bits(1, table) == 16 + 140
    assert S.size_in_bits(2, table) == 3 * 156
    assert S.size_in_bits(S.StructTypeProto(type_index=2), table) == 3 * 156
    model = model_with(table)
    assert S.size_in_bits(2, model) == S.size_in_bits(2, model.SerializeToString()) == 468


def test_zero_length_arrays_and_empty_structures():
    assert S.size_in_bits(S.make_array(T.FLOAT, 0)) == 0
    assert S.size_in_bits(S.make_structure([])) == 0
    assert S.size_in_bits(S.make_bit_packing([("x", 7)], 0)) == 0


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        (S.make_bit_packing([("a", 0)], 1), r"component\[0\] \('a'\): component width is zero"),
        (S.make_bit_packing([("a", 65)], 1), "exceeds 64 bits"),
        (S.make_structure([S.StructTypeProto.Field(name="x")]), "neither type nor constant"),
        (S.StructTypeProto(), "no kind"),
        (S.make_array(S.make_struct_type_proto(None), 2), "unconstrained struct category has no static size"),
        (S.make_array(S.make_tensor_type(T.FLOAT, [2]), 1), None),
    ],
)
def test_size_errors(declaration, message):
    if message is None:
        assert S.size_in_bits(declaration) == 64
        return
    with pytest.raises(S.ValidationError, match=message):
        S.size_in_bits(declaration)


def test_nested_concrete_declaration_is_rejected_with_a_hint():
    nested = S.make_struct_type_proto()
    nested.struct_type.CopyFrom(S.make_array(T.INT4, 128))
    with pytest.raises(S.ValidationError, match="reference it with type_index"):
        S.size_in_bits(S.make_structure([S.make_field("values", nested)]))


def test_dynamic_shapes_are_rejected():
    tensor = S.make_tensor_type(T.FLOAT, [2, 3])
    tensor.tensor_type.shape.dim[1].dim_param = "N"
    with pytest.raises(S.ValidationError, match=r"shape\.dim\[1\]: dimension is not a concrete"):
        S.size_in_bits(S.make_array(tensor, 1))
    no_shape = S.make_tensor_type(T.FLOAT)
    no_shape.tensor_type.ClearField("shape")
    with pytest.raises(S.ValidationError, match="shape is missing"):
        S.size_in_bits(S.make_array(no_shape, 1))


@pytest.mark.parametrize("dims", [[2**62, 0], [0, 2**62], [2**63 - 1, 2**63 - 1, 0], [2**61, 0, 8]])
def test_a_tensor_with_a_zero_dimension_is_0_bits_in_any_order(dims):
    """Found by a review against the proposal: UINT8[2^62, 0] overflowed on its way to 0 bits
    (8 * 2^62 first) while UINT8[0, 2^62] was 0 bits."""
    assert S.size_in_bits(S.make_structure([S.make_field("a", S.make_tensor_type(T.UINT8, dims))])) == 0
    with pytest.raises(S.ValidationError, match="overflows uint64"):
        S.size_in_bits(S.make_structure([S.make_field("a", S.make_tensor_type(T.UINT8, [d or 2 for d in dims]))]))


def test_overflow_raises_never_wraps():
    max64 = (1 << 64) - 1
    with pytest.raises(S.ValidationError, match="overflows uint64"):
        S.size_in_bits(S.make_array(T.UINT8, max64))  # 8 * (2^64 - 1)
    assert S.size_in_bits(S.make_array(T.UINT8, max64 // 8)) == (max64 // 8) * 8
    big = S.make_array(T.UINT64, 1 << 57)  # exactly 2^63 bits
    with pytest.raises(S.ValidationError, match="overflows uint64"):
        S.size_in_bits(
            S.make_structure(
                [S.make_field("a", S.make_type_reference(0)), S.make_field("b", S.make_type_reference(0))]
            ),
            [big],
        )


def test_invalid_and_cyclic_references():
    with pytest.raises(S.ValidationError, match=r"type index 3 is out of range \(1 struct_types\)"):
        S.size_in_bits(0, [S.make_array(S.make_type_reference(3), 1)])
    cycle = [S.make_array(S.make_type_reference(1), 1), S.make_array(S.make_type_reference(0), 1)]
    with pytest.raises(S.ValidationError, match="cyclic type reference"):
        S.size_in_bits(0, cycle)
    with pytest.raises(S.ValidationError, match="cyclic type reference"):
        S.size_in_bits(0, [S.make_array(S.make_type_reference(0), 0)])  # even with dimension 0


def test_sixty_level_diamond_is_linear():
    table = [S.make_array(T.UINT8, 1)]
    for level in range(1, 61):
        table.append(
            S.make_structure(
                [
                    S.make_field("l", S.make_type_reference(level - 1)),
                    S.make_field("r", S.make_type_reference(level - 1)),
                ]
            )
        )
    start = time.perf_counter()
    assert S.size_in_bits(60, table) == 8 << 60  # 2^63 bits: fits uint64
    table.append(
        S.make_structure([S.make_field("l", S.make_type_reference(60)), S.make_field("r", S.make_type_reference(60))])
    )
    with pytest.raises(S.ValidationError, match="overflows uint64"):  # 2^64 does not
        S.size_in_bits(61, table)
    assert time.perf_counter() - start < 5  # generous: exponential work would never finish


def test_long_reference_chain_needs_no_recursion():
    n = 30_000
    table = [S.make_array(T.UINT16, 3)] + [S.make_array(S.make_type_reference(i), 1) for i in range(n)]
    assert S.size_in_bits(n, table) == 48
    cycle = [S.make_array(S.make_type_reference((i + 1) % n), 1) for i in range(n)]
    with pytest.raises(S.ValidationError, match="cyclic"):
        S.size_in_bits(0, cycle)


# --------------------------------------------------------------------------- property test
def reference_size(table, index):
    """The proposal's size function written out directly (recursive; fine for small tables)."""

    def type_bits(tp):
        if tp.WhichOneof("value") == "struct_type":
            return decl_bits(table[tp.struct_type.type_index])
        return WIDTHS[tp.tensor_type.elem_type] * int(np.prod([d.dim_value for d in tp.tensor_type.shape.dim]))

    def decl_bits(decl):
        kind = decl.WhichOneof("kind")
        if kind == "array":
            return decl.array.dimension * type_bits(decl.array.element_type)
        if kind == "bit_packing":
            return decl.bit_packing.dimension * sum(c.bit_width for c in decl.bit_packing.component)
        return sum(type_bits(f.type) for f in decl.structure.field if f.WhichOneof("content") == "type")

    return decl_bits(table[index])


@st.composite
def declaration_tables(draw):
    table = []
    for index in range(draw(st.integers(1, 5))):

        def element(index=index):
            if index and draw(st.booleans()):
                return S.make_type_reference(draw(st.integers(0, index - 1)))
            dims = draw(st.lists(st.integers(0, 4), max_size=2))
            return S.make_tensor_type(draw(st.sampled_from(sorted(WIDTHS))), dims)

        kind = draw(st.sampled_from(["array", "bit_packing", "structure"]))
        if kind == "array":
            table.append(S.make_array(element(), draw(st.integers(0, 6))))
        elif kind == "bit_packing":
            widths = draw(st.lists(st.integers(1, 64), min_size=1, max_size=4))
            table.append(S.make_bit_packing([(f"c{i}", w) for i, w in enumerate(widths)], draw(st.integers(0, 6))))
        else:
            fields = []
            for i in range(draw(st.integers(0, 4))):
                if draw(st.integers(0, 3)) == 0:
                    fields.append(S.make_constant_field(f"f{i}", np.float32(i)))
                else:
                    fields.append(S.make_field(f"f{i}", element()))
            table.append(S.make_structure(fields))
    return table


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(declaration_tables())
def test_size_matches_independent_walk_and_serialization_round_trips(table):
    for index, declaration in enumerate(table):
        assert S.size_in_bits(index, table) == reference_size(table, index)
        again = S.StructTypeProto.FromString(declaration.SerializeToString())
        assert again == declaration and again.SerializeToString() == declaration.SerializeToString()
