"""Hostile decoders: each is refused by check_model (both modes), infer_shapes, decode (both
runtimes), encode and InferenceSession alike, with a ValidationError naming the decoder, in
bounded time and memory (docs/security.md, "Decoder safety policy").

A valid model with a huge declaration is checked by shapes only: its full check costs no memory
per element.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper

import onnx_struct as S
from adversarial.bounded import run_bounded
from onnx_struct.check import inference

OPSET = [oh.make_opsetid("", 21)]
DOMAIN = "hostile"


def const(name: str, array) -> onnx.NodeProto:
    return oh.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


def decoder(nodes, inputs=("values",), name="dec", domain=DOMAIN, opset=OPSET) -> onnx.FunctionProto:
    return oh.make_function(domain, name, list(inputs), ["y"], nodes, opset)


def cast(source="values", target="y") -> onnx.NodeProto:
    return oh.make_node("Cast", [source], [target], to=T.FLOAT)


def value_model(function: onnx.FunctionProto, count: int = 4, elem_type: int = T.UINT8, functions=()) -> bytes:
    """A model holding struct value W of ``{values: elem_type[count]}`` decoded by ``function``,
    consumed by an Identity; the payload is zeros."""
    declaration = S.make_structure([S.make_field("values", S.make_tensor_type(elem_type, [count]))], decoder=function)
    graph = oh.make_graph(
        [oh.make_node("Identity", ["W"], ["Y"])], "g", [], [oh.make_tensor_value_info("Y", T.FLOAT, [count])]
    )
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=10, functions=list(functions))
    S.add_struct_types(model, declaration)
    nbytes = -(-count * {T.UINT8: 8, T.INT4: 4}[elem_type] // 8)
    S.add_struct_values(model, S.make_struct_value("W", 0, raw_data=bytes(nbytes)))
    return model.SerializeToString()


# Every entry point that could run or type a decoder; each must refuse the hostile model.
REFUSED_EVERYWHERE = r"""
import warnings
warnings.simplefilter("ignore")  # onnxruntime -> reference fallbacks warn
path, prefix = ARG["path"], ARG["prefix"]
decl = S.get_struct_types(onnx.load(path, load_external_data=False))[0]
operations = {
    "check_model": lambda: S.check_model(path),
    "check_model(full_check=True)": lambda: S.check_model(path, full_check=True),
    "infer_shapes": lambda: S.infer_shapes(path),
    "decode(onnxruntime)": lambda: S.decode("W", path),
    "decode(reference)": lambda: S.decode("W", path, runtime="reference"),
    "InferenceSession": lambda: S.InferenceSession(path),
    "lower": lambda: S.lower(path),
}
last = None
for label, call in operations.items():
    try:
        call()
    except S.ValidationError as error:
        if not (error.path or "").startswith(prefix):
            raise AssertionError(f"{label}: path {error.path!r} does not start with {prefix!r}: {error}")
        last = error
    else:
        raise AssertionError(f"{label} accepted the hostile decoder")
raise last
"""


def _loop_2_62() -> bytes:
    body = oh.make_graph(
        [oh.make_node("Identity", ["v_in"], ["v_out"]), oh.make_node("Identity", ["c_in"], ["c_out"])],
        "body",
        [
            oh.make_tensor_value_info("i", T.INT64, []),
            oh.make_tensor_value_info("c_in", T.BOOL, []),
            oh.make_tensor_value_info("v_in", T.FLOAT, [4]),
        ],
        [oh.make_tensor_value_info("c_out", T.BOOL, []), oh.make_tensor_value_info("v_out", T.FLOAT, [4])],
    )
    nodes = [
        cast("values", "f"),
        const("m", np.int64(2**62)),
        const("c", np.bool_(True)),
        oh.make_node("Loop", ["m", "c", "f"], ["y"], body=body),
    ]
    return value_model(decoder(nodes))


def _constant_of_shape_4gib() -> bytes:
    value = numpy_helper.from_array(np.array([1], np.uint8), "v")
    nodes = [const("s", np.array([2**32], np.int64)), oh.make_node("ConstantOfShape", ["s"], ["y"], value=value)]
    return value_model(decoder(nodes))


def _outer_product_4gib() -> bytes:
    # 64 KiB of payload broadcast against itself: a 2^32-element uint8 result.
    nodes = [
        const("column", np.array([65536, 1], np.int64)),
        const("row", np.array([1, 65536], np.int64)),
        oh.make_node("Reshape", ["values", "column"], ["a"]),
        oh.make_node("Reshape", ["values", "row"], ["b"]),
        oh.make_node("Add", ["a", "b"], ["y"]),
    ]
    return value_model(decoder(nodes), count=65536)


def _self_recursive() -> bytes:
    nodes = [cast("values", "f"), oh.make_node("dec", ["f"], ["y"], domain=DOMAIN)]
    return value_model(decoder(nodes, opset=[*OPSET, oh.make_opsetid(DOMAIN, 1)]))


def _recursive_through_model_functions() -> bytes:
    helper = oh.make_function(
        "helpers",
        "helper",
        ["x"],
        ["z"],
        [oh.make_node("dec", ["x"], ["z"], domain=DOMAIN)],
        [oh.make_opsetid(DOMAIN, 1)],
    )
    nodes = [cast("values", "f"), oh.make_node("helper", ["f"], ["y"], domain="helpers")]
    function = decoder(nodes, opset=[*OPSET, oh.make_opsetid("helpers", 1)])
    return value_model(function, functions=[helper])


def _non_utf8(field: str) -> bytes:
    marker = "zzdecoderzz"
    function = decoder([cast()], **{field: marker})
    data = value_model(function)
    assert data.count(marker.encode()) == 1
    return data.replace(marker.encode(), b"zzdecoder\xff\xfe")


# An unknown group (wire type 3) holding field number 0, in place of a node's doc_string (same
# length). upb (Python's protobuf) parses it and keeps it as an unknown field; onnx's C++ protobuf
# refuses the bytes ("Unable to parse proto"), so onnx.checker.check_function's ValueError escaped
# from every entry point (found by the long fuzz run on decode, on 4fd4734).
GROUP_WITH_FIELD_0 = bytes([0x73, 0x05, 1, 2, 3, 4, 0x74, 0x78, 0, 0x78, 0])


def with_group_with_field_0(data: bytes, marker: str = "zzgroupzz") -> bytes:
    old = bytes([0x32, len(marker)]) + marker.encode()
    assert data.count(old) == 1 and len(old) == len(GROUP_WITH_FIELD_0)
    return data.replace(old, GROUP_WITH_FIELD_0)


def _unknown_group_with_field_0() -> bytes:
    node = cast()
    node.doc_string = "zzgroupzz"
    return with_group_with_field_0(value_model(decoder([node])))


def _cast_to_0() -> bytes:
    return value_model(decoder([oh.make_node("Cast", ["values"], ["y"], to=0)]))


def _constant_of_type_255() -> bytes:
    tensor = onnx.TensorProto(name="c", data_type=255, dims=[4], raw_data=bytes(16))
    return value_model(decoder([oh.make_node("Constant", [], ["y"], value=tensor)]))


def _named_like_a_standard_operator() -> bytes:
    return value_model(decoder([cast()], name="Relu", domain=""))


def _random() -> bytes:
    return value_model(decoder([oh.make_node("RandomNormal", [], ["y"], shape=[4])]))


def _data_dependent_shape() -> bytes:
    return value_model(decoder([oh.make_node("NonZero", ["values"], ["n"]), cast("n", "y")]))


def _sparse_constant_of_4_tib() -> bytes:
    sparse = oh.make_sparse_tensor(
        oh.make_tensor("v", T.FLOAT, [0], []), oh.make_tensor("i", T.INT64, [0], []), [2**40]
    )
    return value_model(decoder([oh.make_node("Constant", [], ["y"], sparse_value=sparse)]))


def _reshape_by(shape_node: onnx.NodeProto) -> bytes:
    return value_model(decoder([cast("values", "f"), shape_node, oh.make_node("Reshape", ["f", "s"], ["y"])]))


def _range_wrapping_int64() -> bytes:
    # onnx types Range(INT64_MIN, INT64_MAX, 2^38) as 0 elements (wrapping arithmetic); onnxruntime
    # made 2^26 of them (1.1 GiB) from a 4-byte payload (found by a red-team pass).
    nodes = [
        const("start", np.int64(-(2**63))),
        const("limit", np.int64(2**63 - 1)),
        const("delta", np.int64(2**38)),
        oh.make_node("Range", ["start", "limit", "delta"], ["r"]),
        cast("values", "f"),
        oh.make_node("ReduceSum", ["f"], ["y"], keepdims=0),
    ]
    return value_model(decoder(nodes))


def _int64_division_by_a_payload_value() -> bytes:
    # onnxruntime's int64 Div of INT64_MIN by -1 killed the process (SIGFPE; red-team pass).
    nodes = [
        oh.make_node("Cast", ["values"], ["v"], to=T.INT64),
        const("one", np.int64(1)),
        oh.make_node("Sub", ["v", "one"], ["d"]),
        const("minimum", np.full(4, -(2**63), np.int64)),
        oh.make_node("Div", ["minimum", "d"], ["q"]),
        cast("q", "y"),
    ]
    return value_model(decoder(nodes))


def _shape_chain(pairs: int) -> bytes:
    # Each Shape -> Reshape pair needed one more run of onnx's inference: quadratic (red-team pass).
    nodes, x = [cast("values", "x0")], "x0"
    for i in range(pairs):
        nodes += [oh.make_node("Shape", [x], [f"s{i}"]), oh.make_node("Reshape", [x, f"s{i}"], [f"x{i + 1}"])]
        x = f"x{i + 1}"
    nodes.append(oh.make_node("Identity", [x], ["y"]))
    return value_model(decoder(nodes))


HOSTILE = {
    "range_wrapping_int64": (_range_wrapping_int64, "Range is not allowed"),
    "int64_division_by_a_payload_value": (_int64_division_by_a_payload_value, "constant without 0 or -1"),
    "shape_chain_2047": (lambda: _shape_chain(2047), "more than 16 deep"),
    "loop_2_62": (_loop_2_62, "Loop"),
    "constant_of_shape_4gib": (_constant_of_shape_4gib, "ConstantOfShape"),
    "outer_product_4gib": (_outer_product_4gib, "bytes"),
    "self_recursive": (_self_recursive, "'hostile'"),
    "recursive_through_model_functions": (_recursive_through_model_functions, "'helpers'"),
    "non_utf8_name": (lambda: _non_utf8("name"), "UTF-8"),
    "non_utf8_domain": (lambda: _non_utf8("domain"), "UTF-8"),
    "cast_to_0": (_cast_to_0, "Cast"),
    "unknown_group_with_field_0": (_unknown_group_with_field_0, "Unable to parse proto"),
    "constant_of_type_255": (_constant_of_type_255, "255"),
    "named_like_a_standard_operator": (_named_like_a_standard_operator, "Relu"),
    "named_like_a_standard_operator_in_ai_onnx": (
        lambda: value_model(decoder([cast()], name="Relu", domain="ai.onnx")),
        "Relu",
    ),
    "random": (_random, "RandomNormal"),
    "data_dependent_shape": (_data_dependent_shape, "NonZero"),
    "sparse_constant_of_4_tib": (_sparse_constant_of_4_tib, "sparse"),
    # decode's trailing-Reshape shortcut read these shape constants without checking them
    "reshape_by_float_shape": (lambda: _reshape_by(const("s", np.array([2.5, 1.5], np.float32))), ""),
    "reshape_by_2d_shape": (lambda: _reshape_by(const("s", np.array([[4]], np.int64))), ""),
    "reshape_by_too_many_zeros": (lambda: _reshape_by(const("s", np.array([0, 0, 0], np.int64))), ""),
    "reshape_by_two_minus_ones": (lambda: _reshape_by(const("s", np.array([-1, -1], np.int64))), ""),
    "reshape_by_wrong_count": (lambda: _reshape_by(const("s", np.array([5], np.int64))), ""),
    "reshape_by_strings": (lambda: _reshape_by(oh.make_node("Constant", [], ["s"], value_strings=["4"])), ""),
    "reshape_by_missing_value": (lambda: _reshape_by(oh.make_node("Constant", [], ["s"])), ""),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_decoder_is_refused_everywhere(case, tmp_path):
    build, contains = HOSTILE[case]
    path = tmp_path / "model.onnx"
    path.write_bytes(build())
    out = run_bounded(
        REFUSED_EVERYWHERE, {"path": str(path), "prefix": "struct_types[0]"}, cpu_seconds=20, memory_mib=200
    )
    out.assert_validation_error("struct_types[0]", contains=contains)


@pytest.mark.parametrize("op", ["Div", "Mod"])
def test_integer_division_by_constants_is_allowed(op):
    """The rule refuses only divisors that are not constants without 0 and -1."""
    nodes = [
        oh.make_node("Cast", ["values"], ["v"], to=T.INT32),
        const("by", np.array([3, -2, 5, 7], np.int32)),
        oh.make_node(op, ["v", "by"], ["q"]),
        cast("q", "y"),
    ]
    model = onnx.load_from_string(value_model(decoder(nodes)))
    values = np.array([200, 7, 100, 255], np.uint8)
    overlay = S.from_onnx(model)
    overlay.graph.struct_initializer[0].raw_data = values.tobytes()
    model = S.to_onnx(overlay)
    S.check_model(model, full_check=True)
    divisor = np.array([3, -2, 5, 7], np.int64)
    expected = np.trunc(values / divisor) if op == "Div" else np.mod(values.astype(np.int64), divisor)
    np.testing.assert_array_equal(S.decode("W", model), expected.astype(np.float32))
    np.testing.assert_array_equal(S.decode("W", model, runtime="reference"), expected.astype(np.float32))


@pytest.mark.parametrize("divisor", [[3, 2, 5, 7], [3, 0, 5, 7], [3, -1, 5, 7]])
def test_a_constant_leaf_divisor_is_read_for_the_rule(divisor):
    """A divisor from a constant field of the declaration counts as a constant (without 0 or -1)."""
    nodes = [
        oh.make_node("Cast", ["values"], ["v"], to=T.INT32),
        oh.make_node("Div", ["v", "by"], ["q"]),
        cast("q", "y"),
    ]
    declaration = S.make_structure(
        [
            S.make_field("values", S.make_tensor_type(T.UINT8, [4])),
            S.make_constant_field("by", np.array(divisor, np.int32)),
        ],
        decoder=decoder(nodes, inputs=("values", "by")),
    )
    graph = oh.make_graph([], "g", [], [])
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    S.add_struct_types(model, declaration)
    S.add_struct_values(model, S.make_struct_value("W", 0, raw_data=bytes([200, 7, 100, 255])))
    if 0 in divisor or -1 in divisor:
        with pytest.raises(S.ValidationError, match="constant without 0 or -1"):
            S.check_model(model)
        return
    S.check_model(model, full_check=True)
    expected = np.trunc(np.array([200, 7, 100, 255]) / np.array(divisor)).astype(np.float32)
    np.testing.assert_array_equal(S.decode("W", model), expected)


@pytest.mark.slow
def test_hostile_encoder_is_refused_by_check_model_and_encode(tmp_path):
    """Encoders follow the same policy: a Loop encoder never runs."""
    body = oh.make_graph(
        [oh.make_node("Identity", ["c_in"], ["c_out"])],
        "body",
        [oh.make_tensor_value_info("i", T.INT64, []), oh.make_tensor_value_info("c_in", T.BOOL, [])],
        [oh.make_tensor_value_info("c_out", T.BOOL, [])],
    )
    encoder = oh.make_function(
        DOMAIN,
        "enc",
        ["x"],
        ["values"],
        [
            const("m", np.int64(2**62)),
            const("c", np.bool_(True)),
            oh.make_node("Loop", ["m", "c"], [], body=body),
            oh.make_node("Cast", ["x"], ["values"], to=T.UINT8),
        ],
        OPSET,
    )
    declaration = S.make_structure(
        [S.make_field("values", S.make_tensor_type(T.UINT8, [4]))], decoder=decoder([cast()]), encoder=encoder
    )
    graph = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["Y"])],
        "g",
        [oh.make_tensor_value_info("X", T.FLOAT, [1])],
        [oh.make_tensor_value_info("Y", T.FLOAT, [1])],
    )
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    S.add_struct_types(model, declaration)
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    code = r"""
for call in (lambda: S.check_model(ARG), lambda: S.encode(np.zeros(4, np.float32), 0, ARG),
             lambda: S.encode(np.zeros(4, np.float32), 0, ARG, runtime="reference")):
    try:
        call()
    except S.ValidationError as error:
        assert error.path.startswith("struct_types[0].encoder"), error
        last = error
    else:
        raise AssertionError("accepted")
raise last
"""
    out = run_bounded(code, str(path), cpu_seconds=20, memory_mib=200)
    out.assert_validation_error("struct_types[0].encoder", contains="Loop")


def _expanding_encoder(copies: int) -> onnx.FunctionProto:
    """An encoder of ``x [n]`` float32 whose one intermediate is ``copies`` copies of ``x``."""
    return oh.make_function(
        DOMAIN,
        "enc",
        ["x"],
        ["values"],
        [
            const("shape", np.array([copies, 1], np.int64)),
            const("axes", np.array([0], np.int64)),
            oh.make_node("Expand", ["x", "shape"], ["big"]),
            oh.make_node("ReduceMax", ["big", "axes"], ["top"], keepdims=0),
            oh.make_node("Cast", ["top"], ["values"], to=T.UINT8),
        ],
        OPSET,
    )


def test_an_encoder_gets_the_encoder_factor_and_no_more():
    """The same function is refused as a decoder (256 bytes per input byte) and accepted with an
    encoder's ENCODER_EXPANSION (1,024): 512 float32 copies of a 1 MiB input, 512 MiB."""
    from onnx_struct import limits
    from onnx_struct.functions import policy as decoder_policy

    inputs = [("x", oh.make_tensor_type_proto(T.FLOAT, [1 << 18]))]
    with pytest.raises(S.ValidationError) as refused:
        decoder_policy.check_sizes(_expanding_encoder(512), inputs, [], "enc")
    assert refused.value.code == "limit_exceeded" and refused.value.details["limit"] < 512 << 20
    decoder_policy.check_sizes(_expanding_encoder(512), inputs, [], "enc", expansion=limits.ENCODER_EXPANSION)
    with pytest.raises(S.ValidationError, match="over the policy's budget") as over:
        decoder_policy.check_sizes(_expanding_encoder(1100), inputs, [], "enc", expansion=limits.ENCODER_EXPANSION)
    assert over.value.details["limit"] == limits.ENCODER_EXPANSION * (1 << 20) + limits.FUNCTION_BASE_BYTES


def test_encode_refuses_an_encoder_over_the_encoder_factor_before_running_it():
    """encode checks the encoder with ENCODER_EXPANSION before building a session: 1,500 copies
    of a 1 MiB input (1.5 GiB, over 1,024 x (1 MiB in + 256 KiB written) + 64 MiB) are refused
    without being allocated."""
    declaration = S.make_structure(
        [S.make_field("values", S.make_tensor_type(T.UINT8, [1 << 18]))],
        decoder=decoder([cast()]),
        encoder=_expanding_encoder(1500),
    )
    with pytest.raises(S.ValidationError, match="over the policy's budget of 1409286144 bytes") as refused:
        S.encode(np.zeros(1 << 18, np.float32), declaration)
    assert refused.value.path.startswith("struct_type.encoder")


# ---------------------------------------------------------------------- huge valid declarations
@pytest.mark.slow
@pytest.mark.parametrize("count", [10**7, 10**8])
def test_full_check_of_a_huge_declaration_costs_no_memory_per_element(count, tmp_path):
    """A 144-byte model: {values: INT4[count]} with a Cast decoder, as a struct-typed graph input.
    Its logical type FLOAT[count] is inferred from shapes alone (data propagation cost ~210 bytes
    per element: 2.1 GB at 10^7)."""
    function = decoder([cast()])
    declaration = S.make_structure([S.make_field("values", S.make_tensor_type(T.INT4, [count]))], decoder=function)
    graph = oh.make_graph(
        [oh.make_node("Neg", ["W"], ["Y"])], "g", [], [oh.make_tensor_value_info("Y", T.FLOAT, [count])]
    )
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    (index,) = S.add_struct_types(model, declaration)
    S.add_value_infos(model, inputs=[S.make_struct_value_info("W", index)])
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    code = r"""
S.check_model(ARG["path"])
S.check_model(ARG["path"], full_check=True)
inferred = S.infer_shapes(ARG["path"])
(neg,) = [v for v in inferred.graph.value_info if v.name == "Y"] or [inferred.graph.output[0]]
assert [d.dim_value for d in neg.type.tensor_type.shape.dim] == [ARG["count"]], neg
"""
    out = run_bounded(code, {"path": str(path), "count": count}, cpu_seconds=5, memory_mib=100)
    assert out.error is None, f"{out.error}: {out.message}\n{out.traceback}"


@pytest.mark.slow
def test_full_check_of_a_4096x4096_iq4_xs_declaration_is_cheap(tmp_path):
    """The real-file case: check --full on a model with one IQ4_XS 4096 x 4096 weight took 10 s
    and 3.9 GB."""
    code = r"""
from onnx import helper as oh, TensorProto as T
from onnx_struct import formats
graph = oh.make_graph([oh.make_node("Neg", ["W"], ["Y"])], "g", [], [oh.make_tensor_value_info("Y", T.FLOAT, [4096, 4096])])
model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
index = formats.get("IQ4_XS").add_to_model(model, (4096, 4096))
S.add_value_infos(model, inputs=[S.make_struct_value_info("W", index)])
S.check_model(model, full_check=True)
"""
    out = run_bounded(code, None, cpu_seconds=10, memory_mib=150)
    assert out.error is None, f"{out.error}: {out.message}\n{out.traceback}"


@pytest.mark.slow
def test_decode_of_a_big_int4_value_needs_its_output_and_little_more(tmp_path):
    """10^7 INT4 elements (5 MB of payload) decode to 40 MB of float32: the policy's analysis
    adds nothing per element."""
    count = 10**7
    path = tmp_path / "model.onnx"
    path.write_bytes(value_model(decoder([cast()]), count=count, elem_type=T.INT4))
    code = r"""
y = S.decode("W", ARG["path"])
assert y.shape == (ARG["count"],) and y.dtype == np.float32 and not y.any()
"""
    out = run_bounded(code, {"path": str(path), "count": count}, cpu_seconds=10, memory_mib=250)
    assert out.error is None, f"{out.error}: {out.message}\n{out.traceback}"


# ---------------------------------------------------------------------- the stock graph
@pytest.mark.slow
def test_stock_graph_input_of_an_unknown_element_type_is_a_validation_error(tmp_path):
    graph = oh.make_graph(
        [oh.make_node("Add", ["X", "W"], ["Y"])],
        "g",
        [oh.make_tensor_value_info("X", 256, [4])],
        [oh.make_tensor_value_info("Y", T.FLOAT, [4])],
    )
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    S.add_struct_types(
        model, S.make_structure([S.make_field("values", S.make_tensor_type(T.UINT8, [4]))], decoder=decoder([cast()]))
    )
    S.add_struct_values(model, S.make_struct_value("W", 0, raw_data=bytes(4)))
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    out = run_bounded("S.check_model(ARG, full_check=True)", str(path), cpu_seconds=10, memory_mib=100)
    out.assert_validation_error("graph.input[0] ('X')", contains="256")


# ---------------------------------------------------------------------- InferenceSession inputs
SESSION = r"""
from onnx import helper as oh, TensorProto as T
function = oh.make_function("d", "dec", ["values"], ["y"], [oh.make_node("Cast", ["values"], ["y"], to=T.FLOAT)], [oh.make_opsetid("", 21)])
graph = oh.make_graph([oh.make_node("Neg", ["W"], ["Y"])], "g", [], [oh.make_tensor_value_info("Y", T.FLOAT, [8])])
model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
(index,) = S.add_struct_types(model, S.make_structure([S.make_field("values", S.make_tensor_type(T.UINT8, [8]))], decoder=function))
S.add_value_infos(model, inputs=[S.make_struct_value_info("W", index)])
session = S.InferenceSession(model)
payload = np.arange(16, dtype=np.uint8)[::2]  # 0, 2, ..., 14: not contiguous
expected = -payload.astype(np.float32)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "feed",
    [
        "payload",  # a strided array
        "memoryview(np.arange(16, dtype=np.uint8))[::2]",  # a strided memoryview
        "np.asfortranarray(payload.reshape(2, 4).copy())",  # Fortran order: the bytes in C order
        "memoryview(bytearray(payload.tobytes()))",
        "np.array([1.5, -2.0], dtype=np.float32)",  # any fixed-size numbers: their bytes
    ],
)
def test_session_takes_any_byte_layout_of_a_payload(feed):
    """Payload bytes are the buffer's elements' bytes in C order (numpy's tobytes), copied only
    when the buffer is not C-contiguous."""
    code = (
        SESSION
        + f"""
feed = {feed}
expected = -np.frombuffer(np.asarray(feed).tobytes(order="C"), np.uint8).astype(np.float32)
(y,) = session.run(None, {{'W': feed}})
np.testing.assert_array_equal(y, expected)
"""
    )
    out = run_bounded(code, cpu_seconds=10, memory_mib=200)
    assert out.error is None, f"{out.error}: {out.message}\n{out.traceback}"


@pytest.mark.slow
@pytest.mark.parametrize("feed", ["np.array([b'x'] * 8, dtype=object)", "np.array(['abcdefgh'])", "'payload as text'"])
def test_session_refuses_what_is_not_payload_bytes(feed):
    out = run_bounded(SESSION + f"session.run(None, {{'W': {feed}}})\n", cpu_seconds=10, memory_mib=200)
    out.assert_validation_error("input 'W'")


# ---------------------------------------------------------------------- the formats shipped
@pytest.mark.parametrize("shape", [(4, 512), (4096, 4096)])
def test_every_registered_format_passes_the_policy(shape):
    """Every registered format's decoder and encoder, at a small and a real weight shape (the
    budget is per input byte plus a fixed allowance, so the big shape is the binding one)."""
    from onnx_struct import formats, limits
    from onnx_struct.functions import policy as decoder_policy
    from onnx_struct.layout.table import TypeTable

    for name in formats.names():
        fmt = formats.get(name)
        assert 512 % fmt.block_size == 0, name
        table = TypeTable([fmt.block_declaration(), fmt.root_declaration(shape, 0)])
        root = table.declarations[1]
        logical = inference.logical_type(root, table, name)
        assert logical.tensor_type.elem_type == T.FLOAT, name
        assert [d.dim_value for d in logical.tensor_type.shape.dim] == list(shape), name
        if root.HasField("encoder"):
            decoder_policy.check_sizes(
                root.encoder,
                [("x", oh.make_tensor_type_proto(T.FLOAT, shape))],
                [],
                f"{name}.encoder",
                allowance_bytes=table.size(root, name) // 8,
                expansion=limits.ENCODER_EXPANSION,
            )


@pytest.mark.parametrize("full_check", [False, True])
def test_a_stock_node_onnx_cannot_parse_is_refused_by_both_checks(full_check, tmp_path):
    """The same group in a main-graph node: onnx refuses the file, and so must both checks (the
    plain check did; the full check, whose view drops unknown fields, accepted it). The message
    is onnx's, without a path (onnx does not say where)."""
    graph = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["Y"], doc_string="zzgroupzz")],
        "g",
        [oh.make_tensor_value_info("X", T.FLOAT, [2])],
        [oh.make_tensor_value_info("Y", T.FLOAT, [2])],
    )
    path = tmp_path / "model.onnx"
    data = oh.make_model(graph, opset_imports=OPSET, ir_version=10).SerializeToString()
    path.write_bytes(with_group_with_field_0(data))
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(str(path))  # the oracle: onnx itself refuses the file
    with pytest.raises(S.ValidationError, match="onnx.checker: Unable to parse proto"):
        S.check_model(str(path), full_check=full_check)
