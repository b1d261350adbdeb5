"""One checked model passed down: each entry point loads and checks its model once and builds
its declaration table (TypeTable) once, whoever uses it after the check (lowering, the quantized
execution rewrite, the runtime, quantize's run check and report)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from support.models import linear_model
from support.oracles import int4_oracle

import onnx_struct as S
from onnx_struct import formats
from onnx_struct.check import checker
from onnx_struct.cli import main
from onnx_struct.layout.table import TypeTable
from onnx_struct.passes.quantize import quantize
from onnx_struct.passes.quantize_report import quantize_with_report

PAYLOAD = np.random.default_rng(5).integers(0, 256, 64, dtype=np.uint8).tobytes()


def declarations_key(declarations) -> tuple[bytes, ...]:
    return tuple(d.SerializeToString(deterministic=True) for d in declarations)


@pytest.fixture
def built(monkeypatch) -> dict[str, list]:
    """Every TypeTable built (by its declarations' bytes) and every run of the checker's rules."""
    seen: dict[str, list] = {"tables": [], "checks": []}
    table_init, check_run = TypeTable.__init__, checker._Checker.run

    def counting_table(self, *args, **kwargs):
        table_init(self, *args, **kwargs)
        seen["tables"].append(declarations_key(self.declarations))

    def counting_check(self, *args, **kwargs):
        seen["checks"].append(declarations_key(self.loaded.struct_types))
        return check_run(self, *args, **kwargs)

    monkeypatch.setattr(TypeTable, "__init__", counting_table)
    monkeypatch.setattr(checker._Checker, "run", counting_check)
    return seen


def one_weight_model() -> onnx.ModelProto:
    """Y = X @ W, W a [64, 64] float weight: one weight to quantize."""
    weight = np.random.default_rng(6).standard_normal((64, 64)).astype(np.float32)
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", "W"], ["Y"])],
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(weight, "W")],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def test_check_model_builds_one_table(built):
    model = linear_model(PAYLOAD)
    S.check_model(model)
    assert built["tables"] == [declarations_key(S.get_struct_types(model))]
    assert len(built["checks"]) == 1


def test_lower_checks_once_and_builds_one_table(built):
    model = linear_model(PAYLOAD)
    lowered = S.lower(model)
    assert built["tables"] == [declarations_key(S.get_struct_types(model))]
    assert len(built["checks"]) == 1
    assert "weight::values" in {t.name for t in lowered.graph.initializer}  # the value was lowered


@pytest.mark.parametrize("execution", ["decode", "quantized"])
def test_inference_session_checks_once_and_builds_one_table(built, execution, tmp_path):
    model = linear_model(PAYLOAD)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for form in (model, str(path)):
        built["tables"].clear()
        built["checks"].clear()
        session = S.InferenceSession(form, execution=execution)
        assert built["tables"] == [declarations_key(S.get_struct_types(model))]
        assert len(built["checks"]) == 1
        x = np.linspace(-1, 1, 128, dtype=np.float32)
        (y,) = session.run(None, {"X": x})
        expected = np.maximum(x + int4_oracle(PAYLOAD).astype(np.float32) * np.float32(0.125), 0)
        np.testing.assert_array_equal(y, expected)


def test_quantized_execution_builds_the_models_table_once(built):
    """A registered block format run quantized: the model's table once; the recognizer compares
    the model's declaration with the format's own block declaration (a table of that one)."""
    quantized = quantize(one_weight_model(), "Q4_0", min_elements=1)
    block = formats.get("Q4_0").block_declaration().SerializeToString(deterministic=True)
    built["tables"].clear()
    built["checks"].clear()
    S.InferenceSession(quantized)
    model_key = declarations_key(S.get_struct_types(quantized))
    assert [t for t in built["tables"] if t == model_key] == [model_key]
    assert all(t == (block,) for t in built["tables"] if t != model_key), built["tables"]
    assert len(built["checks"]) == 1


def test_quantize_of_one_weight_checks_the_result_once(built):
    """The result is checked once, and that check's table serves the run check (lowering) too;
    the encoder's declarations (a scratch model: the block and one root) get one table. The
    one-block probe of a format (is it runnable?) is asked once per format and process: the
    first call here makes it."""
    model = one_weight_model()
    quantize(model, "Q4_0", min_elements=1)  # the Q4_0 probe, if no test made it before
    built["tables"].clear()
    built["checks"].clear()
    quantized = quantize(model, "Q4_0", min_elements=1)
    result_key = declarations_key(S.get_struct_types(quantized))
    # The scratch model declares what the result declares (one chunk, the weight's own shape).
    assert built["tables"] == [result_key, result_key]
    assert built["checks"] == [result_key]


def test_quantize_with_report_and_the_cli_check_the_result_once(built, tmp_path):
    """As quantize; the report's execution column also runs the recognizer, which compares the
    value's declaration with the format's own block declaration (tables of that one)."""
    model = one_weight_model()
    # The Q4_0 probe, if no test made it before; the result's declarations.
    result_key = declarations_key(S.get_struct_types(quantize(model, "Q4_0", min_elements=1)))
    block = formats.get("Q4_0").block_declaration().SerializeToString(deterministic=True)
    source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    cli = ["quantize", str(source), str(out), "--format", "Q4_0", "--min-elements", "1", "--quiet"]
    for run in (lambda: quantize_with_report(model, "Q4_0", min_elements=1), lambda: main(cli)):
        built["tables"].clear()
        built["checks"].clear()
        run()
        assert [t for t in built["tables"] if t != (block,)] == [result_key, result_key]
        assert built["checks"] == [result_key]
    assert declarations_key(S.get_struct_types(onnx.load(out))) == result_key


def test_decode_and_view_build_one_table(built):
    model = linear_model(PAYLOAD)
    key = declarations_key(S.get_struct_types(model))
    decoded = S.decode("weight", model)
    np.testing.assert_array_equal(decoded, int4_oracle(PAYLOAD).astype(np.float32) * np.float32(0.125))
    assert built["tables"] == [key]
    built["tables"].clear()
    assert S.view("weight", model)["values"].shape == (128,)
    assert built["tables"] == [key]


@pytest.mark.parametrize("command", ["check", "lower", "decode", "inspect"])
def test_each_cli_command_builds_one_table(built, command, tmp_path, capsys):
    model = linear_model(PAYLOAD)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    args = {
        "check": [str(path)],
        "lower": [str(path), str(tmp_path / "lowered.onnx")],
        "decode": [str(path), "weight", "-o", str(tmp_path / "w.npy")],
        "inspect": [str(path), "--json"],
    }[command]
    assert main([command, *args]) == 0
    capsys.readouterr()
    assert built["tables"] == [declarations_key(S.get_struct_types(model))]
    assert len(built["checks"]) == (1 if command in ("check", "lower") else 0)
