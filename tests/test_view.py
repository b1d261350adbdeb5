"""view(): every leaf kind at every bit phase against the independent oracle, plus golden bytes,
constants, zero-length arrays, external payloads, and size/location errors raised before reads."""

from __future__ import annotations

import importlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from support.data import padded, phase_cases, random_bytes
from support.view_oracle import ORACLE_WIDTHS, oracle_arrays, same_bits

import onnx_struct
from onnx_struct import (
    LeafNotFoundError,
    ValidationError,
    add_struct_types,
    add_struct_values,
    make_array,
    make_bit_packing,
    make_constant_field,
    make_field,
    make_struct_value,
    make_structure,
    make_tensor_type,
    make_type_reference,
    view,
)
from onnx_struct.payload import external as external_module
from onnx_struct.payload.view import view_buffer

# the module, not the function that onnx_struct.view names
bits_module = importlib.import_module("onnx_struct.layout.bits")


def assert_matches_oracle(declaration, payload: bytes, struct_types=()):
    value = make_struct_value("v", declaration, raw_data=payload)
    got = view(value, list(struct_types)).leaves()
    expected = oracle_arrays(declaration, payload, struct_types)
    assert list(got) == list(expected)
    for path, array in expected.items():
        assert same_bits(got[path], array), (path, got[path], array)
    return got


# ---------------------------------------------------------------------- golden bytes
def test_golden_components_a3_b5():
    v = view(make_struct_value("c", make_bit_packing([("a", 3), ("b", 5)], 1), raw_data=bytes([0x8D])))
    assert v["a"].tolist() == [5] and v["b"].tolist() == [17]
    assert v["a"].dtype == np.uint8


def test_golden_float16_at_bit_4():
    # 1.0 = 0x3C00; placed at bit 4 after a 4-bit pad 0xA and followed by a 4-bit pad 0x5:
    # bits 0-3 = 0xA, bits 4-19 = 0x3C00, bits 20-23 = 0x5 -> 0x5_3C00_A = bytes 0A C0 53
    types, root = padded(T.FLOAT16, [], 4)
    v = view(make_struct_value("h", root, raw_data=bytes([0x0A, 0xC0, 0x53])), types)
    assert v["x"].dtype == np.float16 and float(v["x"]) == 1.0
    assert v["lead.bits"].tolist() == [0xA] and v["trail.bits"].tolist() == [0x5]


def test_golden_int4_nibbles_and_int32_little_endian():
    root = make_structure([make_field("q", make_tensor_type(T.INT4, [4])), make_field("n", T.INT32)])
    v = view(make_struct_value("g", root, raw_data=bytes([0xF7, 0x80, 0x01, 0x02, 0x03, 0x84])))
    assert v["q"].astype(np.int8).tolist() == [7, -1, 0, -8]
    assert int(v["n"]) == int.from_bytes(bytes([0x01, 0x02, 0x03, 0x84]), "little", signed=True)


# ---------------------------------------------------------------------- every type, every phase
@pytest.fixture(params=["auto", "gather"])
def route(request, monkeypatch):
    """Route "auto": the routes view picks; "gather": the phase-column route disabled, so every
    non-zero-copy, non-row leaf goes through the general gather (both must match the oracle)."""
    if request.param == "gather":
        monkeypatch.setattr(bits_module, "phase_columns", lambda *args: None)
    return request.param


@pytest.mark.parametrize("elem_type", sorted(ORACLE_WIDTHS), ids=lambda t: T.DataType.Name(t))
def test_every_type_at_every_bit_phase(elem_type, route):
    for shape, types, root, payload in phase_cases(elem_type):
        got = assert_matches_oracle(root, payload, types)
        assert got["x"].shape == tuple(shape)
        assert got["x"].dtype == np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


@pytest.mark.parametrize("width", range(1, 65))
def test_components_of_every_width_at_every_phase_ending_at_buffer_end(width, route):
    # The last element ends exactly on the last payload bit, so any over-read would raise.
    for phase in range(8):
        tail = -(phase + 3 * width) % 8
        components = ([("lead", phase)] if phase else []) + [("x", width)]
        types = [make_bit_packing([("c", width)], 3)]
        fields = ([make_field("p", make_type_reference(1))] if phase else []) + [
            make_field("x", make_type_reference(0))
        ]
        types.append(make_bit_packing(components[:1], 1) if phase else make_bit_packing([("u", 1)], 1))
        root = make_structure(fields)
        size_bits = phase + 3 * width
        if tail:  # put the slack before the leaf so the leaf still ends at the buffer end
            types[1] = make_bit_packing([("lead", phase + tail)], 1)
            root = make_structure([make_field("p", make_type_reference(1)), make_field("x", make_type_reference(0))])
            size_bits += tail
        payload = np.frombuffer(random_bytes(size_bits // 8), np.uint8)
        got = assert_matches_oracle(root, payload.tobytes(), types)
        assert got["x.c"].shape == (3,)
        # the same through an exact-size buffer (a slice of a bigger array)
        big = np.concatenate([payload, np.full(8, 0xFF, np.uint8)])
        exact = view_buffer(big[: payload.size], root, types)
        assert same_bits(exact["x.c"], got["x.c"])


def test_sub_byte_rows_inside_records_and_at_nibble_phase():
    # Q4_0-like records with INT4 values (rows path), uint2 and 1-bit components, and a
    # nibble-phase start (skip) inside every record.
    types = [
        make_bit_packing([("half", 4)], 1),
        make_structure(
            [
                make_field("d", T.FLOAT16),
                make_field("q", make_tensor_type(T.INT4, [32])),
                make_field("h", make_type_reference(0)),
                make_field("u", make_tensor_type(T.UINT2, [6])),
                make_field("f", make_type_reference(2)),
                make_field("g", make_tensor_type(T.INT4, [3])),
            ]
        ),
        make_bit_packing([("flag", 1)], 12),
    ]
    size = onnx_struct.size_in_bits(types[1], types)
    assert size % 8 == 0
    root = make_array(make_type_reference(1), 7)
    got = assert_matches_oracle(root, random_bytes(7 * size // 8), types)
    assert got["q"].shape == (7, 32) and got["f.flag"].shape == (7, 12)


def test_contiguous_int4_leaf_large_enough_for_several_chunks():
    root = make_structure(
        [make_field("values", make_tensor_type(T.INT4, [3 * (1 << 16) + 2])), make_field("n", T.UINT8)]
    )
    payload = random_bytes((3 * (1 << 16) + 2) // 2 + 1)
    v = view(make_struct_value("big", root, raw_data=payload))
    packed = np.frombuffer(payload[:-1], np.uint8)
    expected = np.stack([packed & 0xF, packed >> 4], axis=1).reshape(-1)  # numpy oracle: low nibble first
    assert np.array_equal(v["values"].view(np.uint8), expected)


def test_nested_arrays_of_structures_with_bit_packings_and_constants():
    types = [
        make_bit_packing([("lo", 3), ("hi", 5), ("s", 6)], 2),  # 28 bits
        make_structure(
            [
                make_field("d", T.FLOAT16),
                make_field("bp", make_type_reference(0)),
                make_constant_field("k", np.array([1.5, 2.5], np.float32)),
                make_field("q", make_tensor_type(T.INT4, [3])),
                make_field("c", T.COMPLEX64),
                make_field("b", T.BOOL),
            ]
        ),  # 16 + 28 + 12 + 64 + 8 = 128 bits
        make_array(make_type_reference(1), 3),
    ]
    root = make_structure(
        [make_field("rows", make_type_reference(2)), make_field("tag", make_tensor_type(T.UINT16, [2]))]
    )
    root_array = make_array(make_type_reference(3), 2)
    types.append(root)
    got = assert_matches_oracle(root_array, random_bytes(2 * (3 * 16 + 4)), types)
    assert got["rows.bp.hi"].shape == (2, 3, 2)
    assert got["rows.q"].shape == (2, 3, 3)
    assert got["rows.k"].tolist() == [1.5, 2.5]  # constants are not broadcast
    assert got["tag"].shape == (2, 2)


def test_proposal_example_linear_int4_128():
    root = make_structure(
        [
            make_field("values", make_tensor_type(T.INT4, [128])),
            make_constant_field("scale", np.float32(0.125)),
            make_constant_field("zero_point", np.int64(0)),
        ],
        name="LINEAR_INT4_128",
    )
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    (index,) = add_struct_types(model, root)
    values = np.arange(128) % 16 - 8
    payload = bytes(((values[0::2] & 0xF) | ((values[1::2] & 0xF) << 4)).astype(np.uint8))
    add_struct_values(model, make_struct_value("weight", index, raw_data=payload))
    v = view("weight", model)
    assert v.nbytes == 64 and v.paths == ["values", "scale", "zero_point"]
    assert v["values"].astype(np.int64).tolist() == values.tolist()
    assert v["scale"].dtype == np.float32 and float(v["scale"]) == 0.125 and v["scale"].shape == ()
    assert int(v["zero_point"]) == 0
    assert "values" in v and "nope" not in v and len(v) == 3
    assert [leaf.path for leaf in v.layout] == v.paths


def test_single_unnamed_leaf_has_empty_path():
    v = view(make_struct_value("w", make_array(T.INT4, 4), raw_data=bytes([0x21, 0x43])))
    assert v.paths == [""] and v[""].astype(int).tolist() == [1, 2, 3, 4]


def test_zero_length_arrays():
    types = [make_structure([make_field("a", T.FLOAT), make_constant_field("z", np.int8(3))])]
    for root in (
        make_array(T.INT4, 0),
        make_array(make_type_reference(0), 0),
        make_bit_packing([("a", 3), ("b", 5)], 0),
        make_structure([make_field("e", make_tensor_type(T.FLOAT16, [0, 4])), make_field("x", T.UINT8)]),
    ):
        size = onnx_struct.size_in_bits(root, types) // 8
        got = assert_matches_oracle(root, random_bytes(size), types)
        assert any(0 in array.shape for array in got.values())


def test_empty_leaf_with_a_dimension_numpy_cannot_hold_is_a_validation_error():
    # uint64 dimension 2**64 - 1 of zero-size elements: 0 bits, but no numpy shape holds the leaf,
    # so the declaration is refused (docs/semantics.md, "Leaf shapes") before any view exists
    root = make_array(make_tensor_type(T.UINT8, [0]), (1 << 64) - 1)
    with pytest.raises(ValidationError, match=r"^struct value 'w'\.array: .*numpy"):
        view(make_struct_value("w", root, raw_data=b""))


def test_zero_copy_views_are_read_only_and_share_the_payload():
    root = make_array(make_type_reference(0), 4)
    types = [make_structure([make_field("d", T.FLOAT16), make_field("qs", make_tensor_type(T.UINT8, [16]))])]
    payload = np.frombuffer(random_bytes(72), np.uint8).copy()
    v = view_buffer(payload, root, types)
    d = v["d"]
    assert np.shares_memory(d, payload) and not d.flags.writeable
    assert d.strides == (18,) and v["qs"].strides == (18, 1)
    with pytest.raises(ValueError):
        d[0] = 1


def test_unknown_leaf_lists_valid_paths():
    v = view(make_struct_value("w", make_bit_packing([("a", 3), ("b", 5)], 1), raw_data=b"\x00"))
    with pytest.raises(LeafNotFoundError) as info:
        v["c"]
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValidationError)
    assert "'a'" in str(info.value) and "'b'" in str(info.value) and "'w'" in str(info.value)


# ---------------------------------------------------------------------- sizes and errors
def test_wrong_inline_size_names_the_value():
    with pytest.raises(ValidationError, match="weight.*64"):
        view(make_struct_value("weight", make_array(T.INT4, 128), raw_data=bytes(63)))


def test_value_name_lookup_errors():
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    with pytest.raises(ValidationError, match="no struct value named 'x'"):
        view("x", model)
    with pytest.raises(ValidationError, match="without a model"):
        view("x")
    with pytest.raises(ValidationError, match="type index 0 is out of range"):
        view(make_struct_value("w", 0, raw_data=b""))


def test_root_size_not_byte_aligned_is_rejected():
    with pytest.raises(ValidationError, match="whole number of bytes"):
        view(make_struct_value("w", make_array(T.INT4, 3), raw_data=bytes(2)))


def _external_model(tmp_path, payload: bytes, at: int, **entries):
    root = make_structure([make_field("d", T.FLOAT16), make_field("q", make_tensor_type(T.INT4, [4]))])
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    (index,) = add_struct_types(model, root)
    data = {"location": "weights.bin", "offset": at, "length": len(payload)} | entries
    data = {k: v for k, v in data.items() if v is not None}
    add_struct_values(model, make_struct_value("w", index, external_data=data))
    (tmp_path / "weights.bin").write_bytes(random_bytes(at) + payload + b"\xee" * 3)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return path


def test_external_payload_at_an_offset(tmp_path):
    payload = bytes([0x00, 0x3C, 0x21, 0x43])  # d = 1.0, q = 1 2 3 4
    path = _external_model(tmp_path, payload, at=4097)
    for v in (view("w", path), view("w", str(path)), view("w", onnx.load(path), base_dir=tmp_path)):
        assert float(v["d"]) == 1.0 and v["q"].astype(int).tolist() == [1, 2, 3, 4]
    proto = onnx_struct.get_struct_values(path)[0]
    v = view(proto, path)
    assert v.nbytes == 4


def test_external_payload_to_end_of_file_without_length(tmp_path):
    payload = bytes([0x00, 0x3C, 0x21, 0x43])
    path = _external_model(tmp_path, payload, at=10, length=None)
    (tmp_path / "weights.bin").write_bytes(bytes(10) + payload)
    assert float(view("w", path)["d"]) == 1.0


@pytest.fixture
def no_reads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("payload was read before the size was verified")

    monkeypatch.setattr(external_module, "read_range", refuse)


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        ({"length": 5}, "length is 5 bytes; the type requires 4"),
        ({"location": "../weights.bin"}, r"contains '\.\.'"),
        ({"location": "/etc/passwd"}, "absolute"),
        ({"location": "missing.bin"}, "cannot be opened"),
        ({"offset": 1 << 20}, "past the end"),
        ({"offset": "x"}, "not a non-negative decimal"),
        ({"location": "weights\x00.bin"}, "NUL character"),  # os calls would raise ValueError
    ],
)
def test_external_errors_are_raised_before_any_read(tmp_path, no_reads, entries, match):
    path = _external_model(tmp_path, bytes(4), at=8, **entries)
    with pytest.raises(ValidationError, match=match) as info:
        view("w", path)
    assert "'w'" in str(info.value)


def test_external_short_file_and_to_end_length_mismatch(tmp_path, no_reads):
    path = _external_model(tmp_path, bytes(4), at=8)
    (tmp_path / "weights.bin").write_bytes(bytes(10))
    with pytest.raises(ValidationError, match="fewer than offset 8"):
        view("w", path)
    path = _external_model(tmp_path, bytes(4), at=8, length=None)  # 4 + 3 trailing bytes to the end
    with pytest.raises(ValidationError, match="length is 7 bytes; the type requires 4"):
        view("w", path)


def test_external_symlink_escaping_the_directory(tmp_path, no_reads):
    inner = tmp_path / "m"
    inner.mkdir()
    path = _external_model(inner, bytes(4), at=0, location="link.bin")
    (tmp_path / "outside.bin").write_bytes(bytes(4))
    (inner / "link.bin").symlink_to(tmp_path / "outside.bin")
    with pytest.raises(ValidationError, match="outside the model directory"):
        view("w", path)


def test_external_symlink_loop(tmp_path, no_reads):
    path = _external_model(tmp_path, bytes(4), at=0, location="a.bin")
    (tmp_path / "a.bin").symlink_to(tmp_path / "b.bin")
    (tmp_path / "b.bin").symlink_to(tmp_path / "a.bin")
    with pytest.raises(ValidationError, match=r"'w'\)\.external_data: .*'a\.bin' cannot be resolved"):
        view("w", path)
    (error,) = onnx_struct.validate(path)
    assert "cannot be resolved" in str(error)


def test_external_without_base_dir(no_reads):
    value = make_struct_value("w", make_array(T.UINT8, 4), external_data={"location": "x.bin", "length": 4})
    with pytest.raises(ValidationError, match="no base directory"):
        view(value)


def test_both_inline_and_external_is_rejected():
    value = make_struct_value("w", make_array(T.UINT8, 1), raw_data=b"\x00", external_data={"location": "x.bin"})
    with pytest.raises(ValidationError, match="both inline"):
        view(value, base_dir=".")


@pytest.mark.parametrize("elem_type", [T.FLOAT16, T.INT32, T.COMPLEX128, T.BOOL, T.FLOAT8E5M2])
def test_unaligned_leaf_whose_last_element_is_aligned_and_ends_the_buffer(elem_type, route):
    # Records {pad: 4 bits, x} x 2: x of record 0 starts at bit 4, x of record 1 at a byte
    # boundary and ends on the payload's last bit; fetching "the next byte" there would overrun.
    width = ORACLE_WIDTHS[elem_type]
    types = [
        make_bit_packing([("p", 4)], 1),
        make_structure([make_field("pad", make_type_reference(0)), make_field("x", elem_type)]),
    ]
    root = make_array(make_type_reference(1), 2)
    payload = np.frombuffer(random_bytes((2 * (4 + width)) // 8), np.uint8)
    assert_matches_oracle(root, payload.tobytes(), types)
    assert same_bits(view_buffer(payload, root, types)["x"], oracle_arrays(root, payload.tobytes(), types)["x"])


def test_deep_nesting_is_viewed_without_recursion():
    # 3000 nested structures: valid (no depth limit in the proposal), and far deeper than Python's
    # recursion limit, so leaves are built bottom-up like sizes are.
    depth = 3000
    types = [make_structure([make_field("x", T.UINT8)])]
    types += [make_structure([make_field("x", make_type_reference(i))]) for i in range(depth)]
    root = make_array(make_type_reference(depth), 2)
    v = view(make_struct_value("w", root, raw_data=b"\x05\x07"), types)
    (path,) = v.paths
    assert path == ".".join(["x"] * (depth + 1))
    assert v[path].tolist() == [5, 7]
    assert onnx_struct.pack({path: [5, 7]}, root, types) == b"\x05\x07"


def test_leaf_limit_is_enforced_while_enumerating(monkeypatch):
    # Shared references fan out exponentially: level k has 2**k leaves. A structure of many fields
    # each referencing a large level must be refused once the limit is passed, not after all
    # fields * 2**k leaves were built.
    from onnx_struct.layout import leaves
    from onnx_struct.layout import table as layout

    monkeypatch.setattr(leaves, "MAX_LEAVES", 1000)  # checked where leaf shapes are computed
    types = [make_structure([make_field("a", T.UINT8), make_field("b", T.UINT8)])]
    for level in range(1, 9):  # level 8: 512 leaves
        types.append(make_structure([make_field(n, make_type_reference(level - 1)) for n in "ab"]))
    root = make_structure([make_field(f"f{k}", make_type_reference(8)) for k in range(200)])
    built = []
    original = layout.tensor_leaf
    monkeypatch.setattr(layout, "tensor_leaf", lambda *a: built.append(1) or original(*a))
    with pytest.raises(ValidationError, match="more than 1000 leaves"):
        view_buffer(bytes(onnx_struct.size_in_bits(root, types) // 8), root, types)
    assert not built  # leaves are counted per declaration, none is built for a refused root


@pytest.mark.parametrize("kind", ["field", "component"])
def test_name_that_is_not_utf8_is_a_validation_error(kind):
    # proto2 does not validate UTF-8 on parse: such a name arrives as bytes, never as a leaf path
    if kind == "field":
        declaration = make_structure([make_field("Z", T.UINT8)])
    else:
        declaration = make_bit_packing([("Z", 8)], 1)
    data = declaration.SerializeToString().replace(b"\n\x01Z", b"\n\x01\xff")
    hostile = onnx_struct.StructTypeProto.FromString(data)
    with pytest.raises(ValidationError, match=rf"{kind}\[0\] \(b'\\xff'\): {kind} name is not valid UTF-8"):
        view(make_struct_value("w", hostile, raw_data=b"\x01"))
