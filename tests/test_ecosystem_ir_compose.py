"""onnx.compose with struct values renamed (onnx_struct.ecosystem.compose), and the documented
path for the tools that cannot be adapted: a lowered model goes through onnx-ir, onnxscript and
(inlined) onnx's version_converter with onnxruntime's outputs unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.compose
import onnx.inliner
import onnx.version_converter
import pytest
from support.ecosystem import llm_graph, matmul_chain, mlp_feeds, parts, quantized_mlp, readme_example, run

import onnx_struct as S
from onnx_struct.ecosystem import compose
from onnx_struct.ecosystem.carried import carry, restore


def test_stock_add_prefix_keeps_the_parts_but_not_their_names_so_merge_collides():
    model = quantized_mlp()
    prefixed = onnx.compose.add_prefix(model, "a/")
    assert sorted(parts(prefixed)[1]) == ["W0_T", "W1_T"]  # kept, not renamed
    assert prefixed.graph.node[0].input[0] == "W0_T"  # nor is the name its reader reads
    assert prefixed.graph.input[0].name == "a/X"
    with pytest.raises(ValueError, match="overlapping names"):
        onnx.compose.merge_models(prefixed, onnx.compose.add_prefix(model, "b/"), [])


def test_add_prefix_renames_struct_values():
    model = quantized_mlp()
    prefixed = compose.add_prefix(model, "a/")
    S.check_model(prefixed)
    assert sorted(parts(prefixed)[1]) == ["a/W0_T", "a/W1_T"]
    assert parts(prefixed)[0] == parts(model)[0]
    x = mlp_feeds(model)["X"]
    np.testing.assert_array_equal(run(prefixed, {"a/X": x})[0], run(model, {"X": x})[0])
    with pytest.raises(ValueError, match="must agree"):
        compose.add_prefix(model, "a/", rename_initializers=False)


def test_add_prefix_of_the_readme_example_renames_its_unread_value():
    prefixed = compose.add_prefix(readme_example(), "p.")
    S.check_model(prefixed)
    assert list(parts(prefixed)[1]) == ["p.weight"]


def test_merge_models_chains_two_struct_models():
    first, second = quantized_mlp(), S.quantize(matmul_chain([64, 64, 64]), format="q8_0")
    merged = compose.merge_models(first, second, [("Y", "X")], prefix1="a/", prefix2="b/")
    S.check_model(merged)
    types_first, types_second = parts(first)[0], parts(second)[0]
    assert len(parts(merged)[0]) == len(types_first) + len(types_second)
    assert sorted(parts(merged)[1]) == ["a/W0_T", "a/W1_T", "b/W0_T", "b/W1_T"]
    # The second model's values point past the first model's declarations, at copies of their own.
    for name in ("W0_T", "W1_T"):
        np.testing.assert_array_equal(S.decode(f"b/{name}", merged), S.decode(name, second))
        np.testing.assert_array_equal(S.decode(f"a/{name}", merged), S.decode(name, first))
    x = mlp_feeds(first)["X"]
    middle = run(first, {"X": x})[0]
    np.testing.assert_allclose(run(merged, {"a/X": x})[0], run(second, {"X": middle})[0], rtol=1e-6, atol=1e-6)


def test_merge_models_side_by_side_with_chosen_inputs():
    model = quantized_mlp()
    merged = compose.merge_models(model, model, [], prefix1="a/", prefix2="b/", inputs=["a/X", "b/X"])
    S.check_model(merged)
    assert [i.name for i in merged.graph.input] == ["a/X", "b/X"]
    x = mlp_feeds(model)["X"]
    got = run(merged, {"a/X": x, "b/X": 2 * x})
    np.testing.assert_array_equal(got[0], run(model, {"X": x})[0])
    np.testing.assert_array_equal(got[1], run(model, {"X": 2 * x})[0])


def test_version_converter_drops_what_it_carries():
    """Its C++ IR keeps graph inputs but not their metadata_props: even the carried form loses
    the values, so the path is to lower first (next test)."""
    model = quantized_mlp()
    with pytest.raises(onnx.version_converter.ConvertError, match="W0_T is undefined"):
        onnx.version_converter.convert_version(model, 22)
    converted = restore(onnx.version_converter.convert_version(carry(model), 22))
    assert parts(converted)[1] == {}


def _ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime

    return onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)


@pytest.mark.parametrize("execution", ["decode", "quantized"])
def test_a_lowered_model_goes_through_the_tools_unchanged(execution):
    ir = pytest.importorskip("onnx_ir")
    onnxscript = pytest.importorskip("onnxscript")
    model = quantized_mlp()
    lowered = S.lower(model, execution=execution)
    feeds = mlp_feeds(model)
    want = _ort_run(lowered, feeds)[0]
    through_ir = ir.serde.serialize_model(ir.serde.deserialize_model(lowered))
    optimized = onnxscript.optimizer.optimize(onnx.ModelProto.FromString(lowered.SerializeToString()))
    # onnx's version_converter drops model-local functions (the decoders): inline them first.
    converted = onnx.version_converter.convert_version(onnx.inliner.inline_local_functions(lowered), 22)
    for rewritten in (through_ir, optimized, converted):
        onnx.checker.check_model(rewritten)
        np.testing.assert_allclose(_ort_run(rewritten, feeds)[0], want, rtol=0, atol=4e-7)


def test_a_lowered_llm_graph_goes_through_onnx_ir_and_onnxscript(tmp_path):
    ir = pytest.importorskip("onnx_ir")
    onnxscript = pytest.importorskip("onnxscript")
    model, feeds = llm_graph(tmp_path)
    from support.llm import relative_rms  # after llm_graph's importorskip of gguf

    lowered = S.lower(model, execution="quantized")
    want = _ort_run(lowered, feeds)
    through_ir = ir.serde.serialize_model(ir.serde.deserialize_model(lowered))
    optimized = onnxscript.optimizer.optimize(onnx.ModelProto.FromString(lowered.SerializeToString()))
    onnx.checker.check_model(through_ir)
    for got, expected in zip(_ort_run(through_ir, feeds), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    # The optimizer folds the RoPE tables' Cos and Sin with numpy, whose values differ from
    # onnxruntime's vectorized ones in the last bits of large angles: logits move by ~1e-3.
    onnx.checker.check_model(optimized)
    folded = {n.op_type for n in lowered.graph.node} - {n.op_type for n in optimized.graph.node}
    assert {"Cos", "Sin"} <= folded
    for got, expected in zip(_ort_run(optimized, feeds), want, strict=True):
        assert relative_rms(got, expected) < 1e-3


def test_add_prefix_of_an_llm_graph(tmp_path):
    model, feeds = llm_graph(tmp_path)
    prefixed = compose.add_prefix(model, "m/")
    S.check_model(prefixed)
    assert sorted(parts(prefixed)[1]) == sorted(f"m/{name}" for name in parts(model)[1])
    want = run(model, feeds)
    got = run(prefixed, {f"m/{name}": value for name, value in feeds.items()})
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
