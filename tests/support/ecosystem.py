"""Models the ecosystem tests (tests/test_ecosystem_ir*.py) run through neighbouring tools: the
README's LINEAR_INT4_128 example (built by the README's own code), its quantize workflow, a
quantized MatMul chain and a converted LLM graph; and the helpers that compare them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

import onnx_struct as S

README = Path(__file__).resolve().parent.parent.parent / "README.md"
RNG = np.random.default_rng(40)


def readme_example() -> onnx.ModelProto:
    """The README's LINEAR_INT4_128 model, built by the README's own code."""
    (code,) = [c for lang, c in re.findall(r"```(\w+)\n(.*?)```", README.read_text(), re.S) if "LINEAR_INT4" in c]
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)
    return namespace["model"]


def matmul_chain(widths: list[int], extra_output: bool = False) -> onnx.ModelProto:
    """X -> MatMul -> Relu -> ... -> Y over float weights W0, W1, ...; ``extra_output``: a second
    output Z = X @ WZ beside the chain (a branch a pass can drop)."""
    nodes, inits, current = [], [], "X"
    for k, (rows, cols) in enumerate(zip(widths, widths[1:], strict=False)):
        inits.append(onnx.numpy_helper.from_array(RNG.standard_normal((rows, cols)).astype(np.float32), f"W{k}"))
        out = "Y" if k == len(widths) - 2 else f"H{k}"
        nodes.append(oh.make_node("MatMul", [current, f"W{k}"], [f"M{k}" if out != "Y" else "Y"]))
        if out != "Y":
            nodes.append(oh.make_node("Relu", [f"M{k}"], [out]))
        current = out
    outputs = [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1, widths[-1]])]
    if extra_output:
        inits.append(onnx.numpy_helper.from_array(RNG.standard_normal((widths[0], 64)).astype(np.float32), "WZ"))
        nodes.append(oh.make_node("MatMul", ["X", "WZ"], ["Z"]))
        outputs.append(oh.make_tensor_value_info("Z", TensorProto.FLOAT, [1, 64]))
    graph = oh.make_graph(
        nodes, "mlp", [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, widths[0]])], outputs, inits
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def quantized_mlp(**options) -> onnx.ModelProto:
    return S.quantize(matmul_chain([64, 64, 64], **options), format="q4_0")


def readme_mlp() -> onnx.ModelProto:
    """The README's quantize workflow: a [4096, 64] MatMul weight as Q4_0."""
    return S.quantize(matmul_chain([4096, 64]), format="q4_0")


def llm_graph(tmp_path: Path):
    """A tiny random llama GGUF converted with graph=True, and its prompt feeds."""
    pytest.importorskip("gguf")
    from onnx_struct.convert import convert
    from support.llm import TinyLlama, prompt_feeds, write_gguf

    config = TinyLlama()
    write_gguf(tmp_path / "tiny.gguf", config)
    return convert(tmp_path / "tiny.gguf", graph=True), prompt_feeds(config, [3, 17, 5, 42, 7])


def mlp_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    width = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    return {"X": np.random.default_rng(1).standard_normal((1, width)).astype(np.float32)}


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return S.InferenceSession(model, accuracy_level=0).run(None, feeds)


def parts(model: onnx.ModelProto) -> tuple[list[bytes], dict[str, bytes]]:
    """The model's declarations and its struct values by name, serialized."""
    types = [t.SerializeToString() for t in S.get_struct_types(model)]
    return types, {v.name: v.SerializeToString() for v in S.get_struct_values(model)}


def models(tmp_path: Path) -> dict[str, tuple[onnx.ModelProto, dict | None]]:
    return {
        "readme-linear-int4": (readme_example(), None),
        "readme-mlp": (readme_mlp(), None),
        "quantized-mlp": (quantized_mlp(), None),
    }
