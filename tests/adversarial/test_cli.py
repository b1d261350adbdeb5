"""Every CLI subcommand, given hostile files, prints one line on stderr and exits 1 (bad content) or
2 (usage, missing or unreadable file), never a traceback; each run is bounded in CPU and memory.

One child process runs one subcommand over all the hostile inputs (onnx_struct.cli.main in a
loop, stderr captured per run) and writes what each run returned to a JSON report.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_struct as S
from adversarial import gguf_bytes as G
from adversarial.bounded import run_bounded

# Every test here starts a child process (tests/support/tiers.py).
pytestmark = pytest.mark.slow

RUN_ALL = """
import contextlib, io, json, traceback
from onnx_struct.cli import main
report = {}
for name, argv in ARG["runs"].items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as error:
            code = f"SystemExit({error.code})"
        except BaseException:
            code = "escaped: " + traceback.format_exc()
    report[name] = [code, err.getvalue()]
open(ARG["report"], "w").write(json.dumps(report))
"""


def _plain_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def hostile(tmp_path) -> dict[str, tuple[str, int]]:
    """name -> (path, the exit code every subcommand owes it)."""
    files = {
        "garbage": (bytes(range(256)) * 2, 1),
        "png": (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(40), 1),
        "truncated": (_plain_model().SerializeToString()[:-7], 1),
    }
    out = {}
    for name, (data, code) in files.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(data)
        out[name] = (str(path), code)
    (tmp_path / "dir.bin").mkdir()
    out["directory"] = (str(tmp_path / "dir.bin"), 2)
    out["missing"] = (str(tmp_path / "missing.bin"), 2)
    return out


COMMANDS = {
    "check": lambda src, tmp: ["check", src],
    "check --full": lambda src, tmp: ["check", src, "--full"],
    "inspect": lambda src, tmp: ["inspect", src],
    "lower": lambda src, tmp: ["lower", src, str(tmp / "lowered.onnx")],
    "decode": lambda src, tmp: ["decode", src, "w", "-o", str(tmp / "w.npy")],
    "quantize": lambda src, tmp: ["quantize", src, str(tmp / "q.onnx"), "--format", "Q8_0"],
    "from-gguf": lambda src, tmp: ["from-gguf", src, str(tmp / "g.onnx"), "--quiet"],
    "from-gguf --reference": lambda src, tmp: ["from-gguf", src, str(tmp / "g.onnx"), "--reference", "--quiet"],
    "generate": lambda src, tmp: ["generate", src, "--prompt", "hi", "--quiet"],
    "to-gguf": lambda src, tmp: ["to-gguf", src, str(tmp / "t.gguf"), "--quiet"],
}


def _run_all(tmp_path, runs: dict[str, list[str]], *, cpu_seconds: float = 20, memory_mib: int = 400) -> dict:
    report = tmp_path / "report.json"
    out = run_bounded(RUN_ALL, {"runs": runs, "report": str(report)}, cpu_seconds=cpu_seconds, memory_mib=memory_mib)
    assert out.error is None, out.traceback
    return json.loads(report.read_text())


def _assert_one_line(name: str, got: list, code: int) -> None:
    returned, stderr = got
    assert returned == code, f"{name}: returned {returned!r}, expected {code}; stderr: {stderr}"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, f"{name}: {stderr!r}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_refuses_hostile_files_in_one_line(tmp_path, hostile, command):
    runs = {name: COMMANDS[command](path, tmp_path) for name, (path, _) in hostile.items()}
    report = _run_all(tmp_path, runs)
    for name, (_, code) in hostile.items():
        _assert_one_line(f"{command} {name}", report[name], code)


def test_an_empty_file_is_not_a_model_nor_a_gguf_file(tmp_path):
    # Zero bytes would parse as an empty ModelProto (protobuf); every subcommand says the file is
    # empty (from-gguf: that it is not a GGUF file) instead of blaming the ir_version or showing nothing.
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    runs = {command: build(str(empty), tmp_path) for command, build in COMMANDS.items()}
    report = _run_all(tmp_path, runs)
    for command, got in report.items():
        _assert_one_line(command, got, 1)
        expected = (
            "not a GGUF file" if command.startswith("from-gguf") else "the file is empty (0 bytes), not an ONNX model"
        )
        assert expected in got[1], f"{command}: {got[1]!r}"
        assert got[1].count(str(empty)) == 1, f"{command} names the file once: {got[1]!r}"


def test_a_multi_line_checker_message_is_printed_on_one_line(tmp_path):
    model = _plain_model()
    model.graph.node[0].input.append("extra")  # onnx's checker answers on several lines
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    # lower returns a model without struct parts as given (docs/semantics.md, "Drop-in
    # behaviour"): one struct declaration makes it check the model first.
    S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4))
    struct_path = tmp_path / "bad_struct.onnx"
    struct_path.write_bytes(model.SerializeToString())
    report = _run_all(
        tmp_path, {"check": ["check", str(path)], "lower": ["lower", str(struct_path), str(tmp_path / "l.onnx")]}
    )
    for command, got in report.items():
        _assert_one_line(command, got, 1)


def _matmul_model(weight: onnx.TensorProto) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_quantize_a_weight_whose_dims_disagree_with_its_bytes(tmp_path):
    # 64 x 64 dims, 64 x 32 floats of data: bad content (exit 1), not a usage error (was exit 2).
    weight = onnx.TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[64, 64])
    weight.raw_data = np.ones(64 * 32, np.float32).tobytes()  # helper.make_tensor would refuse it
    path = tmp_path / "m.onnx"
    path.write_bytes(_matmul_model(weight).SerializeToString())
    report = _run_all(tmp_path, {"cli": ["quantize", str(path), str(tmp_path / "q.onnx"), "--format", "Q8_0"]})
    _assert_one_line("quantize", report["cli"], 1)
    assert "graph.initializer[0] ('W'): dims [64, 64] need 16384 bytes" in report["cli"][1]
    out = run_bounded(
        "from onnx_struct.passes.quantize import quantize; quantize(ARG, 'Q8_0', min_elements=1)", str(path)
    )
    out.assert_validation_error("graph.initializer[0] ('W')", contains="holds 8192")


@pytest.mark.parametrize("case", ["declared_2_28_rows", "declared_2_40_square", "segment"])
def test_quantize_refuses_weights_before_sizing_anything_by_them(tmp_path, case):
    """Found by a red-team pass: 256 bytes declaring [2^28, 1] made quantize build its onnxruntime
    probe from the declared width (1.7 GiB, 5.6 s; MemoryError at 2^31) before comparing the dims
    with the bytes; [2^40, 2^40] printed a traceback; a segmented weight raised numpy_helper's bare
    ValueError."""
    dims = {"declared_2_28_rows": [2**28, 1], "declared_2_40_square": [2**40, 2**40], "segment": [64, 64]}[case]
    weight = onnx.TensorProto(name="W", data_type=TensorProto.FLOAT, dims=dims)
    weight.raw_data = np.ones(64 if case != "segment" else 64 * 64, np.float32).tobytes()
    if case == "segment":
        weight.segment.begin, weight.segment.end = 0, 64 * 64
    path = tmp_path / "m.onnx"
    path.write_bytes(_matmul_model(weight).SerializeToString())
    code = "from onnx_struct.passes.quantize import quantize; quantize(ARG, 'Q8_0', min_elements=1)"
    out = run_bounded(code, str(path), cpu_seconds=10, memory_mib=200)
    out.assert_validation_error("graph.initializer[0] ('W')", contains="segment" if case == "segment" else "bytes")
    report = _run_all(tmp_path, {"cli": ["quantize", str(path), str(tmp_path / "q.onnx"), "--format", "Q8_0"]})
    _assert_one_line("quantize", report["cli"], 1)


def test_quantize_checks_options_before_content(tmp_path, hostile):
    garbage, _ = hostile["garbage"]
    runs = {
        "format": ["quantize", garbage, str(tmp_path / "q.onnx"), "--format", "NOPE"],
        "op-types": ["quantize", garbage, str(tmp_path / "q.onnx"), "--format", "Q8_0", "--op-types", "ConvTranspose"],
    }
    report = _run_all(tmp_path, runs)
    for name, got in report.items():
        _assert_one_line(name, got, 2)
    assert "unknown format 'NOPE'" in report["format"][1] and "ConvTranspose" in report["op-types"][1]


def test_from_gguf_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    report = _run_all(tmp_path, {"fifo": ["from-gguf", str(fifo), str(tmp_path / "g.onnx"), "--quiet"]}, cpu_seconds=5)
    _assert_one_line("fifo", report["fifo"], 2)
    assert "not a regular file" in report["fifo"][1]


def test_from_gguf_refuses_a_hostile_gguf_in_one_line(tmp_path):
    path = tmp_path / "h.gguf"
    path.write_bytes(G.gguf([G.kv("a", G.ARRAY, G.array(G.UINT8, 2**40))]))
    report = _run_all(tmp_path, {"cli": ["from-gguf", str(path), str(tmp_path / "g.onnx")]}, cpu_seconds=5)
    _assert_one_line("from-gguf", report["cli"], 1)
    assert report["cli"][1].startswith(f"onnx-struct from-gguf: {path}: gguf.kv[0] ('a'): ")
