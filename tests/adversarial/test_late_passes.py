"""Findings of the last red-team passes of 2026-12-01 on entry points beside the checker: the
session's files, encode's allocation, view_buffer, pack's rounding, describe's budget, quantize's
external tensors. Each in a child with CPU and memory limits (a SIGBUS kills only the child)."""

from __future__ import annotations

import pytest

from adversarial.bounded import run_bounded

# Every test here starts a child process (tests/support/tiers.py).
pytestmark = pytest.mark.slow

SESSION_FILE = """
import os, pathlib
from onnx import TensorProto as T, helper as oh, numpy_helper
folder, mode, action = pathlib.Path(ARG["dir"]), ARG["mode"], ARG["action"]
n = 1 << 16
table = (np.arange(n) % 251).astype(np.uint8)
m = oh.make_model(oh.make_graph([oh.make_node("Identity", ["T"], ["t"])], "g", [], [oh.make_tensor_value_info("t", T.FLOAT, [n])]),
                  opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
if mode == "stock":  # a stock external initializer without length: onnxruntime sizes it from its type
    m.graph.node[0].input[0] = "B"
    m.graph.initializer.append(numpy_helper.from_array(table.astype(np.float32), "B"))
    onnx.save(m, folder / "m.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    raw = onnx.load(folder / "m.onnx", load_external_data=False)
    del raw.graph.initializer[0].external_data[2:]  # location and offset only
    onnx.save(raw, folder / "m.onnx")
    options = {}
else:
    cast = oh.make_function("t", "cast", ["values"], ["y"], [oh.make_node("Cast", ["values"], ["y"], to=T.FLOAT)], [oh.make_opsetid("", 21)])
    (index,) = S.add_struct_types(m, S.make_array(T.UINT8, n, decoder=cast))
    S.add_struct_values(m, S.make_struct_value("T", index, raw_data=table.tobytes()))
    S.save_with_external_data(m, folder / "m.onnx", location="w.bin", align=65536)
    options = {"compact": True}
session = S.InferenceSession(str(folder / "m.onnx"), **options)
maps = [line for line in open("/proc/self/maps") if "w.bin" in line]
assert not maps, maps  # onnxruntime mapped the payload file
if action == "truncate":
    os.truncate(folder / "w.bin", 0)
else:
    (folder / "w.bin").write_bytes(b"\\x07" * os.path.getsize(folder / "w.bin"))
(y,) = session.run(None, {})
assert (y == table.astype(np.float32)).all()
raise S.ValidationError("done", "the session kept its own copy")
"""


@pytest.mark.parametrize("mode", ["compact", "stock"])
@pytest.mark.parametrize("action", ["truncate", "rewrite"])
def test_a_session_does_not_map_the_model_directorys_files(tmp_path, mode, action):
    """Found by a red-team pass: given the model's folder, onnxruntime mapped the payload files, so
    a file truncated after the session was made killed the process (SIGBUS), one rewritten changed
    the outputs. The session now reads them under the directory rules and hands them over."""
    out = run_bounded(
        SESSION_FILE, {"dir": str(tmp_path), "mode": mode, "action": action}, cpu_seconds=20, memory_mib=600
    )
    out.assert_validation_error("done")


def test_an_encoder_is_not_run_for_a_payload_its_leaves_do_not_back():
    """A declaration of one UINT8 leaf and a 2^40-byte padding leaf: the policy allowed the
    encoder 256 bytes per declared byte, and one allocated 2.2 GB before pack refused the
    zero-fill (red-team pass). The zero-fill is checked first now."""
    code = """
from onnx import TensorProto as T, helper as oh, numpy_helper
nodes = [
    oh.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([1 << 29], np.int64), "s")),
    oh.make_node("ConstantOfShape", ["s"], ["big"]),
    oh.make_node("ReduceSum", ["big"], ["sum"], keepdims=0),
    oh.make_node("Cast", ["sum"], ["x8"], to=T.UINT8),
]
encoder = oh.make_function("t", "enc", ["x"], ["x8"], nodes, [oh.make_opsetid("", 21)])
declaration = S.make_structure([S.make_field("x8", T.UINT8), S.make_field("pad", S.make_tensor_type(T.UINT8, [1 << 40]))], encoder=encoder)
S.encode(np.zeros(1, np.float32), declaration)
"""
    out = run_bounded(code, cpu_seconds=10, memory_mib=200)
    out.assert_validation_error("struct_type.encoder", contains="zero-fill")


def test_view_buffer_takes_a_strided_array_by_its_elements():
    """A 1-D strided array (uint8[::2], [::-1]) raised numpy's ValueError (red-team pass)."""
    code = """
data = np.arange(16, dtype=np.uint8)
declaration = S.make_array(onnx.TensorProto.UINT8, 8)
for given, expected in ((data[::2], data[::2]), (data[8:][::-1], data[8:][::-1]), (np.broadcast_to(np.uint8(5), (8,)), np.full(8, 5))):
    assert S.view_buffer(given, declaration)[""].tolist() == list(expected)
raise S.ValidationError("done", "viewed")
"""
    run_bounded(code, cpu_seconds=10, memory_mib=200).assert_validation_error("done")


@pytest.mark.parametrize("value", ["nan", "inf", "1e6"])
def test_rounding_into_float4_keeps_refusing_what_it_cannot_hold(value):
    """FLOAT4E2M1 has no NaN or infinity and saturates: with cast="round" NaN became -0.0 and inf
    or 1e6 became 6.0 silently (red-team pass)."""
    code = f"""
declaration = S.make_array(onnx.TensorProto.FLOAT4E2M1, 2)
assert S.pack({{"": np.array([1.2, 2.9], np.float32)}}, declaration, cast="round") is not None  # rounding itself is fine
S.pack({{"": np.array([1.0, float("{value}")], np.float32)}}, declaration, cast="round")
"""
    run_bounded(code, cpu_seconds=10, memory_mib=200).assert_validation_error("", contains="without loss")


def test_describe_stops_at_its_node_budget_inside_a_declaration():
    """8,000 components of one bit packing referenced by 50 declarations printed 408,000 lines
    (1.6M at 200; red-team pass): the budget now bounds a declaration's own parts."""
    code = """
from onnx_struct.tools.describe import describe
model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
S.add_struct_types(model, S.make_bit_packing([(f"c{i}", 1) for i in range(8000)], 1))
S.add_struct_types(model, *[S.make_structure([S.make_field("f", S.make_type_reference(0))]) for _ in range(200)])
text = str(describe(model))
assert len(text) < 4_000_000, len(text)
raise S.ValidationError("done", f"{len(text)} characters")
"""
    run_bounded(code, cpu_seconds=10, memory_mib=400).assert_validation_error("done")


def test_an_unknown_leaf_is_named_with_a_few_known_ones():
    """pack and decoder binding listed every leaf path in the message (1.5 MB; red-team pass)."""
    code = """
fields = [S.make_field(f"field_{i:05d}_" + "x" * 60, S.make_tensor_type(onnx.TensorProto.UINT8, [1])) for i in range(20000)]
try:
    S.pack({"nope": np.zeros(1, np.uint8)}, S.make_structure(fields))
except S.ValidationError as error:
    assert len(str(error)) < 1000 and "(20000 leaves)" in str(error), len(str(error))
    raise
"""
    run_bounded(code, cpu_seconds=10, memory_mib=300).assert_validation_error("", contains="unknown leaf")
