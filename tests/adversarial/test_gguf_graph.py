"""GGUF metadata the decoder graph cannot run (onnx_struct/llm/graph/): `from-gguf --graph`
accepted a head size onnxruntime's GroupQueryAttention refuses at run time (64 / 32 = 2), and `check`
accepted the model; generate then failed inside onnxruntime. The oracle is onnxruntime itself: a
lone GroupQueryAttention node with the graph's attributes (do_rotary=1), run at each head size."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("gguf")
pytest.importorskip("onnxruntime")

from support.llm import TinyLlama, write_gguf  # noqa: E402

from adversarial.bounded import run_bounded  # noqa: E402

pytestmark = pytest.mark.slow

HEAD_SIZES = (2, 4, 6, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 128)

# In the child: onnxruntime's verdict on each head size, and the CLI's on a GGUF of that head size.
CODE = """
import contextlib, io, json
import numpy as np, onnxruntime as ort
from onnx import helper, TensorProto as T
from onnx_struct.cli import main
ort.set_default_logger_severity(4)

def runs_in_onnxruntime(hd, heads=2, kv_heads=1, seq=3):
    names = ["q", "k", "v", "past_k", "past_v", "seqlens_k", "total", "cos", "sin"]
    types = [T.FLOAT] * 5 + [T.INT32, T.INT32] + [T.FLOAT] * 2
    node = helper.make_node("GroupQueryAttention", names, ["o", "ok", "ov"], domain="com.microsoft",
                            num_heads=heads, kv_num_heads=kv_heads, do_rotary=1, rotary_interleaved=1,
                            scale=1 / np.sqrt(hd))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, types)],
                              [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("o", "ok", "ov")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    rng = np.random.default_rng(0)
    feeds = {"q": rng.random((1, seq, heads * hd), np.float32), "k": rng.random((1, seq, kv_heads * hd), np.float32),
             "v": rng.random((1, seq, kv_heads * hd), np.float32), "past_k": np.zeros((1, kv_heads, 0, hd), np.float32),
             "past_v": np.zeros((1, kv_heads, 0, hd), np.float32), "seqlens_k": np.array([seq - 1], np.int32),
             "total": np.array(seq, np.int32), "cos": np.ones((16, hd // 2), np.float32),
             "sin": np.zeros((16, hd // 2), np.float32)}
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        return True
    except Exception:
        return False

report = {}
for hd, path in ARG["files"].items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["from-gguf", path, path + ".onnx", "--graph", "--quiet"])
    report[hd] = {"ort": runs_in_onnxruntime(int(hd)), "code": code, "stderr": err.getvalue()}
open(ARG["report"], "w").write(json.dumps(report))
"""


def test_the_head_sizes_accepted_are_those_onnxruntime_runs(tmp_path):
    files = {}
    for hd in HEAD_SIZES:
        path = tmp_path / f"hd{hd}.gguf"
        write_gguf(path, TinyLlama(n_layers=1, n_embd=2 * hd, n_ff=32, n_heads=2, n_kv_heads=1, default_type="F32"))
        files[hd] = str(path)
    report_path = tmp_path / "report.json"
    out = run_bounded(CODE, {"files": files, "report": str(report_path)}, cpu_seconds=60, memory_mib=600)
    assert out.error is None, out.traceback
    report = json.loads(report_path.read_text())
    assert any(r["ort"] for r in report.values()) and not all(r["ort"] for r in report.values())
    for hd, got in report.items():
        if got["ort"]:
            assert got["code"] == 0, f"head size {hd} runs in onnxruntime but was refused: {got['stderr']}"
        else:
            assert got["code"] == 1, f"head size {hd}: onnxruntime cannot run it; from-gguf returned {got['code']}"
            (line,) = got["stderr"].strip().splitlines()
            assert "gguf.kv['llama.embedding_length']" in line and f"head size {hd}" in line, line
