"""Every CLI output is a new file renamed over OUT (onnx_struct/payload/external_write.py): the file it
replaces keeps its permission bits, so a private (0600) OUT does not become world-readable; a new OUT
gets 0o666 less the umask, as ``open`` gives (docs/security.md, "Files")."""

from __future__ import annotations

import os
import stat
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_struct as S
from adversarial import gguf_bytes as G
from adversarial.bounded import run_bounded

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")]

RUN = """
import os
from onnx_struct.cli import main
os.umask(ARG["umask"])
codes = {name: main(argv) for name, argv in ARG["runs"].items()}
failed = {name: code for name, code in codes.items() if code != 0}
if failed:
    raise RuntimeError(f"exit codes {failed}")
raise S.ValidationError("done", "every run wrote its output")
"""


def _matmul_model(path) -> None:
    weight = numpy_helper.from_array(np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 64])],
        [weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)


def _struct_model(path) -> None:
    model = helper.make_model(helper.make_graph([], "g", [], []), opset_imports=[helper.make_opsetid("", 21)])
    block = bytes([0x00, 0x3C]) + bytes([0x9A]) * 16
    S.add_struct_values(model, S.formats.get("Q4_0").make_value(model, "w", (1, 32), block))
    onnx.save(model, path)


def _gguf(path) -> None:
    data = np.arange(8, dtype=np.float32).tobytes()
    path.write_bytes(G.gguf([], [G.tensor_info("t", [8], G.F32, 0)], data))


def _runs(tmp_path, out_dir) -> dict[str, list[str]]:
    _matmul_model(tmp_path / "plain.onnx")
    _struct_model(tmp_path / "struct.onnx")
    _gguf(tmp_path / "t.gguf")
    src = {name: str(tmp_path / name) for name in ("plain.onnx", "struct.onnx", "t.gguf")}
    return {
        "quantize": ["quantize", src["plain.onnx"], str(out_dir / "q.onnx"), "--format", "Q8_0", "--quiet"],
        "lower": ["lower", src["struct.onnx"], str(out_dir / "lowered.onnx")],
        "decode": ["decode", src["struct.onnx"], "w", "-o", str(out_dir / "w.npy")],
        "from-gguf": ["from-gguf", src["t.gguf"], str(out_dir / "g.onnx"), "--quiet"],
        "to-gguf": ["to-gguf", src["struct.onnx"], str(out_dir / "back.gguf"), "--quiet"],
    }


def _outputs(runs) -> dict[str, str]:
    return {name: argv[argv.index("-o") + 1] if "-o" in argv else argv[2] for name, argv in runs.items()}


def test_a_private_output_stays_private_when_replaced(tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    runs = _runs(tmp_path, out_dir)
    outputs = _outputs(runs)
    for path in outputs.values():
        with open(path, "wb") as handle:
            handle.write(b"an older private result")
        os.chmod(path, 0o600)
    out = run_bounded(RUN, {"runs": runs, "umask": 0o022}, cpu_seconds=30, memory_mib=600)
    out.assert_validation_error("done")
    for name, path in outputs.items():
        assert os.path.getsize(path) != len(b"an older private result"), f"{name} did not write {path}"
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == 0o600, f"{name}: {path} replaced with mode {mode:o}, was 600"


def test_a_new_output_gets_the_umask_mode(tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    runs = _runs(tmp_path, out_dir)
    out = run_bounded(RUN, {"runs": runs, "umask": 0o027}, cpu_seconds=30, memory_mib=600)
    out.assert_validation_error("done")
    for name, path in _outputs(runs).items():
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == 0o640, f"{name}: new {path} has mode {mode:o}, not 666 less the umask 027"


def test_a_replaced_file_does_not_pass_on_set_id_bits(tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    runs = {"decode": _runs(tmp_path, out_dir)["decode"]}
    (path,) = _outputs(runs).values()
    with open(path, "wb") as handle:
        handle.write(b"old")
    os.chmod(path, 0o4750)
    run_bounded(RUN, {"runs": runs, "umask": 0o022}, cpu_seconds=30).assert_validation_error("done")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o750
