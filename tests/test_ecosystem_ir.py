"""Struct parts through onnx-ir and the onnxscript optimizer (onnx_struct.ecosystem.ir), on the
README's models, a quantized MLP and an LLM graph: check_model passes after the round trip, the
struct parts come back byte for byte (the original model is the oracle), values are renamed and
dropped as the passes rename and drop their users, and onnxruntime's outputs are the original's.
Without the adapter onnx-ir drops every part, and check says so."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from support.ecosystem import llm_graph, matmul_chain, mlp_feeds, models, parts, quantized_mlp, run

import onnx_struct as S
from onnx_struct.errors import ValidationError

ir = pytest.importorskip("onnx_ir")
from onnx_struct.ecosystem import ir as struct_ir  # noqa: E402


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


def test_struct_typed_inputs_and_outputs_come_back_typed():
    model = quantized_mlp()
    (value,) = [v for v in S.get_struct_values(model) if v.name == "W0_T"]
    model.graph.node.append(onnx.helper.make_node("Identity", ["blocks"], ["blocks_out"]))
    inputs, outputs = [S.make_struct_value_info("blocks", value.type)], [S.make_struct_value_info("blocks_out", None)]
    S.add_value_infos(model, inputs=inputs, outputs=outputs)
    S.check_model(model)
    ir_model = struct_ir.to_ir(model)
    (blocks,) = [v for v in ir_model.graph.inputs if v.name == "blocks"]
    assert blocks.type is None  # onnx-ir has no struct type: an untyped input
    for back in (struct_ir.from_ir(ir_model), struct_ir.optimize(model)):
        S.check_model(back)
        assert S.from_onnx(back).graph.input == S.from_onnx(model).graph.input
        assert S.from_onnx(back).graph.output == S.from_onnx(model).graph.output


def test_a_value_read_inside_if_branches_and_a_loop():
    from test_quantize_reach import subgraph_model

    model = S.quantize(subgraph_model(), format="q4_0")
    assert parts(model)[1]
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    for back in (struct_ir.from_ir(struct_ir.to_ir(model)), struct_ir.optimize(model)):
        S.check_model(back)
        assert parts(back) == parts(model)
        for branch in (True, False):
            feeds = {"X": x, "c": np.array(branch)}
            np.testing.assert_allclose(run(back, feeds)[0], run(model, feeds)[0], rtol=1e-6, atol=1e-6)


def test_payloads_in_the_gguf_file_stay_referenced(tmp_path):
    pytest.importorskip("gguf")
    from support.llm import TinyLlama, prompt_feeds, write_gguf

    from onnx_struct.convert import convert

    config = TinyLlama(seed=5)
    write_gguf(tmp_path / "tiny.gguf", config)
    onnx.save(convert(tmp_path / "tiny.gguf", graph=True, reference=True), tmp_path / "model.onnx")
    ir_model = struct_ir.load(tmp_path / "model.onnx")
    struct_ir.save(ir_model, tmp_path / "again.onnx")  # beside the .gguf its values reference
    S.check_model(tmp_path / "again.onnx")
    feeds = prompt_feeds(config, [3, 17, 5])
    want = S.InferenceSession(tmp_path / "model.onnx", accuracy_level=0).run(None, feeds)
    got = S.InferenceSession(tmp_path / "again.onnx", accuracy_level=0).run(None, feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "spoil, words",
    [
        (lambda m: m.metadata_props[0].__setattr__("value", "not base64!"), "are not base64"),
        (lambda m: m.metadata_props[0].__setattr__("value", "CAE="), "other than struct_types"),  # ir_version
        (lambda m: m.graph.input[1].metadata_props[0].__setattr__("value", "/w=="), "not a StructProto"),
    ],
)
def test_altered_carried_parts_are_refused(spoil, words):
    from onnx_struct.ecosystem.carried import carry, restore

    carried = carry(quantized_mlp())
    assert carried.metadata_props[0].key == "onnx_struct.struct_types"
    assert carried.graph.input[1].metadata_props[0].key == "onnx_struct.struct_value"
    spoil(carried)
    with pytest.raises(ValidationError, match=words):
        restore(carried)


def test_onnx_struct_check_prints_the_diagnosis(tmp_path, capsys):
    from onnx_struct.cli import main

    onnx.save(ir.serde.serialize_model(ir.serde.deserialize_model(quantized_mlp())), tmp_path / "lost.onnx")
    assert main(["check", str(tmp_path / "lost.onnx")]) == 1
    err = capsys.readouterr()
    printed = err.out + err.err
    assert "('W0_T'): names no value: if it named a struct value, the model's struct parts were lost" in printed
    assert printed.count("struct parts were lost") == 1
    with pytest.raises(ValidationError, match="struct parts were lost"):
        S.check_model(tmp_path / "lost.onnx")  # a path onnx's checker reads itself


def test_a_model_rebuilt_around_its_graph_lost_its_declarations():
    model = quantized_mlp()
    rebuilt = onnx.helper.make_model(model.graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    assert parts(rebuilt)[0] == [] and sorted(parts(rebuilt)[1]) == ["W0_T", "W1_T"]
    with pytest.raises(ValidationError) as caught:
        S.check_model(rebuilt)
    assert caught.value.code == "unknown_type_index"
    assert "out of range (0 struct_types): the model's declarations were lost" in caught.value.reason
    S.set_struct_types(rebuilt, S.get_struct_types(model))  # what the message says to do
    S.check_model(rebuilt)


def test_a_stock_view_written_in_place_of_the_model_is_diagnosed():
    from onnx_struct.schema.model import load
    from onnx_struct.schema.projections import stock_view

    view = stock_view(load(quantized_mlp()))  # each struct value an input of an Opaque stand-in type
    onnx.checker.check_model(view)  # valid ONNX for onnx
    with pytest.raises(ValidationError) as caught:
        S.check_model(view)
    assert caught.value.code == "struct_parts_lost" and caught.value.path == "graph.input[1] ('W0_T')"
    assert [e.code for e in S.validate(view)] == ["struct_parts_lost"]
    S.check_model(matmul_chain([8, 8]))  # a model without stand-ins is as valid as before


def test_a_lost_value_read_inside_a_branch_is_named_with_its_path():
    info = onnx.helper.make_tensor_value_info
    branch = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["X", "W'b"], ["T"])], "then", [], [info("T", onnx.TensorProto.FLOAT, None)]
    )
    node = onnx.helper.make_node("If", ["c"], ["Y"], then_branch=branch, else_branch=branch)
    inputs = [info("X", onnx.TensorProto.FLOAT, [1, 8]), info("c", onnx.TensorProto.BOOL, [])]
    graph = onnx.helper.make_graph([node], "g", inputs, [info("Y", onnx.TensorProto.FLOAT, None)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    with pytest.raises(ValidationError) as caught:
        S.check_model(model)
    assert caught.value.code == "struct_parts_lost"
    assert caught.value.path == "graph.node[0].attribute ('else_branch').node[0].input[1] (\"W'b\")"
