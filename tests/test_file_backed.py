"""InferenceSession over a model whose payloads are inline reads them from the model's own file
once the model is checked (onnx_struct/runtime/file_backed.py). Oracles: protobuf's parse of the
model (the payload bytes each value holds) and gguf-py's dequantization in float64."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as oh
from support.protowire import field, tag, varint
from test_affine import oracle, random_payload

import onnx_struct as S
from onnx_struct import formats
from onnx_struct._proto import pb
from onnx_struct.runtime import file_backed as backing
from onnx_struct.schema.model import STOCK_CUT_MIN_BYTES, load

K, N = 4096, 2304  # two Q4_0 weights of 5.3 MB each + a 16 MiB table: past STOCK_CUT_MIN_BYTES


def inline_model(directory, table: bytes = bytes(range(256)) * (STOCK_CUT_MIN_BYTES // 256)) -> tuple:
    """y = x @ W0^T + x @ W1^T (Q4_0, inline) and t = Cast(T) (a UINT8 table, inline): (path,
    the weights as float64, the table)."""
    weights, payloads = [], []
    for seed in (1, 2):
        payloads.append(random_payload("Q4_0", (N, K), seed, sane=True))
        weights.append(oracle("Q4_0", payloads[-1], (N, K)).astype(np.float64))
    nodes = [
        oh.make_node("Transpose", ["W0"], ["W0t"], perm=[1, 0]),
        oh.make_node("Transpose", ["W1"], ["W1t"], perm=[1, 0]),
        oh.make_node("MatMul", ["x", "W0t"], ["a"]),
        oh.make_node("MatMul", ["x", "W1t"], ["b"]),
        oh.make_node("Add", ["a", "b"], ["y"]),
        oh.make_node("Identity", ["T"], ["t"]),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", K])],
        [
            oh.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", N]),
            oh.make_tensor_value_info("t", TensorProto.FLOAT, [len(table)]),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    values = [formats.get("Q4_0").make_value(model, f"W{i}", (N, K), p) for i, p in enumerate(payloads)]
    cast = oh.make_function(
        "t", "cast", ["values"], ["y"], [oh.make_node("Cast", ["values"], ["y"], to=TensorProto.FLOAT)],
        [oh.make_opsetid("", 21)],
    )  # fmt: skip
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, len(table), decoder=cast))
    S.add_struct_values(model, *values, S.make_struct_value("T", index, raw_data=table))
    path = directory / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path), weights, table


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return inline_model(tmp_path_factory.mktemp("inline"))


def spy(monkeypatch) -> list:
    """What file_backed returned for each session."""
    seen = []
    original = backing.file_backed
    monkeypatch.setattr(backing, "file_backed", lambda *a: seen.append(original(*a)) or seen[-1])
    return seen


def test_values_point_at_their_own_bytes_in_the_model_file(model):
    path, _, table = model
    loaded = load(path)
    S.check_model(loaded)
    backed = backing.file_backed(loaded, path)
    assert backed is not None
    whole = pb.ModelProto.FromString(open(path, "rb").read())  # noqa: SIM115 - the oracle's own read
    data = open(path, "rb").read()  # noqa: SIM115
    for original, value in zip(whole.graph.struct_initializer, backed.proto.graph.struct_initializer, strict=True):
        entries = {e.key: e.value for e in value.external_data}
        assert entries["location"] == "m.onnx" and not value.HasField("raw_data")
        start, length = int(entries["offset"]), int(entries["length"])
        assert data[start : start + length] == original.raw_data
        assert (value.name, value.type) == (original.name, original.type)
    S.check_model(backed)  # the same model, by reference: valid as it is
    assert S.view("T", backed).buffer.tobytes() == table


@pytest.mark.slow  # in-process, over a second of CPU: a session over 27 MB of inline payloads
def test_session_reads_the_model_file_and_matches_gguf_py(model, monkeypatch):
    path, weights, table = model
    seen = spy(monkeypatch)
    session = S.InferenceSession(path, accuracy_level=0)
    assert seen and seen[0] is not None
    x = np.random.default_rng(7).standard_normal((2, K)).astype(np.float32)
    y, t = session.run(None, {"x": x})
    reference = x.astype(np.float64) @ (weights[0] + weights[1]).T
    assert np.max(np.abs(y - reference)) <= 1e-5 * np.max(np.abs(reference))
    np.testing.assert_array_equal(t, np.frombuffer(table, np.uint8).astype(np.float32))


@pytest.mark.slow  # in-process, about a second of CPU per case: a session over 27 MB of inline payloads
@pytest.mark.parametrize("case", ["bytes", "hard_link", "other_base_dir", "small"])
def test_where_it_does_not_apply_the_session_holds_the_parse_and_runs_the_same(model, tmp_path, monkeypatch, case):
    path, weights, table = model
    source: object = path
    base_dir = None
    if case == "bytes":
        source = open(path, "rb").read()  # noqa: SIM115
        base_dir = tmp_path
    elif case == "hard_link":
        os.link(path, tmp_path / "second-name.onnx")  # the resolver would refuse the file as a payload
    elif case == "other_base_dir":
        base_dir = tmp_path
    else:
        source, weights, table = inline_model(tmp_path, table=b"\x07" * 64)
    seen = spy(monkeypatch)
    x = np.random.default_rng(8).standard_normal((1, K)).astype(np.float32)
    y, t = S.InferenceSession(source, accuracy_level=0, base_dir=base_dir).run(None, {"x": x})
    assert seen == ([] if case == "bytes" else [None])
    reference = x.astype(np.float64) @ (weights[0] + weights[1]).T
    assert np.max(np.abs(y - reference)) <= 1e-5 * np.max(np.abs(reference))
    np.testing.assert_array_equal(t, np.frombuffer(table, np.uint8).astype(np.float32))


def test_a_file_changed_since_it_was_read_is_not_referenced(model, tmp_path):
    path, _, _ = model
    copy = tmp_path / "m.onnx"
    copy.write_bytes(open(path, "rb").read())  # noqa: SIM115
    loaded = load(copy)
    S.check_model(loaded)
    with open(copy, "ab") as file:
        file.write(b"\0")
    assert backing.file_backed(loaded, copy) is None


def test_the_last_raw_data_on_the_wire_is_the_one_referenced(tmp_path):
    """protobuf keeps the last of repeated ``raw_data`` fields; a ``raw_data`` with a longer
    length form is not stripped, and that value stays inline (copied whole)."""
    big = b"\x11" * STOCK_CUT_MIN_BYTES
    model = oh.make_model(oh.make_graph([], "g", [], []), opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, len(big)))
    (small,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4))
    first = bytes([1 << 3]) + varint(index) + field(3, b"\x22" * len(big)) + field(5, b"A") + field(3, big)
    longer = bytes([1 << 3]) + varint(small) + bytes([3 << 3 | 2, 0x84, 0x00]) + b"\x33" * 4 + field(5, b"B")
    graph = field(17, first) + field(17, longer)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString() + field(7, graph))
    loaded = load(path)
    S.check_model(loaded)
    backed = backing.file_backed(loaded, path)
    assert backed is not None
    _, b = backed.proto.graph.struct_initializer
    assert S.view("A", backed).buffer.tobytes() == big
    assert b.raw_data == b"\x33" * 4 and not len(b.external_data)


def copied(model, directory, name: str = "m.onnx") -> str:
    """The model's file copied into ``directory`` under ``name`` (the tests below change it)."""
    target = directory / name
    target.write_bytes(open(model[0], "rb").read())  # noqa: SIM115
    return str(target)


MODES = {
    "default": "{}",
    "compact": "{'compact': True}",
    "sess_options": "{'sess_options': onnxruntime.SessionOptions()}",
    "decode": "{'execution': 'decode'}",
}
AFTER_THE_SESSION = r"""
import numpy as np, onnxruntime
session = S.InferenceSession(ARG["path"], **MODE)
tensors = [t for t in session.lowered.graph.initializer for e in t.external_data if e.value == "m.onnx"]
assert not tensors, [t.name for t in tensors]  # lowered as from the bytes: inline
with open(ARG["path"], "r+b") as file:
    file.truncate(0)  # what onnx.save over the same path does first
x = np.ones((1, ARG["k"]), np.float32)
_, t = session.run(None, {"x": x})
assert t[:3].tolist() == [0.0, 1.0, 2.0] and t[-1] == 255.0, t[:4]
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_session_does_not_depend_on_the_model_file(model, tmp_path, mode):
    """Found by a red-team pass: the decoder path kept a file-backed value's leaf as a reference
    into the model file, which onnxruntime then mapped (with compact, sess_options or decode):
    rewriting the file changed the outputs, truncating it killed the process (SIGBUS)."""
    from adversarial.bounded import run_bounded  # noqa: PLC0415

    code = AFTER_THE_SESSION.replace("**MODE", f"**{MODES[mode]}")
    outcome = run_bounded(code, {"path": copied(model, tmp_path), "k": K}, cpu_seconds=60, memory_mib=2048)
    assert outcome.error is None, outcome.message


@pytest.mark.parametrize("name", ["C:m.onnx", "a\\..\\b.onnx", os.fsdecode(b"mod\xe9le.onnx")])
def test_a_file_name_that_is_not_a_location_is_not_referenced(model, tmp_path, monkeypatch, name):
    """Found by a red-team pass: the model file's name became a location, and a name the location
    rules refuse (or that is not UTF-8) made a valid model fail to load by its path."""
    path = copied(model, tmp_path, name)
    _, weights, table = model
    seen = spy(monkeypatch)
    x = np.ones((1, K), np.float32)
    y, t = S.InferenceSession(path, accuracy_level=0).run(None, {"x": x})
    assert seen == [None]
    reference = x.astype(np.float64) @ (weights[0] + weights[1]).T
    assert np.max(np.abs(y - reference)) <= 1e-5 * np.max(np.abs(reference))
    np.testing.assert_array_equal(t, np.frombuffer(table, np.uint8).astype(np.float32))


def test_a_model_with_unknown_fields_is_not_file_backed(model, tmp_path):
    """Its copy without the values would copy everything, payloads included (a red-team pass
    measured a 96 MiB model peaking at 339 instead of 243 MiB)."""
    path = tmp_path / "m.onnx"
    path.write_bytes(open(model[0], "rb").read() + field(7, tag(99, 0) + varint(1)))  # noqa: SIM115
    loaded = load(path)
    S.check_model(loaded)
    assert backing.file_backed(loaded, path) is None


def test_a_model_in_a_directory_whose_name_is_not_utf8(model, tmp_path):
    """onnxruntime's session config takes the model's directory as a UTF-8 string (TypeError
    before); the directory is only given when the lowered model has external data."""
    directory = tmp_path / os.fsdecode(b"dir\xe9")
    directory.mkdir()
    path = copied(model, directory)
    _, t = S.InferenceSession(path).run(None, {"x": np.ones((1, K), np.float32)})
    np.testing.assert_array_equal(t, np.frombuffer(model[2], np.uint8).astype(np.float32))
