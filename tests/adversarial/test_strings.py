"""Strings that are not UTF-8, in any field: refused by check_model with the field's path.

proto2 does not validate UTF-8 on parse, so such a string reaches Python as ``bytes``. The long fuzz
run found one place at a time where that escaped (a decoder input name, an operator type, a
function output name); docs/semantics.md now refuses every such string in the check, wherever it
is (onnx_struct/schema/utf8.py), and ``infer_shapes`` and the decoder policy apply the same rule.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

import onnx_struct as S
from adversarial.bounded import run_bounded
from onnx_struct.check.checker import _Checker
from onnx_struct.schema.model import load

OPSETS = [oh.make_opsetid("", 21), oh.make_opsetid("local", 1)]

# marker -> the path prefix the refusal names once the marker's bytes are not UTF-8
PLACES = {
    "zzdecout": "struct_types[0]",  # the decoder's output: lower's opset conversion raised on it
    "zzdecnode": "struct_types[0]",  # a decoder node's name
    "zzlocalout": "functions[0]",  # a model-local function's output (lower: UnicodeDecodeError)
    "zzlocaldoc": "functions[0]",
    "zzmainnode": "graph.node[0]",
    "zzmaindoc": "graph.node[0] ('zzmainnode').doc_string",
    "zzvalueinfo": "graph.value_info[0]",
    "zzkey": "metadata_props[0]",
    "zzproducer": "producer_name",
    "zzgraph": "graph.name",
}


def struct_model(names: dict[str, str] | None = None, local_opset: int = 21) -> bytes:
    """A struct model holding each marker of PLACES once (twice for names that are also used);
    ``local_opset``: the model-local function's (lower converts an older one to the model's)."""
    n = {m: m for m in PLACES} | {"zzattr": "zzattr"} | (names or {})
    decoder = oh.make_function(
        "d", "dec", ["values"], [n["zzdecout"]],
        [oh.make_node("Cast", ["values"], [n["zzdecout"]], to=TensorProto.FLOAT, name=n["zzdecnode"])], OPSETS[:1],
    )  # fmt: skip
    local = oh.make_function(
        "local", "f", ["a"], [n["zzlocalout"]], [oh.make_node("Relu", ["a"], [n["zzlocalout"]])],
        [oh.make_opsetid("", local_opset)],
        doc_string=n["zzlocaldoc"],
    )  # fmt: skip
    graph = oh.make_graph(
        [
            oh.make_node("Add", ["X", "W"], ["Y"], name=n["zzmainnode"], doc_string=n["zzmaindoc"]),
            oh.make_node("Constant", [], ["S"], value_string=n["zzattr"]),  # unused
            oh.make_node("f", ["Y"], ["O"], domain="local"),
        ],
        n["zzgraph"],
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [oh.make_tensor_value_info("O", TensorProto.FLOAT, [4])],
        value_info=[oh.make_tensor_value_info(n["zzvalueinfo"], TensorProto.FLOAT, [4])],
    )
    model = oh.make_model(graph, opset_imports=OPSETS, ir_version=10, functions=[local], producer_name=n["zzproducer"])
    oh.set_model_props(model, {n["zzkey"]: "v"})
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4, decoder=decoder))
    S.add_struct_values(model, S.make_struct_value("W", index, raw_data=bytes([1, 2, 3, 4])))
    return model.SerializeToString()


def with_bad_bytes(data: bytes, marker: str) -> bytes:
    assert marker.encode() in data
    return data.replace(marker.encode(), b"z\xff" + marker.encode()[2:])  # the same length


def save(tmp_path, data: bytes) -> str:
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    return str(path)


def test_the_model_with_every_marker_is_valid():
    """The refusals below are for the bytes alone: the same model with UTF-8 strings passes."""
    model = struct_model()
    S.check_model(model, full_check=True)
    onnx.checker.check_model(S.lower(model), full_check=True)


@pytest.mark.slow
@pytest.mark.parametrize("marker", PLACES)
@pytest.mark.parametrize(
    "code", ["S.check_model(ARG)", "S.check_model(ARG, full_check=True)", "S.lower(ARG)", "S.infer_shapes(ARG)"]
)
def test_a_string_that_is_not_utf8_is_refused_wherever_it_is(tmp_path, marker, code):
    out = run_bounded(code, save(tmp_path, with_bad_bytes(struct_model(), marker)), cpu_seconds=10, memory_mib=300)
    out.assert_validation_error(PLACES[marker], contains="not valid UTF-8")


def test_a_bytes_field_may_hold_any_bytes():
    """The rule follows the schema's types: AttributeProto.s is ``bytes`` (a string attribute's
    value, which onnx does not require to be text), so the same bytes there are accepted."""
    S.check_model(with_bad_bytes(struct_model(), "zzattr"))


def test_validate_names_the_field():
    data = with_bad_bytes(struct_model(), "zzmaindoc")
    (diagnostic,) = S.validate(data)
    assert diagnostic.path == "graph.node[0] ('zzmainnode').doc_string" and diagnostic.code == "invalid_utf8"


def test_multibyte_utf8_names_are_accepted():
    """No false refusal: the proto3 twin validates UTF-8, it does not restrict it to ASCII."""
    names = {"zzmainnode": "größe", "zzvalueinfo": "重み", "zzdecout": "выход", "zzgraph": "𝔤"}
    model = struct_model(names)
    S.check_model(model, full_check=True)
    lowered = S.lower(model)
    onnx.checker.check_model(lowered, full_check=True)
    assert {"größe", "𝔤"} <= {node.name for node in lowered.graph.node} | {lowered.graph.name}


def _outcome(check, data: bytes) -> str:
    try:
        check(data)
    except Exception as error:  # noqa: BLE001 - the outcome compared is the exception's class
        return type(error).__name__
    return "accepted"


def test_install_leaves_a_stock_model_with_such_strings_to_onnx():
    """The rule is onnx_struct's: the hook hands a model without struct parts to stock onnx."""
    graph = oh.make_graph(
        [oh.make_node("Relu", ["X"], ["Y"], name="zzmainnode")], "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [4])], [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
    )  # fmt: skip
    data = with_bad_bytes(oh.make_model(graph, opset_imports=OPSETS[:1]).SerializeToString(), "zzmainnode")
    stock = _outcome(onnx.checker.check_model, data)
    S.install()
    try:
        hooked = _outcome(onnx.checker.check_model, data)
    finally:
        S.uninstall()
    assert hooked == stock == "accepted"
    assert _outcome(S.check_model, data) == "accepted"  # a drop-in: a plain model is stock's
    declaration = S.make_array(TensorProto.UINT8, 4).SerializeToString()
    with_struct = data + bytes([0xDA, 0x01, len(declaration)]) + declaration  # struct_types (27)
    with pytest.raises(S.ValidationError, match=r"graph\.node\[0\].*not valid UTF-8"):
        S.check_model(with_struct)  # onnx_struct's own rule applies to every struct model


def large_struct_model(payload_mib: int) -> bytes:
    """A model whose one inline payload is large enough for stock views to cut the struct values
    out (onnx_struct.schema.model.STOCK_CUT_MIN_BYTES)."""
    graph = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["Y"], name="zzmainnode")], "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [4])], [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
    )  # fmt: skip
    model = oh.make_model(graph, opset_imports=OPSETS[:1], ir_version=10)
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, payload_mib << 20))
    S.add_struct_values(
        model, S.make_struct_value("W", index, raw_data=bytes(payload_mib << 20), doc_string="zzvaluedoc")
    )
    return model.SerializeToString()


@pytest.mark.slow
@pytest.mark.parametrize(
    "marker, path", [("zzvaluedoc", "graph.struct_initializer[0] ('W').doc_string"), ("zzmainnode", "graph.node[0]")]
)
def test_a_large_inline_model_is_checked_whole(tmp_path, marker, path):
    """A struct value's own string, and a node's, in a model whose inline payload is large enough
    for stock views to cut the struct values out: the rule parses what they parse (the payloads
    are not copied again: tests/test_session_memory.py failed on the whole bytes, +110 MiB over the
    baseline against 96 allowed) and reads the values' strings itself."""
    data = with_bad_bytes(large_struct_model(17), marker)
    out = run_bounded("S.check_model(ARG)", save(tmp_path, data), cpu_seconds=10, memory_mib=300)
    out.assert_validation_error(path, contains="not valid UTF-8")


def many_values_model(doc_string: str = "") -> bytes:
    """300 struct values (a run the wire scan reads with numpy), value 150 with ``doc_string``, and
    a node named "zzmainnode"."""
    graph = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["Y"], name="zzmainnode")],
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
    )
    model = oh.make_model(graph, opset_imports=OPSETS[:1], ir_version=10)
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4))
    values = [S.make_struct_value(f"zzv{k:03d}", index, raw_data=bytes(4)) for k in range(300)]
    if doc_string:  # (an empty one set is written: the value would not be plain)
        values[150].doc_string = doc_string
    S.add_struct_values(model, *values)
    return model.SerializeToString()


@pytest.mark.parametrize(
    ("doc_string", "marker", "path"),
    [
        ("", "zzmainnode", "graph.node[0]"),  # every value plain: their records are not parsed by the twin
        ("", "zzv150", "graph.struct_initializer[150]"),
        ("zzdoc", "zzdoc", "graph.struct_initializer[150] ('zzv150').doc_string"),  # one value not plain
        ("zzdoc", "zzmainnode", "graph.node[0]"),
    ],
)
def test_a_string_that_is_not_utf8_beside_many_struct_values(doc_string, marker, path):
    data = many_values_model(doc_string)
    S.check_model(data)
    assert _Checker(load(data)).all_plain({0: 4}, set()) == (not doc_string)  # the path taken
    (diagnostic,) = S.validate(with_bad_bytes(data, marker))
    assert diagnostic.path.startswith(path) and diagnostic.code == "invalid_utf8", diagnostic
