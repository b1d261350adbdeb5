"""lower() and InferenceSession stand where onnx's and onnxruntime's stood: over models without
struct parts they agree with stock onnxruntime (accept or refuse, outputs bit for bit) and lower()
returns the model untouched. Oracles: stock onnxruntime on the same bytes; onnx's own test models
(the wheel's model directories, and every node test case in the slow tier); a corpus of invalid
plain models built here (docs/semantics.md, "Drop-in behaviour")."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import onnx_struct as S

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
CPU = ["CPUExecutionProvider"]
# Outputs that are random by definition: only acceptance is compared.
RANDOM = ("random", "bernoulli", "dropout", "multinomial")


def outcome(make, model_bytes: bytes, feeds: dict | None):
    """("refused", onnxruntime's class) / ("failed", class) / ("ran", outputs) for one session maker."""
    try:
        session = make(model_bytes)
    except Exception as error:  # noqa: BLE001 - the class is the result
        return "refused", _ort_class(error)
    if feeds is None:
        return "ran", None
    try:
        return "ran", session.run(None, feeds)
    except Exception as error:  # noqa: BLE001
        return "failed", _ort_class(error)


def _ort_class(error: BaseException) -> str:
    """The onnxruntime exception class an error is (ours are also onnxruntime's), else its own."""
    for cls in type(error).__mro__:
        if cls.__module__.startswith("onnxruntime"):
            return cls.__name__
    return type(error).__name__


def stock_session(model_bytes: bytes):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=CPU)


def our_session(model_bytes: bytes):
    return S.InferenceSession(model_bytes, providers=CPU)


def assert_same_as_stock(model_bytes: bytes, feeds: dict | None, *, compare_outputs: bool = True) -> str:
    """Both sessions accept or both refuse (the same onnxruntime class), outputs identical."""
    expected = outcome(stock_session, model_bytes, feeds)
    actual = outcome(our_session, model_bytes, feeds)
    assert actual[0] == expected[0], (expected, actual)
    if expected[0] != "ran":
        assert actual[1] == expected[1], (expected, actual)
    elif compare_outputs and feeds is not None:
        assert_same_values(actual[1], expected[1])
    return expected[0]


def assert_same_values(ours, theirs) -> None:
    """Equal outputs, bit for bit (NaN equal to NaN), through sequences and optionals."""
    if isinstance(theirs, (list, tuple)):
        assert isinstance(ours, (list, tuple)) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert_same_values(a, b)
        return
    if theirs is None:
        assert ours is None
        return
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    if ours.dtype == object:  # strings
        assert ours.tolist() == theirs.tolist()
    else:
        np.testing.assert_array_equal(ours, theirs)  # NaN equals NaN here
        assert ours.tobytes() == theirs.tobytes() or ours.dtype.kind in "fc"  # -0.0 == 0.0 for numpy


def assert_lowered_untouched(model_bytes: bytes) -> None:
    lowered = S.lower(model_bytes)
    assert lowered.SerializeToString() == onnx.ModelProto.FromString(model_bytes).SerializeToString()


def _feeds(model_dir: str, model: onnx.ModelProto) -> dict | None:
    """test_data_set_0's inputs by graph input name (tensor inputs only), or None."""
    files = sorted(glob.glob(os.path.join(model_dir, "test_data_set_0", "input_*.pb")))
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if not files or len(files) != len(inputs) or any(i.type.WhichOneof("value") != "tensor_type" for i in inputs):
        return None
    feeds = {}
    for info, path in zip(inputs, files, strict=True):
        tensor = TensorProto()
        with open(path, "rb") as file:
            tensor.ParseFromString(file.read())
        feeds[info.name] = numpy_helper.to_array(tensor)
    return feeds


WHEEL_MODELS = sorted(glob.glob(os.path.join(DATA, "*", "*", "model.onnx")))
LIGHT_MODELS = sorted(glob.glob(os.path.join(DATA, "light", "*.onnx")))


@pytest.mark.parametrize("path", WHEEL_MODELS, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_the_wheels_test_models_run_as_in_onnxruntime(path):
    with open(path, "rb") as file:
        data = file.read()
    model = onnx.ModelProto.FromString(data)
    assert_lowered_untouched(data)
    name = os.path.basename(os.path.dirname(path))
    assert_same_as_stock(data, _feeds(os.path.dirname(path), model), compare_outputs=not name.startswith(RANDOM))


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=os.path.basename)
def test_the_wheels_light_models_load_as_in_onnxruntime(path):
    with open(path, "rb") as file:
        data = file.read()
    assert_lowered_untouched(data)
    assert_same_as_stock(data, None)


def _node_cases():
    from onnx.backend.test.case import node  # noqa: PLC0415 - imports every case module (seconds)

    return node.collect_testcases(None)


@pytest.mark.slow
def test_every_node_test_case_runs_as_in_onnxruntime():
    """onnx's backend node test models (what ``backend-test-tools generate-data`` writes as
    ``node/*/model.onnx`` with ``test_data_set_*``), built in memory."""
    ran = 0
    for case in _node_cases():
        data = case.model.SerializeToString()
        assert_lowered_untouched(data)
        feeds = None
        if case.data_sets and all(isinstance(a, np.ndarray) for a in case.data_sets[0][0]):
            names = [
                i.name for i in case.model.graph.input if i.name not in {t.name for t in case.model.graph.initializer}
            ]
            if len(names) == len(case.data_sets[0][0]):
                feeds = dict(zip(names, case.data_sets[0][0], strict=True))
        random = any(word in case.name.lower() for word in RANDOM)
        try:
            ran += assert_same_as_stock(data, feeds, compare_outputs=not random) == "ran"
        except AssertionError as error:
            raise AssertionError(f"{case.name}: {error}") from None
    assert ran > 1000  # the comparison ran on most of them


# ---------------------------------------------------------------------- invalid plain models
def _base() -> onnx.ModelProto:
    """Conv + Relu over a weight initializer: a model with an initializer, an attribute and two nodes."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((2, 1, 3, 3)).astype(np.float32), "w")
    graph = oh.make_graph(
        [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), oh.make_node("Relu", ["c"], ["y"])],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        [weight],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8)


def _mutations() -> dict[str, onnx.ModelProto]:
    out = {}

    def mutant(name):
        model = _base()
        out[name] = model
        return model

    mutant("ir_version_0").ir_version = 0
    mutant("ir_version_3").ir_version = 3
    mutant("ir_version_99").ir_version = 99
    m = mutant("duplicate_metadata")
    m.metadata_props.add(key="k", value="1")
    m.metadata_props.add(key="k", value="2")
    mutant("unsorted_nodes").graph.node.reverse()
    m = mutant("unused_initializer_short_data")
    m.graph.initializer.append(TensorProto(name="u", data_type=TensorProto.FLOAT, dims=[4], raw_data=bytes(4)))
    m = mutant("used_initializer_short_data")
    m.graph.initializer[0].raw_data = m.graph.initializer[0].raw_data[:8]
    m = mutant("used_initializer_long_data")
    m.graph.initializer[0].raw_data += bytes(4)
    m = mutant("undefined_input")
    m.graph.node[1].input[0] = "nowhere"
    m = mutant("unknown_operator")
    m.graph.node[1].op_type = "NoSuchOp"
    m = mutant("no_opset_import")
    del m.opset_import[:]
    m = mutant("future_opset")
    m.opset_import[0].version = 999
    m = mutant("duplicate_output_name")
    m.graph.node[0].output[0] = "y"
    m = mutant("bad_attribute_type")
    m.graph.node[0].attribute[0].type = onnx.AttributeProto.FLOAT
    m = mutant("initializer_also_input_ir3")
    m.ir_version = 3
    m.graph.input.append(oh.make_tensor_value_info("w", TensorProto.FLOAT, [2, 1, 3, 3]))
    m = mutant("empty_graph_name")
    m.graph.name = ""
    m = mutant("negative_dims_inline")
    m.graph.initializer.append(TensorProto(name="n", data_type=TensorProto.FLOAT, dims=[-1]))
    return out


FEEDS = {"x": np.random.default_rng(1).standard_normal((1, 1, 4, 4)).astype(np.float32)}


@pytest.mark.parametrize("name", sorted(_mutations()))
def test_invalid_plain_models_are_judged_as_onnxruntime_judges_them(name):
    data = _mutations()[name].SerializeToString()
    assert_same_as_stock(data, FEEDS)


def test_a_refusal_of_a_model_without_decoders_does_not_mention_decoders():
    model = _base()
    model.graph.node[1].op_type = "NoSuchOp"
    with pytest.raises(S.ValidationError) as info:
        S.InferenceSession(model)
    assert "decoder" not in str(info.value) and info.value.code == "runtime_failure"
    assert info.value.path == ""  # no tensor named: the refusal is the model's
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidGraph  # noqa: PLC0415

    assert isinstance(info.value, InvalidGraph)  # a caller's except clause for onnxruntime's class holds


def test_a_refused_external_tensor_is_named_by_its_path(tmp_path):
    """onnxruntime refuses an external length that disagrees with the tensor's dims (Fail, as
    stock); the error's path names the initializer, where it was empty."""
    weight = numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", "W"], ["Y"])],
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(np.zeros(3, np.int64), "unused"), weight],
    )
    path = tmp_path / "m.onnx"
    onnx.save(oh.make_model(graph), path, save_as_external_data=True, location="w.bin", size_threshold=1024)
    model = onnx.load(path, load_external_data=False)
    next(e for e in model.graph.initializer[1].external_data if e.key == "length").value = "100"
    onnx.save(model, path)
    with pytest.raises(Exception) as stock:
        ort.InferenceSession(str(path), providers=CPU)
    with pytest.raises(S.ValidationError) as info:
        S.InferenceSession(str(path), providers=CPU)
    assert isinstance(info.value, type(stock.value)) and info.value.code == "runtime_failure"
    assert info.value.path == "graph.initializer[1] ('W').external_data"
    assert "size mismatch" in str(info.value)


BYTE_FLIP_CHILD = r"""
import onnxruntime as ort
data = bytes.fromhex(ARG["data"])
def judge(make):
    try:
        make(data)
    except Exception as error:
        return "refused"
    return "ran"
stock = judge(lambda d: ort.InferenceSession(d, providers=["CPUExecutionProvider"]))
ours = judge(lambda d: S.InferenceSession(d, providers=["CPUExecutionProvider"]))
assert stock == ours, (stock, ours)
"""


@pytest.mark.slow
def test_byte_flipped_plain_models_are_judged_as_onnxruntime_judges_them():
    """Byte flips and truncations of a plain model, each in a bounded child: the same acceptance
    as stock onnxruntime, and never a crash."""
    from adversarial.bounded import run_bounded  # noqa: PLC0415

    data = _base().SerializeToString()
    rng = np.random.default_rng(2)
    cases = [data[: len(data) - k] for k in (1, 7, 50)]
    for _ in range(40):
        flipped = bytearray(data)
        at = int(rng.integers(0, len(data)))
        flipped[at] ^= int(rng.integers(1, 256))
        cases.append(bytes(flipped))
    for case in cases:
        result = run_bounded(BYTE_FLIP_CHILD, {"data": case.hex()}, cpu_seconds=30, memory_mib=1024)
        assert result.error is None, (case.hex(), result.message)


@pytest.mark.parametrize("name", sorted(_mutations()))
def test_a_struct_model_with_an_invalid_stock_part_is_run_or_refused_cleanly(name):
    """The same corpus with a struct value added (a decoder at opset 21: the lowering converts the
    graph's opset): the session runs it, with onnxruntime's outputs for the stock part, or
    refuses it with a ValidationError, never another exception."""
    from test_lower import cast_decoder  # noqa: PLC0415

    plain = _mutations()[name]
    model = _mutations()[name]
    model.graph.output.append(oh.make_tensor_value_info("v", TensorProto.FLOAT, [4]))
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4, decoder=cast_decoder()))
    S.add_struct_values(model, S.make_struct_value("v", index, raw_data=bytes([1, 2, 3, 4])))
    try:
        y, v = S.InferenceSession(model).run(None, FEEDS)
    except S.ValidationError:
        return
    np.testing.assert_array_equal(v, [1, 2, 3, 4])
    stock = outcome(stock_session, plain.SerializeToString(), FEEDS)
    if stock[0] == "ran":
        assert y.tobytes() == stock[1][0].tobytes()
