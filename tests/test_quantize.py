"""quantize(): which weights are replaced, the payload bytes against gguf-py, and the lowered model in ORT.

The oracle for the quantized model's output is the float model with each replaced weight swapped
for gguf-py's dequantize(quantize(weight)), run in onnxruntime: it shares no code with the
package's encoder, decoder or lowering.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import onnx_struct as S
from onnx_struct import formats
from onnx_struct.passes.quantize import plan, quantize

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
RNG = np.random.default_rng(7)


def weight(name: str, shape, rng: np.random.Generator = RNG) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)


def synthetic_model() -> onnx.ModelProto:
    """X[3,64] -MatMul W1[64,128]-> -Gemm(transB=1) W2[96,128] + b2 -> -Gemm W3[96,64] -> -MatMul W4[64,32] -> Y,
    plus W5 (MatMul weight also read by a ReduceSum) and W6 (input axis 48, not a multiple of 32)."""
    nodes = [
        oh.make_node("MatMul", ["X", "W1"], ["H1"]),
        oh.make_node("Gemm", ["H1", "W2", "b2"], ["H2"], transB=1),
        oh.make_node("Gemm", ["H2", "W3"], ["H3"]),
        oh.make_node("MatMul", ["H3", "W4"], ["Y"]),
        oh.make_node("MatMul", ["X", "W5"], ["H5"]),
        oh.make_node("ReduceSum", ["W5"], ["S5"], keepdims=0),
        oh.make_node("ReduceSum", ["H5"], ["S"], keepdims=0),
        oh.make_node("Add", ["S", "S5"], ["Z"]),
        oh.make_node("Slice", ["X", "starts", "ends", "axes"], ["X48"]),
        oh.make_node("MatMul", ["X48", "W6"], ["V"]),
    ]
    initializers = [
        weight("W1", (64, 128)),
        weight("W2", (96, 128)),
        numpy_helper.from_array(np.linspace(-1, 1, 96, dtype=np.float32), "b2"),
        weight("W3", (96, 64)),
        weight("W4", (64, 32)),  # 2048 elements: below min_elements
        weight("W5", (64, 64)),
        weight("W6", (48, 128)),
        numpy_helper.from_array(np.array([0], np.int64), "starts"),
        numpy_helper.from_array(np.array([48], np.int64), "ends"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ]
    graph = oh.make_graph(
        nodes,
        "synthetic",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [3, 64])],
        [
            oh.make_tensor_value_info(n, TensorProto.FLOAT, shape)
            for n, shape in (("Y", [3, 32]), ("Z", []), ("V", [3, 128]))
        ],
        initializers,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


X = RNG.standard_normal((3, 64)).astype(np.float32)


def run(model: onnx.ModelProto) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": X})


def gguf_roundtrip(array: np.ndarray, qtype) -> np.ndarray:
    """gguf-py's quantize then dequantize, blocks along the last axis; a last axis that is not a
    multiple of the block is padded with zeros first and sliced back after (onnxruntime's
    quantizer pads the last block the same way)."""
    block = gguf.constants.GGML_QUANT_SIZES[qtype][0]
    width = array.shape[-1]
    padded = np.pad(array, [(0, 0)] * (array.ndim - 1) + [(0, -width % block)])
    return gguf.quants.dequantize(gguf.quants.quantize(padded, qtype), qtype).reshape(padded.shape)[..., :width]


def oracle(model: onnx.ModelProto, qtype, group_axis: str) -> list[np.ndarray]:
    """The float model with W1, W2, W3 and W6 replaced by gguf-py's round trip, grouped along the
    input axis K (W^T for MatMul / Gemm(transB=0); W6's K of 48 padded to 64) or the output axis."""
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    k_last = {"W1": False, "W2": True, "W3": False, "W6": False}  # is K already the last axis?
    for tensor in reference.graph.initializer:
        if tensor.name in k_last:
            w = numpy_helper.to_array(tensor)
            transpose = k_last[tensor.name] != (group_axis == "input")
            q = gguf_roundtrip(np.ascontiguousarray(w.T), qtype).T if transpose else gguf_roundtrip(w, qtype)
            tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(q, dtype=np.float32), tensor.name))
    return run(reference)


@pytest.fixture(scope="module")
def model():
    return synthetic_model()


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_weights_are_replaced_and_lowered_model_matches_gguf_oracle(model, fmt):
    quantized = quantize(model, fmt)
    S.check_model(quantized)
    values = {v.name: v for v in S.get_struct_values(quantized)}
    # W1 needs a Transpose node; W3's Gemm gets transB=1; W6's K (48) is padded to 64, then sliced
    assert set(values) == {"W1_T", "W2", "W3", "W6_T_padded"}
    remaining = {t.name for t in quantized.graph.initializer}
    assert remaining == {"b2", "W4", "W5", "starts", "ends", "axes", "W6/starts", "W6/ends", "W6/axes"}
    assert [(n.op_type, list(n.input), list(n.output)) for n in quantized.graph.node[:3]] == [
        ("Transpose", ["W1_T"], ["W1"]),
        ("Slice", ["W6_T_padded", "W6/starts", "W6/ends", "W6/axes"], ["W6/Slice_out"]),
        ("Transpose", ["W6/Slice_out"], ["W6"]),
    ]
    constants = {t.name: numpy_helper.to_array(t).tolist() for t in quantized.graph.initializer if "/" in t.name}
    assert constants == {"W6/starts": [0], "W6/ends": [48], "W6/axes": [-1]}
    gemm3 = next(n for n in quantized.graph.node if n.input[:2] == ["H2", "W3"])
    assert oh.get_attribute_value(next(a for a in gemm3.attribute if a.name == "transB")) == 1

    expected = oracle(model, Q[fmt], "input")
    actual = run(S.lower(quantized))
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # And the format's error against the float model is what the format promises.
    floats = run(model)
    bound = {"Q8_0": 0.01, "Q4_0": 0.15}[fmt]
    relative = np.linalg.norm(actual[0] - floats[0]) / np.linalg.norm(floats[0])
    assert 0 < relative < bound


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_payload_bytes_equal_gguf_quantize(model, fmt):
    quantized = quantize(model, fmt)
    values = {v.name: v for v in S.get_struct_values(quantized)}
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    # Blocks along K: W^T for MatMul and Gemm(transB=0), W itself for Gemm(transB=1): GGUF's layout.
    assert values["W1_T"].raw_data == gguf.quants.quantize(np.ascontiguousarray(w["W1"].T), Q[fmt]).tobytes()
    assert values["W2"].raw_data == gguf.quants.quantize(w["W2"], Q[fmt]).tobytes()
    assert values["W3"].raw_data == gguf.quants.quantize(np.ascontiguousarray(w["W3"].T), Q[fmt]).tobytes()
    # W6^T [128, 48], padded with zeros to [128, 64]: the bytes of the padded tensor
    padded = np.pad(w["W6"].T, [(0, 0), (0, 16)])
    assert values["W6_T_padded"].raw_data == gguf.quants.quantize(padded, Q[fmt]).tobytes()
    decoded = S.decode("W6_T_padded", quantized)
    assert decoded.shape == (128, 64)
    np.testing.assert_array_equal(decoded, gguf.quants.dequantize(gguf.quants.quantize(padded, Q[fmt]), Q[fmt]))


def test_group_along_output_axis_stores_weights_as_they_are(model):
    quantized = quantize(model, "Q4_0", group_axis="output")
    S.check_model(quantized)
    values = {v.name: v for v in S.get_struct_values(quantized)}
    assert set(values) == {"W1", "W2", "W3", "W6"}  # W6's output axis (128) is a multiple of 32: no padding
    assert not any(n.op_type == "Transpose" for n in quantized.graph.node)
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert values["W1"].raw_data == gguf.quants.quantize(w["W1"], Q.Q4_0).tobytes()
    assert values["W2"].raw_data == gguf.quants.quantize(np.ascontiguousarray(w["W2"].T), Q.Q4_0).tobytes()
    for got, want in zip(run(S.lower(quantized)), oracle(model, Q.Q4_0, "output"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_ineligible_weights_are_untouched_and_explained(model):
    planned = plan(model, "Q4_0")
    assert [w.name for w in planned.weights] == ["W1", "W2", "W3", "W6"]
    assert planned.skipped == {
        "W4": "it has 2048 elements, fewer than min_elements=4096",
        "W5": "node 'ReduceSum' uses it as input 0, not as an eligible weight",
    }
    assert planned.other == {"b2": "not a weight: read by Gemm (input 2)"}
    # 64*128 + 96*128 + 96*64 + 48*128 quantized, of those plus W4 (2048), W5 (4096) and b2 (96)
    assert planned.coverage() == (32768, 32768 + 2048 + 4096 + 96)
    assert planned.not_quantized_by_op() == {"MatMul": 2048 + 4096, "Gemm": 96}
    unpadded = plan(model, "Q4_0", pad=False)
    assert [w.name for w in unpadded.weights] == ["W1", "W2", "W3"]
    assert unpadded.skipped["W6"] == (
        "its input axis (48) is not a multiple of the block size 32 (pad=True stores it padded with zeros)"
    )
    quantized = quantize(model, "Q4_0", pad=False)
    before = {t.name: t.SerializeToString() for t in model.graph.initializer}
    for tensor in quantized.graph.initializer:
        assert tensor.SerializeToString() == before[tensor.name]
    # min_elements and op_types narrow the selection.
    assert [w.name for w in plan(model, "Q4_0", min_elements=1).weights] == ["W1", "W2", "W3", "W4", "W6"]
    assert [w.name for w in plan(model, "Q4_0", op_types=("Gemm",)).weights] == ["W2", "W3"]


def test_input_model_is_not_modified(model):
    before = model.SerializeToString()
    quantize(model, "Q8_0")
    assert model.SerializeToString() == before


def test_nothing_eligible_returns_an_equal_copy(model):
    quantized = quantize(model, "Q8_0", min_elements=10**9)
    assert quantized is not model and quantized.SerializeToString() == model.SerializeToString()


def test_bad_arguments(model):
    with pytest.raises(KeyError, match="unknown format 'NOT_A_FORMAT'; quantize can write: BF16, F16"):
        quantize(model, "NOT_A_FORMAT")
    with pytest.raises(ValueError, match="not supported"):
        quantize(model, "Q8_0", op_types=("ConvTranspose",))
    with pytest.raises(ValueError, match="group_axis"):
        quantize(model, "Q8_0", group_axis="rows")


def test_format_without_encoder_is_refused(model):
    import dataclasses

    no_encoder = dataclasses.replace(formats.get("Q8_0"), encoder=None)
    with pytest.raises(ValueError, match="has no encoder"):
        quantize(model, no_encoder)
    # by name: the message lists only the formats quantize can write (the IQ types cannot)
    with pytest.raises(ValueError, match="format IQ4_XS has no encoder: it can be read and decoded") as info:
        quantize(model, "iq4_xs")
    listed = str(info.value).split("quantize can write: ")[1].split(", ")
    assert listed == [n for n in formats.names() if formats.get(n).encoder is not None]
    assert {"Q4_0", "Q4_K", "Q6_K"} <= set(listed) and not any(n.startswith("IQ") for n in listed)


def test_format_names_are_case_insensitive(model):
    assert quantize(model, "q8_0").SerializeToString() == quantize(model, "Q8_0").SerializeToString()


def cli(*args) -> subprocess.CompletedProcess:
    """``onnx-struct ARGS`` in a fresh interpreter (the package this suite imports)."""
    return subprocess.run([sys.executable, "-m", "onnx_struct", *map(str, args)], capture_output=True, text=True)


@pytest.mark.slow
def test_cli_quantize(model, tmp_path):
    source = tmp_path / "float.onnx"
    onnx.save(model, source)
    out = tmp_path / "q.onnx"
    result = cli("quantize", source, out, "--format", "q8_0")  # names are case-insensitive
    assert result.returncode == 0, result.stderr
    # the error figures are checked against numpy in tests/test_quantize_report.py
    lines = [re.sub(r"error \d+\.\d\d%", "error E%", line) for line in result.stderr.splitlines()]
    blocks = 34  # bytes of a Q8_0 block of 32 (gguf's GGML_QUANT_SIZES)
    assert gguf.constants.GGML_QUANT_SIZES[Q.Q8_0] == (32, blocks)
    on_codes = "on the quantized codes); error E% on calibration input"
    assert lines == [
        f"quantized W1 [64, 128]: Q8_0, stored as [128, 64], {4 * 64 * 128} -> {128 * 2 * blocks} bytes; "
        f"runs quantized (MatMul {on_codes}",
        f"quantized W2 [96, 128]: Q8_0, stored as [96, 128], {4 * 96 * 128} -> {96 * 4 * blocks} bytes; "
        f"runs quantized (Gemm {on_codes}",
        "not considered b2: not a weight: read by Gemm (input 2)",
        f"quantized W3 [96, 64]: Q8_0, stored as [64, 96], {4 * 96 * 64} -> {64 * 3 * blocks} bytes; "
        f"runs quantized (Gemm {on_codes}",
        "kept W4: it has 2048 elements, fewer than min_elements=4096",
        "kept W5: node 'ReduceSum' uses it as input 0, not as an eligible weight",
        "quantized W6 [48, 128]: Q8_0, stored as [128, 64] (its grouped axis padded from 48 to 64 with zeros), "
        f"{4 * 48 * 128} -> {128 * 2 * blocks} bytes; runs decoded (its grouped axis is padded (48 to 64): quantized "
        "execution needs whole blocks, so it is decoded to float32 at run time); error E% on calibration input",
        "coverage: 32768 of 39008 float tensor elements quantized (84%)",
        "not quantized: MatMul (16% of the float elements)",
        "not quantized: Gemm (0.25% of the float elements)",
        "calibration: random inputs (seed 0; unfixed dimensions 1)",
        "model output 'Y': relative error E%",
        "model output 'Z': relative error E%",
        "model output 'V': relative error E%",
        f"{out}: 4 weights in Q8_0, 2 kept, {out.stat().st_size} bytes",
    ]
    S.check_model(out)
    assert {v.name for v in S.get_struct_values(out)} == {"W1_T", "W2", "W3", "W6_T_padded"}
    for got, want in zip(run(S.lower(onnx.load(out))), oracle(model, Q.Q8_0, "input"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # --no-pad keeps W6 as float and says why
    result = cli("quantize", source, out, "--format", "Q8_0", "--no-pad")
    assert (
        result.returncode == 0
        and "kept W6: its input axis (48) is not a multiple of the block size 32" in result.stderr
    )
    assert {v.name for v in S.get_struct_values(out)} == {"W1_T", "W2", "W3"}


@pytest.mark.slow
def test_cli_quantize_refusals(model, tmp_path):
    source = tmp_path / "float.onnx"
    onnx.save(model, source)
    out = tmp_path / "q.onnx"
    result = cli("quantize", source, out, "--format", "NOPE")
    assert result.returncode == 2 and "--format: unknown format 'NOPE'; quantize can write: BF16, F16" in result.stderr
    result = cli("quantize", source, out, "--format", "IQ4_XS")
    assert result.returncode == 2
    assert "--format: format IQ4_XS has no encoder: it can be read and decoded" in result.stderr
    assert "IQ4_XS," not in result.stderr and "Q4_K," in result.stderr  # only formats it can write are offered
    result = cli("quantize", source, out, "--format", "Q8_0", "--op-types", "MatMul,ConvTranspose")
    assert result.returncode == 2 and "--op-types ['ConvTranspose'] are not supported" in result.stderr
    assert not out.exists()
    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"\xff" * 10)
    assert cli("quantize", bogus, out, "--format", "Q8_0").returncode == 1  # invalid content, as in `check`
    assert cli("quantize", tmp_path / "missing.onnx", out, "--format", "Q8_0").returncode == 2
    assert not out.exists()


@pytest.mark.slow
def test_a_format_onnxruntime_cannot_run_is_refused_unless_allowed(model, tmp_path):
    # OCP_MXFP4's decoder casts to FLOAT4E2M1, which onnxruntime 1.32 has no CPU Cast kernel for
    with pytest.raises(
        S.ValidationError, match="onnxruntime cannot run the model quantized to OCP_MXFP4: .*Cast"
    ) as info:
        quantize(model, "OCP_MXFP4")
    assert info.value.code == "not_runnable" and "allow_reference_only=True" in str(info.value)
    assert "formats onnxruntime runs: BF16," in str(info.value) and "OCP_MXFP4," not in str(info.value)
    with pytest.warns(RuntimeWarning, match="using onnx.reference.ReferenceEvaluator"):  # its encoder too
        allowed = quantize(model, "OCP_MXFP4", allow_reference_only=True)
    S.check_model(allowed)
    assert {v.name for v in S.get_struct_values(allowed)} == {"W1_T", "W2", "W3", "W6_T_padded"}
    with pytest.raises(Exception, match="Cast"):  # the refusal was true: onnxruntime does refuse it
        ort.InferenceSession(S.lower(allowed).SerializeToString(), providers=["CPUExecutionProvider"])

    source = tmp_path / "float.onnx"
    onnx.save(model, source)
    out = tmp_path / "q.onnx"
    result = cli("quantize", source, out, "--format", "ocp_mxfp4")
    assert result.returncode == 1 and "onnxruntime cannot run the model quantized to OCP_MXFP4" in result.stderr
    assert "--allow-reference-only" in result.stderr and not out.exists()
    result = cli("quantize", source, out, "--format", "OCP_MXFP4", "--allow-reference-only")
    assert result.returncode == 0, result.stderr
    S.check_model(out)


@pytest.mark.slow
def test_a_model_onnxruntime_cannot_run_is_not_blamed_on_the_format(tmp_path):
    # The model uses an operator onnxruntime lacks: the format (Q4_0 runs) is not the cause.
    model = synthetic_model()
    model.graph.node.append(oh.make_node("Frobnicate", ["Y"], ["F"], domain="example.custom"))
    model.graph.output.append(oh.make_tensor_value_info("F", TensorProto.FLOAT, [3, 32]))
    model.opset_import.append(oh.make_opsetid("example.custom", 1))
    with pytest.raises(S.ValidationError, match="cannot run the model given to quantize either: .*Frobnicate") as info:
        quantize(model, "Q4_0")
    assert info.value.code == "not_runnable" and "quantized to Q4_0" not in str(info.value)
    allowed = quantize(model, "Q4_0", allow_reference_only=True)
    assert {v.name for v in S.get_struct_values(allowed)} == {"W1_T", "W2", "W3", "W6_T_padded"}

    source, out = tmp_path / "custom.onnx", tmp_path / "q.onnx"
    onnx.save(model, source)
    result = cli("quantize", source, out, "--format", "q4_0")
    assert result.returncode == 1 and "the model given to quantize either" in result.stderr and not out.exists()


def test_a_conversion_failure_is_reported_as_such():
    # Found by a red-team pass: the model runs as given at opset 12, onnx's converter to the
    # decoder's 21 renames Softmax's output onto a graph input's name (Softmax_12_13); the
    # message blamed the format, and allow_reference_only wrote a model check_model refused.
    model = synthetic_model()
    model.opset_import[0].version = 12
    model.graph.node.extend(
        [oh.make_node("Softmax", ["X"], ["s"], axis=0), oh.make_node("Add", ["s", "s_intermediate"], ["T"])]
    )
    model.graph.input.append(oh.make_tensor_value_info("s_intermediate", TensorProto.FLOAT, [3, 64]))
    model.graph.output.append(oh.make_tensor_value_info("T", TensorProto.FLOAT, [3, 64]))
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # it runs as given
    with pytest.raises(
        S.ValidationError, match="decoder needs the model at opset 21, it imports 12, .* 's_intermediate'"
    ) as info:
        quantize(model, "Q8_0")
    assert info.value.code == "not_runnable" and "quantized to Q8_0" not in str(info.value)
    S.check_model(quantize(model, "Q8_0", allow_reference_only=True))  # kept at 12: a valid model


def conv_model() -> onnx.ModelProto:
    """X[1,16,10,10] -Conv W[32,16,3,3] + b-> GlobalAveragePool -> Flatten -MatMul M[32,32]-> Y: the Conv
    kernel holds 81% of the float weights, and its input axis I*kh*kw = 144 is not a multiple of 32.
    Its weights come from their own stream: the Q4_0 bound below holds for these, whichever tests ran
    before (the default run leaves the slow ones out; xdist splits the module between workers)."""
    rng = np.random.default_rng(7)
    graph = oh.make_graph(
        [
            oh.make_node("Conv", ["X", "W", "b"], ["C"], pads=[1, 1, 1, 1]),
            oh.make_node("GlobalAveragePool", ["C"], ["P"]),
            oh.make_node("Flatten", ["P"], ["F"]),
            oh.make_node("MatMul", ["F", "M"], ["Y"]),
        ],
        "conv",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, 16, 10, 10])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 32])],
        [weight("W", (32, 16, 3, 3), rng), weight("b", (32,), rng), weight("M", (32, 32), rng)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


CONV_X = RNG.standard_normal((1, 16, 10, 10)).astype(np.float32)


def run_conv(model: onnx.ModelProto) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": CONV_X})[0]


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_conv_kernels_quantize_along_the_flattened_input_axis(fmt):
    model = conv_model()
    assert plan(model, fmt, min_elements=1024).other["W"] == "a Conv weight; Conv is not in op_types"
    quantized = quantize(model, fmt, op_types=("MatMul", "Conv"), min_elements=1024)
    S.check_model(quantized)
    values = {v.name: v for v in S.get_struct_values(quantized)}
    assert set(values) == {"W_padded_2d", "M_T"}
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "W"))
    # [32, 16, 3, 3] -> [32, 144] -> padded with zeros to [32, 160]: exactly the bytes gguf-py writes for it
    padded = np.pad(w.reshape(32, 144), [(0, 0), (0, 16)])
    assert values["W_padded_2d"].raw_data == gguf.quants.quantize(padded, Q[fmt]).tobytes()
    assert [n.op_type for n in quantized.graph.node[:2]] == ["Slice", "Reshape"]
    # the oracle: the float model with W replaced by gguf-py's round trip of the flattened kernel
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    for tensor in reference.graph.initializer:
        a = numpy_helper.to_array(tensor)
        if tensor.name == "W":
            q = gguf_roundtrip(a.reshape(32, 144), Q[fmt]).reshape(a.shape)
        elif tensor.name == "M":
            q = gguf_roundtrip(np.ascontiguousarray(a.T), Q[fmt]).T
        else:
            continue
        tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(q, dtype=np.float32), tensor.name))
    got = run_conv(S.lower(quantized))
    np.testing.assert_allclose(got, run_conv(reference), rtol=1e-5, atol=1e-5)
    floats = run_conv(model)
    relative = np.linalg.norm(got - floats) / np.linalg.norm(floats)
    assert 0 < relative < {"Q8_0": 0.01, "Q4_0": 0.15}[fmt]


@pytest.mark.slow
def test_cli_reports_conv_coverage(tmp_path):
    source = tmp_path / "conv.onnx"
    onnx.save(conv_model(), source)
    out = tmp_path / "q.onnx"
    result = cli("quantize", source, out, "--format", "Q8_0", "--min-elements", "1024")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert "not considered W: a Conv weight; Conv is not in op_types" in lines
    # 4608 Conv + 32 bias of 5664 float elements; why Conv is not quantized by default is said
    assert (
        "not quantized: Conv (82% of the float elements): Conv is not in --op-types (add it: --op-types "
        "MatMul,Gemm,Conv); quantized Conv kernels are decoded to float32 at run time (onnxruntime has no "
        "block-quantized Conv kernel; docs/execution.md)"
    ) in lines
    assert "coverage: 1024 of 5664 float tensor elements quantized (18%)" in lines
    result = cli(
        "quantize", source, out, "--format", "Q8_0", "--min-elements", "1024", "--op-types", "MatMul,Gemm,conv"
    )
    assert result.returncode == 0, result.stderr
    assert (
        "quantized W [32, 16, 3, 3]: Q8_0, stored as [32, 160] (its grouped axis padded from 144 to 160 with zeros), "
        f"{4 * 4608} -> {32 * 5 * 34} bytes; runs decoded (quantized Conv kernels are decoded to float32 at run time"
    ) in result.stderr
    assert "coverage: 5632 of 5664 float tensor elements quantized (99%)" in result.stderr
    S.check_model(out)
    assert run_conv(S.lower(onnx.load(out))).shape == (1, 32)


def test_gather_tables_quantize_along_rows():
    table = (RNG.standard_normal((100, 64)) * 0.3).astype(np.float32)
    graph = oh.make_graph(
        [oh.make_node("Gather", ["table", "ids"], ["E"])],
        "lookup",
        [oh.make_tensor_value_info("ids", TensorProto.INT64, [5])],
        [oh.make_tensor_value_info("E", TensorProto.FLOAT, [5, 64])],
        [numpy_helper.from_array(table, "table")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    assert quantize(model, "Q4_0").SerializeToString() == model.SerializeToString()  # not in the default op_types
    quantized = quantize(model, "Q4_0", op_types=("MatMul", "Gemm", "Gather"))
    (value,) = S.get_struct_values(quantized)
    assert value.name == "table" and value.raw_data == gguf.quants.quantize(table, Q.Q4_0).tobytes()
    ids = np.array([0, 99, 7, 7, 42], np.int64)
    session = ort.InferenceSession(S.lower(quantized).SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"ids": ids})
    np.testing.assert_allclose(got, gguf_roundtrip(table, Q.Q4_0)[ids], rtol=1e-6, atol=1e-6)


def test_an_older_opset_is_upgraded_so_the_decoder_runs():
    old = synthetic_model()
    old.opset_import[0].version = 17  # every operator of the model exists unchanged at 17
    quantized = quantize(old, "Q8_0")
    assert quantized.opset_import[0].version >= 21
    # Only the opset changes: the converter's shape-inference results are not left behind.
    assert not quantized.graph.value_info and list(quantized.graph.output) == list(old.graph.output)
    for got, want in zip(run(S.lower(quantized)), oracle(old, Q.Q8_0, "input"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [23, 25])
@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_a_newer_opset_keeps_its_version_and_the_decoder_is_converted_to_it(opset, fmt):
    """The formats' decoders import opset 21; Cast, Reshape and DequantizeLinear gained types at
    23-25, which onnx's version converter knows to be compatible changes. Before, the quantize probe
    refused every model at opset 23 or later ("operators ... differ between the two versions")."""
    new = synthetic_model()
    new.opset_import[0].version = opset
    quantized = quantize(new, fmt)
    assert quantized.opset_import[0].version == opset
    lowered = S.lower(quantized)
    assert {o.domain: o.version for o in lowered.opset_import}[""] == opset
    assert all(o.version == opset for f in lowered.functions for o in f.opset_import if o.domain in ("", "ai.onnx"))
    for got, want in zip(run(lowered), oracle(new, Q[fmt], "input"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_weight_a_subgraph_reads_is_quantized_and_a_graph_output_is_kept():
    """A weight that is also a graph output keeps its float value; one a subgraph reads too is
    quantized (the subgraph reads the decoded value from the outer scope)."""
    then_branch = oh.make_graph(
        [oh.make_node("MatMul", ["X", "Wsub"], ["T"])],
        "then",
        [],
        [oh.make_tensor_value_info("T", TensorProto.FLOAT, None)],
    )
    else_branch = oh.make_graph(
        [oh.make_node("Identity", ["H"], ["E"])], "else", [], [oh.make_tensor_value_info("E", TensorProto.FLOAT, None)]
    )
    graph = oh.make_graph(
        [
            oh.make_node("MatMul", ["X", "Wsub"], ["H"]),
            oh.make_node("MatMul", ["X", "Wout"], ["H2"]),
            oh.make_node("If", ["cond"], ["Y"], then_branch=then_branch, else_branch=else_branch),
        ],
        "outside",
        [
            oh.make_tensor_value_info("X", TensorProto.FLOAT, [3, 64]),
            oh.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [
            oh.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 64]),
            oh.make_tensor_value_info("H2", TensorProto.FLOAT, [3, 64]),
            oh.make_tensor_value_info("Wout", TensorProto.FLOAT, [64, 64]),
        ],
        [weight("Wsub", (64, 64)), weight("Wout", (64, 64))],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    planned = plan(model, "Q8_0")
    assert [w.name for w in planned.weights] == ["Wsub"]
    assert planned.skipped == {"Wout": "it is an output of the main graph"}


def test_weights_training_info_names_are_kept():
    """A weight named by a training graph or an update binding stayed a MatMul weight: quantize
    replaced it, and the binding named an initializer the model no longer had."""
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", name], [f"Y{name}"]) for name in ("Wbound", "Wread", "Wfree")],
        "trained",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [3, 64])],
        [oh.make_tensor_value_info(f"Y{name}", TensorProto.FLOAT, [3, 64]) for name in ("Wbound", "Wread", "Wfree")],
        [weight(name, (64, 64)) for name in ("Wbound", "Wread", "Wfree")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    training = model.training_info.add()
    step = oh.make_graph([oh.make_node("Mul", ["Wread", "Wread"], ["Wnew"])], "step", [], [])
    training.algorithm.CopyFrom(step)
    training.update_binding.add(key="Wbound", value="Wnew")
    onnx.checker.check_model(model)
    planned = plan(model, "Q8_0")
    assert [w.name for w in planned.weights] == ["Wfree"]
    reason = "training_info uses it (a training graph or binding names it)"
    assert planned.skipped == {"Wbound": reason, "Wread": reason}


def test_conv_kernels_grouped_along_the_output_axis():
    model = conv_model()
    quantized = quantize(model, "Q8_0", op_types=("Conv",), min_elements=1024, group_axis="output")
    (value,) = S.get_struct_values(quantized)
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "W"))
    stored = np.ascontiguousarray(w.reshape(32, 144).T)  # [I*kh*kw, O]: blocks of 32 output channels
    assert value.name == "W_T_2d" and value.raw_data == gguf.quants.quantize(stored, Q.Q8_0).tobytes()
    assert [n.op_type for n in quantized.graph.node[:2]] == ["Transpose", "Reshape"]
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    for tensor in reference.graph.initializer:
        if tensor.name == "W":
            q = gguf_roundtrip(stored, Q.Q8_0).T.reshape(w.shape)
            tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(q), "W"))
    np.testing.assert_allclose(run_conv(S.lower(quantized)), run_conv(reference), rtol=1e-5, atol=1e-5)


def test_gather_tables_with_rows_not_a_multiple_of_the_block_are_padded():
    table = (RNG.standard_normal((100, 48)) * 0.3).astype(np.float32)
    graph = oh.make_graph(
        [oh.make_node("Gather", ["table", "ids"], ["E"])],
        "lookup",
        [oh.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [oh.make_tensor_value_info("E", TensorProto.FLOAT, [3, 48])],
        [numpy_helper.from_array(table, "table")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    quantized = quantize(model, "Q8_0", op_types=("Gather",))
    (value,) = S.get_struct_values(quantized)
    assert value.name == "table_padded"
    assert value.raw_data == gguf.quants.quantize(np.pad(table, [(0, 0), (0, 16)]), Q.Q8_0).tobytes()
    ids = np.array([0, 99, 7], np.int64)
    session = ort.InferenceSession(S.lower(quantized).SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"ids": ids})
    np.testing.assert_allclose(got, gguf_roundtrip(table, Q.Q8_0)[ids], rtol=1e-6, atol=1e-6)


def test_a_padded_gemm_weight_keeps_the_flipped_trans_b():
    w = (RNG.standard_normal((48, 64)) * 0.2).astype(np.float32)  # Gemm(transB=0): K = 48
    graph = oh.make_graph(
        [oh.make_node("Gemm", ["X", "W"], ["Y"])],
        "gemm",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [3, 48])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 64])],
        [numpy_helper.from_array(w, "W")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    quantized = quantize(model, "Q8_0", min_elements=1)
    (value,) = S.get_struct_values(quantized)
    stored = np.pad(np.ascontiguousarray(w.T), [(0, 0), (0, 16)])  # W^T [64, 48] -> [64, 64]
    assert value.name == "W_padded" and value.raw_data == gguf.quants.quantize(stored, Q.Q8_0).tobytes()
    slice_node, gemm = quantized.graph.node
    assert (slice_node.op_type, list(slice_node.output)) == ("Slice", ["W"])
    assert oh.get_attribute_value(next(a for a in gemm.attribute if a.name == "transB")) == 1
    x = RNG.standard_normal((3, 48)).astype(np.float32)
    session = ort.InferenceSession(S.lower(quantized).SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"X": x})
    np.testing.assert_allclose(got, x @ gguf_roundtrip(np.ascontiguousarray(w.T), Q.Q8_0).T, rtol=1e-5, atol=1e-5)


def test_an_unloaded_external_tensor_is_not_looked_for_in_the_working_directory(tmp_path, monkeypatch):
    """A ModelProto whose other initializer is external and not loaded: onnxruntime, given the
    lowered model's bytes, read it from the working directory, so the verdict depended on where
    the caller stood (found by a red-team pass). It has no directory to be read from: refused."""
    model = synthetic_model()
    bias = next(t for t in model.graph.initializer if t.name == "b2")
    data = bias.raw_data or np.asarray(numpy_helper.to_array(bias)).tobytes()
    (tmp_path / "local.bin").write_bytes(data)
    bias.ClearField("raw_data")
    del bias.float_data[:]
    bias.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "local.bin"), ("offset", "0"), ("length", str(len(data)))):
        bias.external_data.add(key=key, value=value)
    monkeypatch.chdir(tmp_path)  # where onnxruntime found local.bin before
    with pytest.raises(
        S.ValidationError,
        match=r"graph.initializer\[\d+\] \('b2'\).external_data: an external tensor needs the model's directory",
    ):
        quantize(model, "Q8_0")


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_encoding_in_row_chunks_gives_the_same_bytes(model, fmt, monkeypatch):
    """quantize encodes ENCODE_CHUNK elements of whole rows at a time (bounded memory): with chunks
    of 1 and 3 rows the payload is still exactly gguf-py's for the whole tensor."""
    import onnx_struct.passes.quantize as q  # noqa: PLC0415

    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for chunk in (1, 3 * 64):
        monkeypatch.setattr(q, "ENCODE_CHUNK", chunk)
        values = {v.name: v for v in S.get_struct_values(quantize(model, fmt))}
        assert values["W1_T"].raw_data == gguf.quants.quantize(np.ascontiguousarray(w["W1"].T), Q[fmt]).tobytes()
        assert values["W2"].raw_data == gguf.quants.quantize(w["W2"], Q[fmt]).tobytes()


def test_a_model_invalid_as_given_is_refused_with_its_own_error_not_the_formats():
    """Found in the last review: two initializers named W made the quantized model fail the check
    ("SSA form"), and onnxruntime runs the input, so quantize blamed Q4_0. The input's own error
    (onnx's checker, as check_model gives it) is raised instead."""
    model = synthetic_model()
    model.graph.initializer.append(model.graph.initializer[0])
    with pytest.raises(S.ValidationError) as expected:
        S.check_model(model)
    with pytest.raises(S.ValidationError) as info:
        quantize(model, "Q4_0")
    assert str(info.value) == str(expected.value) and "not unique" in str(info.value)
    assert "Q4_0" not in str(info.value)
