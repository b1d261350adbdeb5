"""Struct parts through onnx-ir and the onnxscript optimizer (onnx_struct.ecosystem.ir), on the
README's models, a quantized MLP and an LLM graph: check_model passes after the round trip, the
struct parts come back byte for byte (the original model is the oracle), values are renamed and
dropped as the passes rename and drop their users, and onnxruntime's outputs are the original's.
Without the adapter onnx-ir drops every part, and check says so."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

import onnx_struct as S
from onnx_struct.errors import ValidationError

ir = pytest.importorskip("onnx_ir")
from onnx_struct.ecosystem import ir as struct_ir  # noqa: E402

README = Path(__file__).resolve().parent.parent / "README.md"
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
    from support.llm import TinyLlama, prompt_feeds, write_gguf

    from onnx_struct.convert import convert

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


@pytest.mark.parametrize("name", ["readme-linear-int4", "readme-mlp", "quantized-mlp"])
def test_round_trip_keeps_every_part_and_the_outputs(name, tmp_path):
    model, _ = models(tmp_path)[name]
    back = struct_ir.from_ir(struct_ir.to_ir(model))
    S.check_model(back)
    assert parts(back) == parts(model)
    assert [i.name for i in back.graph.input] == [i.name for i in model.graph.input]
    if model.graph.node:
        feeds = mlp_feeds(model)
        for got, want in zip(run(back, feeds), run(model, feeds), strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["readme-linear-int4", "readme-mlp", "quantized-mlp"])
def test_stock_onnx_ir_loses_the_parts_and_check_says_so(name, tmp_path):
    model, _ = models(tmp_path)[name]
    plain = ir.serde.serialize_model(ir.serde.deserialize_model(model))
    assert parts(plain) == ([], {})  # what the adapter is for
    if not model.graph.node:
        S.check_model(plain)  # nothing reads the value: an empty graph is all that is left, and valid
        return
    with pytest.raises(onnx.checker.ValidationError) as caught:
        S.check_model(plain)
    assert caught.value.code == "struct_parts_lost"
    assert caught.value.path == "graph.node[0].input[0] ('W0_T')"
    assert "if it named a struct value, the model's struct parts were lost" in caught.value.reason
    assert "onnx_struct.ecosystem.ir" in caught.value.reason and "lower first" in caught.value.reason


def test_save_and_load_keep_the_parts(tmp_path):
    model = quantized_mlp()
    struct_ir.save(struct_ir.to_ir(model), tmp_path / "m.onnx")
    assert parts(onnx.load(tmp_path / "m.onnx")) == parts(model)  # a stock file with its parts
    back = struct_ir.from_ir(struct_ir.load(tmp_path / "m.onnx"))
    S.check_model(back)
    assert parts(back) == parts(model)


def test_a_renamed_input_renames_its_struct_value():
    model = quantized_mlp()
    ir_model = struct_ir.to_ir(model)
    (stand_in,) = [v for v in ir_model.graph.inputs if v.name == "W0_T"]
    stand_in.name = "renamed.W0"  # as a naming pass does: every user reads the new name
    back = struct_ir.from_ir(ir_model)
    S.check_model(back)
    assert sorted(parts(back)[1]) == ["W1_T", "renamed.W0"]
    feeds = mlp_feeds(model)
    np.testing.assert_array_equal(run(back, feeds)[0], run(model, feeds)[0])
    np.testing.assert_array_equal(S.decode("renamed.W0", back), S.decode("W0_T", model))


def test_inputs_of_the_logical_types_are_what_onnx_ir_sees():
    model = quantized_mlp()
    ir_model = struct_ir.to_ir(model)
    by_name = {v.name: v for v in ir_model.graph.inputs}
    decoded = S.decode("W0_T", model)
    assert by_name["W0_T"].dtype == ir.DataType.FLOAT and tuple(by_name["W0_T"].shape) == decoded.shape


def test_check_names_the_adapter_for_a_model_written_by_onnx_struct():
    model = quantized_mlp()
    plain = ir.serde.serialize_model(ir.serde.deserialize_model(model))
    plain.metadata_props.add(key="onnx_struct.gguf.version", value="3")  # what a converted GGUF file keeps
    with pytest.raises(ValidationError) as caught:
        S.check_model(plain)
    assert caught.value.reason.startswith("names no value (no graph input, initializer, node output or struct value)")
    assert [e.code for e in S.validate(plain)] == ["struct_parts_lost"]


def test_an_unsorted_graph_is_still_onnxs_finding():
    model = matmul_chain([8, 8, 8])
    model.graph.node.reverse()  # every name is defined, only after its reader
    with pytest.raises(ValidationError) as caught:
        S.check_model(model)
    assert caught.value.code == "onnx_checker"


def test_an_undefined_name_without_struct_origin_is_hedged():
    model = matmul_chain([8, 8])
    del model.graph.initializer[:]
    with pytest.raises(ValidationError) as caught:
        S.check_model(model)
    assert caught.value.code == "struct_parts_lost" and "if it named a struct value" in caught.value.reason


class TestOnnxscriptOptimizer:
    onnxscript = pytest.importorskip("onnxscript")

    @pytest.mark.parametrize("name", ["readme-linear-int4", "readme-mlp", "quantized-mlp"])
    def test_optimize_keeps_the_parts_and_the_outputs(self, name, tmp_path):
        model, _ = models(tmp_path)[name]
        optimized = struct_ir.optimize(model)
        S.check_model(optimized)
        assert parts(optimized) == parts(model)
        if model.graph.node:
            feeds = mlp_feeds(model)
            np.testing.assert_allclose(run(optimized, feeds)[0], run(model, feeds)[0], rtol=1e-6, atol=1e-6)

    def test_a_value_whose_users_the_optimizer_drops_is_dropped(self):
        model = quantized_mlp(extra_output=True)
        assert "WZ_T" in parts(model)[1]
        ir_model = struct_ir.to_ir(model)
        ir_model.graph.outputs.pop()  # Z is no longer wanted: its MatMul and Transpose are dead
        self.onnxscript.optimizer.optimize(ir_model)
        back = struct_ir.from_ir(ir_model)
        S.check_model(back)
        assert sorted(parts(back)[1]) == ["W0_T", "W1_T"]
        assert parts(back)[1]["W0_T"] == parts(model)[1]["W0_T"]
        feeds = mlp_feeds(model)
        np.testing.assert_allclose(run(back, feeds)[0], run(model, feeds)[0], rtol=1e-6, atol=1e-6)

    def test_stock_optimizer_loses_the_parts(self):
        plain = self.onnxscript.optimizer.optimize(quantized_mlp())
        assert parts(plain) == ([], {})
        with pytest.raises(ValidationError, match="struct parts were lost"):
            S.check_model(plain)


def test_llm_graph_through_onnx_ir_and_the_optimizer(tmp_path):
    onnxscript = pytest.importorskip("onnxscript")
    model, feeds = llm_graph(tmp_path)
    want = run(model, feeds)
    back = struct_ir.from_ir(struct_ir.to_ir(model))
    S.check_model(back)
    assert parts(back) == parts(model)
    for got, expected in zip(run(back, feeds), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    optimized = struct_ir.optimize(model)
    S.check_model(optimized)
    assert parts(optimized) == parts(model)
    for got, expected in zip(run(optimized, feeds), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)  # folded nodes round otherwise
    plain = onnxscript.optimizer.optimize(onnx.ModelProto.FromString(model.SerializeToString()))
    with pytest.raises(ValidationError) as caught:
        S.check_model(plain)  # the converted file's metadata says where the model came from
    assert caught.value.code == "struct_parts_lost"
    assert caught.value.reason.startswith("names no value (no graph input")
