"""Lowering for execution (``lower(model, execution="quantized")``) against independent oracles.

Each test model reads one weight ``W`` (a struct value of a registered block format, stored
``[N, K]`` with blocks along K as GGUF and ``quantize`` store it) three ways: ``x @
Transpose(W)``, ``Gemm(x, W, C, transB=1, beta=0.5)`` and ``Gather(W, idx)``. The lowered model
must hold integer codes and no decoder, onnxruntime must fuse the weights into ``MatMulNBits``
(checked in the optimized model it writes), and outputs must match ``x @ dequantize(W)^T`` in
float64, where ``dequantize`` is gguf-py / ml_dtypes / numpy (tests/test_affine.py's oracles),
not this package. Tolerance: at accuracy level 0 MatMulNBits accumulates float32 products, so
each output may differ from the float64 sum by a few float32 roundings of ``|x| @ |W|^T``
(``RTOL`` of that bound); gathered rows are exact.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator
from test_affine import oracle, random_payload

import onnx_struct as S
import onnx_struct.lowering.execution as execution
from onnx_struct import formats
from onnx_struct.check.checked import checked_model
from onnx_struct.cli import main
from onnx_struct.formats.base import FORMAT_DOMAIN
from onnx_struct.lowering.execution import rewrite_for_execution
from onnx_struct.lowering.lower import lower_model

pytest.importorskip("gguf")

# Q4_K and Q2_K carry a minimum, Q4_0 / Q3_K / UINT4 a zero point, the rest signed codes; block
# sizes 16 (Q6_K, Q2_K, Q3_K), 32, 256 (TQ2_0); INT4_B32_F16 is a linear INT4 format.
FORMATS = [
    "Q4_0",
    "Q8_0",
    "Q4_K",
    "Q6_K",
    "IQ4_XS",
    "MXFP4",
    "INT4_B32_F16",
    "UINT4_B32_F16_ZP",
    "Q2_K",
    "Q3_K",
    "Q5_1",
    "TQ2_0",
]
N, K, ROWS = 48, 512, 3
RTOL = 1e-5
SEED = 7


def weight_model(name: str, payload: bytes, extra_nodes=(), extra_outputs=(), opset: int = 21) -> onnx.ModelProto:
    nodes = [
        oh.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
        oh.make_node("MatMul", ["x", "Wt"], ["y"], name="matmul"),
        oh.make_node("Gemm", ["x", "W", "c"], ["z"], transB=1, beta=0.5, name="gemm"),
        oh.make_node("Gather", ["W", "idx"], ["e"], axis=0, name="embed"),
        *extra_nodes,
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, K]),
            oh.make_tensor_value_info("c", TensorProto.FLOAT, [N]),
            oh.make_tensor_value_info("idx", TensorProto.INT64, [2, 2]),
        ],
        [
            oh.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, N]),
            oh.make_tensor_value_info("z", TensorProto.FLOAT, [ROWS, N]),
            oh.make_tensor_value_info("e", TensorProto.FLOAT, [2, 2, K]),
            *extra_outputs,
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)
    S.add_struct_values(model, formats.get(name).make_value(model, "W", (N, K), payload))
    return model


def feeds(rng) -> dict[str, np.ndarray]:
    return {
        "x": rng.standard_normal((ROWS, K)).astype(np.float32),
        "c": rng.standard_normal(N).astype(np.float32),
        "idx": np.array([[0, N - 1], [5, 5]], np.int64),
    }


def run_ort(model: onnx.ModelProto, inputs, tmp_path) -> tuple[list[np.ndarray], list[str]]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    outputs = session.run(None, inputs)
    return outputs, [n.op_type for n in onnx.load(tmp_path / "optimized.onnx").graph.node]


def assert_close_product(actual: np.ndarray, x: np.ndarray, w: np.ndarray, bias=None) -> None:
    """``actual`` vs ``x @ w.T (+ bias)`` in float64, within RTOL of ``|x| @ |w|.T``."""
    expected = x.astype(np.float64) @ w.astype(np.float64).T
    bound = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    if bias is not None:
        expected = expected + bias
        bound = bound + np.abs(bias)
    assert np.all(np.abs(actual - expected) <= RTOL * bound + 1e-30), np.max(np.abs(actual - expected) / bound)


def x_at(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) @ w.astype(np.float64).T


def assert_quantized(lowered: onnx.ModelProto, fused: bool = False) -> None:
    """No decoder, codes as 4/8-bit integers, float initializers no bigger than one per 16 codes;
    one code tensor per consumer, or (``fused``: a session's, lowering/execution/fuse.py) MatMul's
    and Gemm's of one x stacked in one."""
    assert not lowered.functions
    assert all(n.domain != FORMAT_DOMAIN for n in lowered.graph.node)
    bits = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.INT8: 8, TensorProto.UINT8: 8}
    # Code tensors: at least 4 bits per weight element (GatherBlockQuantized's are uint8 pairs).
    codes = [t for t in lowered.graph.initializer if bits.get(t.data_type, 0) * np.prod(t.dims) >= 4 * N * K]
    assert len(codes) == (
        2 if fused else 3
    )  # one copy per consumer (onnxruntime fuses only a weight with one consumer)
    for t in lowered.graph.initializer:
        if t.data_type == TensorProto.FLOAT:
            assert int(np.prod(t.dims)) <= N * K // 16 * (2 if fused else 1), t.name


@pytest.mark.parametrize("name", FORMATS)
def test_quantized_lowering_matches_the_oracle(name, tmp_path):
    rng = np.random.default_rng(SEED)
    payload = random_payload(name, (N, K), SEED, sane=True)
    lowered = S.lower(weight_model(name, payload), execution="quantized")
    assert_quantized(lowered)
    inputs = feeds(rng)
    (y, z, e), ops = run_ort(lowered, inputs, tmp_path)
    assert ops.count("MatMulNBits") == 2 and "DequantizeLinear" not in ops  # fused: nothing decoded per run
    w = oracle(name, payload, (N, K))
    assert_close_product(y, inputs["x"], w)
    assert_close_product(z, inputs["x"], w, bias=0.5 * inputs["c"].astype(np.float64))
    np.testing.assert_array_equal(e, w[inputs["idx"]])


@pytest.mark.parametrize("name", ["Q4_0", "Q4_K", "Q6_K", "INT4_B32_F16"])
def test_reference_evaluator_runs_the_standard_qdq_graph(name):
    """A second runtime: onnx's reference evaluator runs the MatMul path (standard ops only)."""
    payload = random_payload(name, (N, K), SEED, sane=True)
    model = weight_model(name, payload)
    del model.graph.node[2:]  # Gemm and Gather dropped (GatherBlockQuantized is onnxruntime's)
    del model.graph.output[1:]
    model.graph.input[1].name, model.graph.input[2].name = "unused_c", "unused_idx"
    del model.graph.input[1:]
    lowered = S.lower(model, execution="quantized")
    assert {n.op_type for n in lowered.graph.node} >= {"DequantizeLinear", "MatMul"}
    x = np.random.default_rng(SEED).standard_normal((ROWS, K)).astype(np.float32)
    (y,) = ReferenceEvaluator(lowered).run(None, {"x": x})
    assert_close_product(y, x, oracle(name, payload, (N, K)))


def test_a_value_consumed_elsewhere_keeps_its_decoder(tmp_path):
    payload = random_payload("Q4_K", (N, K), SEED, sane=True)
    extra = [oh.make_node("ReduceSum", ["W"], ["total"], keepdims=0, name="sum")]
    model = weight_model("Q4_K", payload, extra, [oh.make_tensor_value_info("total", TensorProto.FLOAT, [])])
    report = rewrite_for_execution(checked_model(model)).report
    assert sorted(report.rewritten["W"]) == ["Gather 'embed'", "Gemm 'gemm'", "MatMul 'matmul'"]
    # The reason names the reader (it said "other nodes, a subgraph or a graph output")
    assert report.kept == {"W": "also read by ReduceSum 'sum' (input 0)"} and report.dropped == []
    lowered = S.lower(model, execution="quantized")
    decoders = [n for n in lowered.graph.node if n.domain == FORMAT_DOMAIN]
    assert [n.output[0] for n in decoders] == ["W"]  # only ReduceSum reads the decoded W
    assert [n.op_type for n in lowered.graph.node if "W" in n.input] == ["ReduceSum"]
    inputs = feeds(np.random.default_rng(SEED))
    (y, _, _, total), _ = run_ort(lowered, inputs, tmp_path)
    w = oracle("Q4_K", payload, (N, K))
    assert_close_product(y, inputs["x"], w)
    np.testing.assert_allclose(total, w.astype(np.float64).sum(), rtol=1e-5)


def test_a_transpose_without_perm_is_the_2d_transpose(tmp_path):
    """Transpose's default perm reverses the axes: [1, 0] for W. Without the attribute the MatMul
    kept its decoder (a red-team note); it now takes the quantized route as with perm=[1, 0]."""
    payload = random_payload("Q4_0", (N, K), SEED, sane=True)
    model = weight_model("Q4_0", payload)
    del model.graph.node[0].attribute[:]
    report = rewrite_for_execution(checked_model(model)).report
    assert sorted(report.rewritten["W"]) == ["Gather 'embed'", "Gemm 'gemm'", "MatMul 'matmul'"]
    assert report.kept == {} and report.dropped == ["W"]
    lowered = S.lower(model, execution="quantized")
    assert not [n for n in lowered.graph.node if n.op_type == "Transpose"]
    inputs = feeds(np.random.default_rng(SEED))
    (y, _, _), _ = run_ort(lowered, inputs, tmp_path)
    assert_close_product(y, inputs["x"], oracle("Q4_0", payload, (N, K)))


def test_untransposed_weight_and_foreign_declarations_keep_the_decoder():
    """W [K, N] read directly as MatMul's B has blocks along N: not MatMulNBits' layout. The
    declaration's name plays no part (it is free text): a renamed root with the registry's exact
    decoder is still the format; a root with the registry's name and another decoder is not."""
    payload = random_payload("Q4_0", (N, K), SEED, sane=True)
    model = weight_model("Q4_0", payload)
    model.graph.node[1].input[1] = "W"  # x [3, K] @ W [N, K]: shapes disagree, only lowering is checked
    del model.graph.node[0]
    report = rewrite_for_execution(checked_model(model)).report
    assert sorted(report.rewritten["W"]) == ["Gather 'embed'", "Gemm 'gemm'"]
    assert report.kept == {"W": "also read by MatMul 'matmul' (input 1)"}

    renamed = S.from_onnx(weight_model("Q4_0", payload))
    renamed.struct_types[-1].name = "my_weight"
    report = rewrite_for_execution(checked_model(renamed)).report
    assert sorted(report.rewritten["W"]) == ["Gather 'embed'", "Gemm 'gemm'", "MatMul 'matmul'"]

    foreign = S.from_onnx(weight_model("Q4_0", payload))
    decoder = foreign.struct_types[-1].decoder
    output = decoder.output[0]  # one more final node, an Identity: same values, not the registry's bytes
    decoder.node[-1].output[0] = output + "_before"
    decoder.node.add(op_type="Identity", input=[output + "_before"], output=[output])
    report = rewrite_for_execution(checked_model(foreign)).report
    assert report.rewritten == {}
    lowered = S.lower(foreign, execution="quantized")
    assert [n.output[0] for n in lowered.graph.node if n.domain == FORMAT_DOMAIN] == ["W"]


def test_decode_stays_the_default_of_lower():
    payload = random_payload("Q4_0", (N, K), SEED, sane=True)
    lowered = S.lower(weight_model("Q4_0", payload))
    assert [n.output[0] for n in lowered.graph.node if n.domain == FORMAT_DOMAIN] == ["W"]
    with pytest.raises(ValueError, match="execution must be one of"):
        S.lower(weight_model("Q4_0", payload), execution="fast")


def test_inference_session_runs_quantized_by_default(tmp_path):
    payload = random_payload("Q6_K", (N, K), SEED, sane=True)
    (tmp_path / "w.bin").write_bytes(payload)
    overlay = S.from_onnx(weight_model("Q6_K", payload))
    value = overlay.graph.struct_initializer[0]
    value.ClearField("raw_data")
    value.external_data.add(key="location", value="w.bin")  # read and repacked from the file
    path = tmp_path / "m.onnx"
    path.write_bytes(overlay.SerializeToString())
    session = S.InferenceSession(str(path), accuracy_level=0)
    assert_quantized(session.lowered, fused=True)
    inputs = feeds(np.random.default_rng(SEED))
    y, z, e = session.run(None, inputs)
    w = oracle("Q6_K", payload, (N, K))
    assert_close_product(y, inputs["x"], w)
    np.testing.assert_array_equal(e, w[inputs["idx"]])
    # onnxruntime's default accuracy level quantizes activations to int8 per block of 32: the
    # products are approximate (a loose bound, 2 % of |x| @ |W|^T), the gathered rows exact.
    y4, _, e4 = S.InferenceSession(str(path)).run(None, inputs)
    bound = np.abs(inputs["x"].astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    assert np.all(np.abs(y4 - x_at(inputs["x"], w)) <= 0.02 * bound)
    np.testing.assert_array_equal(e4, e)
    reference = S.InferenceSession(str(path), execution="decode")
    assert any(n.domain == FORMAT_DOMAIN for n in reference.lowered.graph.node)
    np.testing.assert_array_equal(reference.run(None, inputs)[2], e)


def test_cli_flag(tmp_path, capsys):
    payload = random_payload("Q8_0", (N, K), SEED, sane=True)
    source, out = tmp_path / "m.onnx", tmp_path / "plain.onnx"
    onnx.save(weight_model("Q8_0", payload), source)
    assert main(["lower", str(source), str(out), "--execution", "quantized"]) == 0
    assert "0 decoder functions" in capsys.readouterr().out
    assert_quantized(onnx.load(out))


def test_older_opset_is_raised_when_the_graph_means_the_same(tmp_path):
    """Opset 17 (Gemm, Gather, MatMul unchanged up to 21; the Transpose is folded away)."""
    payload = random_payload("Q4_0", (N, K), SEED, sane=True)
    model = weight_model("Q4_0", payload, opset=17)
    rewrite = rewrite_for_execution(checked_model(model))
    report = rewrite.report
    assert report.dropped == ["W"]
    assert {o.domain: o.version for o in rewrite.checked.loaded.proto.opset_import}[""] == 21


@pytest.mark.parametrize("name", ["Q4_0", "Q4_K", "Q8_0"])
def test_odd_output_count_packs_across_rows(name, tmp_path):
    """N odd: ONNX packs the flattened [K, N] codes, so nibble pairs straddle rows."""
    n = 7
    payload = random_payload(name, (n, K), SEED, sane=True)
    model = weight_model(name, b"")
    del model.graph.node[2:]
    del model.graph.output[1:]
    del model.graph.input[1:]
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = n
    overlay = S.from_onnx(model)
    del overlay.graph.struct_initializer[:]
    del overlay.struct_types[-1]
    S.add_struct_values(overlay, formats.get(name).make_value(overlay, "W", (n, K), payload))
    lowered = S.lower(overlay, execution="quantized")
    assert not lowered.functions
    x = np.random.default_rng(SEED).standard_normal((ROWS, K)).astype(np.float32)
    (y,), ops = run_ort(lowered, {"x": x}, tmp_path)
    assert "MatMulNBits" in ops
    assert_close_product(y, x, oracle(name, payload, (n, K)))
    (y,) = ReferenceEvaluator(lowered).run(None, {"x": x})
    assert_close_product(y, x, oracle(name, payload, (n, K)))


def saved_weight_model(name: str, payload: bytes, tmp_path, n: int = N):
    """weight_model with ``n`` outputs, its payload in an external file next to the model."""
    (tmp_path / "w.bin").write_bytes(payload)
    model = weight_model(name, b"")
    overlay = S.from_onnx(model)
    del overlay.graph.struct_initializer[:]
    del overlay.struct_types[-1]
    S.add_struct_values(overlay, formats.get(name).make_value(overlay, "W", (n, K), b""))
    value = overlay.graph.struct_initializer[0]
    value.ClearField("raw_data")
    value.external_data.add(key="location", value="w.bin")
    for info in list(overlay.graph.output[:2]) + [overlay.graph.input[1]]:
        dims = info.type.tensor_type.shape.dim
        dims[len(dims) - 1].dim_value = n
    path = tmp_path / "m.onnx"
    path.write_bytes(overlay.SerializeToString())
    return str(path)


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("level", [0, None])
def test_session_emits_matmulnbits_with_the_fused_bytes(name, level, tmp_path, monkeypatch):
    """The session (with or without sess_options) emits MatMulNBits over arrays handed to
    onnxruntime outside the model bytes; outputs are bit for bit those of stock onnxruntime over
    the standard lowering, which it fuses, at accuracy level 0 and at onnxruntime's default.
    Sibling products are left apart here (fused, the kernel's other tiling moves the last bits:
    tests/test_fuse_siblings.py)."""
    monkeypatch.setattr(execution, "fuse_sibling_products", lambda nodes, *_: nodes)
    from onnx_struct.lowering.execution.emit import IN_MEMORY_LOCATION  # noqa: PLC0415

    n = 7 if name in ("Q4_0", "Q4_K", "Q8_0") else N  # odd N: 4-bit codes packed across rows
    path = saved_weight_model(name, random_payload(name, (n, K), SEED, sane=True), tmp_path, n)
    in_memory = S.InferenceSession(path, accuracy_level=level)
    callers = ort.SessionOptions()
    if level is not None:  # the caller's own way of asking onnxruntime's fusion for a level
        callers.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", str(level))
    with_options = S.InferenceSession(path, callers)
    lowered = S.lower(path, execution="quantized", keep_external=False)
    assert "DequantizeLinear" in [node.op_type for node in lowered.graph.node]
    options = ort.SessionOptions()
    if level is not None:
        options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", str(level))
    standard = ort.InferenceSession(lowered.SerializeToString(), options, providers=["CPUExecutionProvider"])
    for session in (in_memory, with_options):
        ops = [node.op_type for node in session.lowered.graph.node]
        assert ops.count("MatMulNBits") == 2 and "DequantizeLinear" not in ops
    big = [t for t in in_memory.lowered.graph.initializer if np.prod(t.dims) >= 64]
    assert big and all(t.external_data[0].value == IN_MEMORY_LOCATION and not t.raw_data for t in big)
    inputs = feeds(np.random.default_rng(SEED))
    inputs["c"] = inputs["c"][:n]
    inputs["idx"] = np.minimum(inputs["idx"], n - 1)
    expected = standard.run(None, inputs)
    for session in (in_memory, with_options):
        for actual, wanted in zip(session.run(None, inputs), expected, strict=True):
            np.testing.assert_array_equal(actual, wanted)
        with pytest.raises(NotImplementedError, match="providers"):
            session.set_providers(["CPUExecutionProvider"])


@pytest.mark.parametrize("name", FORMATS)
def test_repacking_by_row_ranges_changes_no_byte(name, monkeypatch):
    """The weights are repacked a range of rows at a time: two-row ranges give the same lowered
    model, byte for byte, as one range."""
    from onnx_struct.lowering.execution import repack  # noqa: PLC0415

    for n in (N, 7):
        model = weight_model(name, b"")
        overlay = S.from_onnx(model)
        del overlay.graph.struct_initializer[:]
        del overlay.struct_types[-1]
        payload = random_payload(name, (n, K), SEED, sane=True)
        S.add_struct_values(overlay, formats.get(name).make_value(overlay, "W", (n, K), payload))
        whole = S.lower(overlay, execution="quantized").SerializeToString()
        monkeypatch.setattr(repack, "ROW_RANGE_BYTES", 1)
        assert S.lower(overlay, execution="quantized").SerializeToString() == whole
        monkeypatch.undo()


def test_operators_of_another_domain_named_like_gather_or_transpose_are_not_rewritten(tmp_path):
    """Found by a red-team pass: a model-local custom::Gather (here -Gather) and custom::Transpose
    (here Identity) consuming the weight were rewritten as the standard operators."""
    D = 64  # noqa: N806 - a square weight, a multiple of the block
    payload = random_payload("Q4_0", (D, D), SEED, sane=True)
    negated = oh.make_function(
        "custom",
        "Gather",
        ["table", "i"],
        ["out"],
        [oh.make_node("Gather", ["table", "i"], ["g"], axis=0), oh.make_node("Neg", ["g"], ["out"])],
        [oh.make_opsetid("", 21)],
    )
    identity = oh.make_function(
        "custom", "Transpose", ["t"], ["out"], [oh.make_node("Identity", ["t"], ["out"])], [oh.make_opsetid("", 21)]
    )
    graph = oh.make_graph(
        [
            oh.make_node("Gather", ["W", "idx"], ["e"], domain="custom"),
            oh.make_node("Transpose", ["W"], ["Wt"], domain="custom"),
            oh.make_node("MatMul", ["x", "Wt"], ["y"]),
        ],
        "g",
        [
            oh.make_tensor_value_info("idx", TensorProto.INT64, [2]),
            oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, D]),
        ],
        [
            oh.make_tensor_value_info("e", TensorProto.FLOAT, [2, D]),
            oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, D]),
        ],
    )
    opsets = [oh.make_opsetid("", 21), oh.make_opsetid("custom", 1)]
    model = oh.make_model(graph, opset_imports=opsets, ir_version=10, functions=[negated, identity])
    S.add_struct_values(model, formats.get("Q4_0").make_value(model, "W", (D, D), payload))
    w = oracle("Q4_0", payload, (D, D))
    inputs = {
        "idx": np.array([1, 3], np.int64),
        "x": np.random.default_rng(SEED).standard_normal((1, D)).astype(np.float32),
    }
    e, y = S.InferenceSession(model).run(None, inputs)  # quantized execution, the default
    np.testing.assert_array_equal(e, -w[inputs["idx"]])
    np.testing.assert_allclose(y, inputs["x"].astype(np.float64) @ w.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_an_older_opset_with_a_changed_operator_in_a_subgraph_keeps_the_decoder(tmp_path):
    """Found by a red-team pass: the opset was raised to 21 for MatMulNBits after a look at the
    main graph's nodes only; a SequenceMap body's ReduceMean(axes=[1]) (an attribute until 18) then
    made the model invalid. The model is kept decoded (the report says why) and runs."""
    payload = random_payload("Q4_0", (N, K), SEED, sane=True)
    body = oh.make_graph(
        [oh.make_node("ReduceMean", ["a"], ["b"], axes=[1], keepdims=1)],
        "body",
        [oh.make_tensor_value_info("a", TensorProto.FLOAT, [ROWS, K])],
        [oh.make_tensor_value_info("b", TensorProto.FLOAT, [ROWS, 1])],
    )
    graph = oh.make_graph(
        [
            oh.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
            oh.make_node("MatMul", ["x", "Wt"], ["y"]),
            oh.make_node("SequenceConstruct", ["x"], ["seq"]),
            oh.make_node("SequenceMap", ["seq"], ["means"], body=body),
            oh.make_node("ConcatFromSequence", ["means"], ["r"], axis=0),
        ],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, K])],
        [
            oh.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, N]),
            oh.make_tensor_value_info("r", TensorProto.FLOAT, [ROWS, 1]),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    S.add_struct_values(model, formats.get("Q4_0").make_value(model, "W", (N, K), payload))
    report = rewrite_for_execution(checked_model(model), accuracy_level=0).report
    assert report.kept == {"W": "the graph imports opset 17 and its operators ReduceMean differ at 21"}
    lowered = S.lower(model, execution="quantized")
    onnx.checker.check_model(lowered, full_check=True)
    x = np.random.default_rng(SEED).standard_normal((ROWS, K)).astype(np.float32)
    (y, r), _ = run_ort(lowered, {"x": x}, tmp_path)
    assert_close_product(y, x, oracle("Q4_0", payload, (N, K)))
    np.testing.assert_allclose(r[:, 0], x.mean(axis=1), rtol=1e-5, atol=1e-6)


def test_a_weight_kept_decoded_for_one_consumer_keeps_its_leaf_names(tmp_path):
    """Found by a red-team pass: for formats with a leaf named ``scale`` (INT4_B32_F16, OCP_MX*...),
    the rewritten consumer's initializers took ``W::scale``, the name the decoded route then needed
    for the same weight read by a Relu ("lowered leaf name 'W::scale' is already used")."""
    name, k = "INT4_B32_F16", 64
    payload = random_payload(name, (N, k), SEED, sane=True)
    graph = oh.make_graph(
        [
            oh.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
            oh.make_node("MatMul", ["x", "Wt"], ["y"]),
            oh.make_node("Relu", ["W"], ["r"]),
        ],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, k])],
        [
            oh.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, N]),
            oh.make_tensor_value_info("r", TensorProto.FLOAT, [N, k]),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    S.add_struct_values(model, formats.get(name).make_value(model, "W", (N, k), payload))
    lowered = S.lower(model, execution="quantized")
    onnx.checker.check_model(lowered, full_check=True)
    x = np.random.default_rng(SEED).standard_normal((ROWS, k)).astype(np.float32)
    (y, r), _ = run_ort(lowered, {"x": x}, tmp_path)
    w = oracle(name, payload, (N, k))
    assert_close_product(y, x, w)
    np.testing.assert_array_equal(r, np.maximum(w, 0))


def test_a_shared_blocksum_comes_before_its_first_reader(tmp_path):
    """Found by a red-team pass: two Q4_K weights (a minimum each) multiply one x, their values
    listed in the other order than their consumers; the shared blocksum(x) went before the later
    consumer, and the lowered graph was not topologically sorted (onnx.checker refused it)."""
    k = 256
    graph = oh.make_graph(
        [
            oh.make_node("Transpose", ["W2"], ["W2t"], perm=[1, 0]),
            oh.make_node("MatMul", ["x", "W2t"], ["y2"]),
            oh.make_node("Transpose", ["W1"], ["W1t"], perm=[1, 0]),
            oh.make_node("MatMul", ["x", "W1t"], ["y1"]),
        ],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, k])],
        [oh.make_tensor_value_info(n, TensorProto.FLOAT, [ROWS, N]) for n in ("y1", "y2")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    payloads = {w: random_payload("Q4_K", (N, k), seed, sane=True) for w, seed in (("W1", 1), ("W2", 2))}
    for w, payload in payloads.items():  # W1 first: its consumer is the later node
        S.add_struct_values(model, formats.get("Q4_K").make_value(model, w, (N, k), payload))
    for accuracy_level in (None, 0):  # DequantizeLinear, then MatMulNBits
        lowered = lower_model(model, execution="quantized", accuracy_level=accuracy_level).model
        onnx.checker.check_model(lowered)
        x = np.random.default_rng(SEED).standard_normal((ROWS, k)).astype(np.float32)
        (y1, y2), _ = run_ort(lowered, {"x": x}, tmp_path)
        assert_close_product(y1, x, oracle("Q4_K", payloads["W1"], (N, k)))
        assert_close_product(y2, x, oracle("Q4_K", payloads["W2"], (N, k)))


def test_gemm_with_beta_0_ignores_its_bias_as_the_decoded_route_does(tmp_path):
    """Found by a red-team pass: onnxruntime's Gemm skips C when beta is 0; the rewrite added
    C * 0, which is NaN for an infinite C."""
    payload = random_payload("Q8_0", (N, K), SEED, sane=True)
    graph = oh.make_graph(
        [oh.make_node("Gemm", ["x", "W", "c"], ["z"], transB=1, beta=0.0)],
        "g",
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, K]),
            oh.make_tensor_value_info("c", TensorProto.FLOAT, [N]),
        ],
        [oh.make_tensor_value_info("z", TensorProto.FLOAT, [ROWS, N])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    S.add_struct_values(model, formats.get("Q8_0").make_value(model, "W", (N, K), payload))
    x = np.random.default_rng(SEED).standard_normal((ROWS, K)).astype(np.float32)
    inputs = {"x": x, "c": np.full(N, np.inf, np.float32)}
    (z,), _ = run_ort(S.lower(model, execution="quantized"), inputs, tmp_path)
    assert np.isfinite(z).all()
    assert_close_product(z, x, oracle("Q8_0", payload, (N, K)))


def _report_variants():
    """Models whose execution reports differ: every consumer rewritten, one kept decoded, an
    untransposed MatMul, a Transpose without perm, an older opset whose subgraph changes meaning."""
    payload = random_payload("Q4_0", (N, K), SEED, sane=True)
    plain = weight_model("Q4_0", payload)
    extra = [oh.make_node("ReduceSum", ["W"], ["total"], keepdims=0, name="sum")]
    also_read = weight_model("Q4_0", payload, extra, [oh.make_tensor_value_info("total", TensorProto.FLOAT, [])])
    untransposed = weight_model("Q4_0", payload)
    untransposed.graph.node[1].input[1] = "W"
    del untransposed.graph.node[0]
    no_perm = weight_model("Q4_0", payload)
    del no_perm.graph.node[0].attribute[:]
    old_opset = weight_model("Q4_0", payload, opset=17)
    old_opset.graph.node.append(oh.make_node("ReduceMean", ["x"], ["m"], axes=[1], name="mean"))
    old_opset.graph.output.append(oh.make_tensor_value_info("m", TensorProto.FLOAT, [ROWS, 1]))
    return {
        "plain": plain,
        "also_read": also_read,
        "untransposed": untransposed,
        "no_perm": no_perm,
        "opset17": old_opset,
    }


@pytest.mark.parametrize("variant", ["plain", "also_read", "untransposed", "no_perm", "opset17"])
def test_report_only_gives_the_report_of_the_whole_rewrite_without_reading_a_payload(variant, monkeypatch):
    """quantize's report asks only which consumers run quantized: ``report_only`` answers as the
    whole rewrite (which repacks every payload) does, and reads no payload at all."""
    model = _report_variants()[variant]
    whole = rewrite_for_execution(checked_model(model), accuracy_level=0, in_memory=True)
    assert whole.report.rewritten or whole.report.kept  # each variant says something
    import onnx_struct.lowering.execution as execution  # noqa: PLC0415

    def no_payload(*args, **kwargs):
        raise AssertionError("report_only read a payload")

    monkeypatch.setattr(execution, "row_forms", no_payload)
    checked = checked_model(model)
    only = rewrite_for_execution(checked, accuracy_level=0, report_only=True)
    assert only.report == whole.report and only.checked is checked and only.arrays == {}
    with pytest.raises(ValueError, match="report_only needs accuracy_level"):
        rewrite_for_execution(checked, report_only=True)
