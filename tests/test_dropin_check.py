"""Drop-in parity: onnx_struct.check_model / infer_shapes where onnx's stood (issue 27).

The oracle is stock onnx itself. For every model without struct parts, onnx_struct's functions
must give stock's answer: accept where it accepts; on refusal raise an error that is an instance
of every class stock raised (and an onnx_struct.ValidationError); infer the same model, subgraphs
included (compared as deterministic serialized bytes).

Decision (docs/semantics.md, "Plain models"): the corpus is built at test time from what the
onnx wheel ships, never copied into this repository: its model files
(``onnx/backend/test/data/**/*.onnx``, fast tier) and its backend node test cases, built by
``onnx.backend.test.case.node.collect_testcases`` (~1,900 models; building them runs onnx's
reference outputs for ~10 s, so that part is in the slow tier). onnx's own checker and
shape-inference test files are not in the wheel; run against our functions by monkeypatching,
they are a local verification (docs/benchmarks.md records the count), not part of this suite.

A mutation corpus of invalid plain models (ir_version 0, duplicate metadata keys, unsorted nodes,
bad raw_data sizes, undefined inputs, ...) is compared in process; byte flips, which may hit a
crash of onnx's C++ code, run stock and ours in child processes (slow tier).
"""

from __future__ import annotations

import pathlib
import pickle
import subprocess
import sys

import numpy as np
import onnx
import onnx.checker
import onnx.shape_inference
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx import helper as oh
from support.models import base_model

import onnx_struct as S
from onnx_struct import errors
from onnx_struct.check.stock import CRASHING_OPERATORS

WHEEL_MODELS = sorted((pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data").rglob("*.onnx"))
CHECK_FLAGS = [{}, {"full_check": True}]
INFER_FLAGS = [{}, {"strict_mode": True, "check_type": True}, {"data_prop": True}]


def outcome(function, model, **flags):
    """(None, result) or (the exception, None)."""
    try:
        return None, function(model, **flags)
    except Exception as error:  # noqa: BLE001 - the outcome compared is the exception itself
        return error, None


def assert_same_outcome(stock_function, ours_function, model, compare=None, **flags) -> None:
    stock_error, stock_result = outcome(stock_function, model, **flags)
    our_error, our_result = outcome(ours_function, model, **flags)
    if stock_error is None and getattr(our_error, "code", None) == "undefined_input":
        # The one refusal of ours: onnx's inference crashes on such an input for some operators
        # (test_an_undefined_input_is_refused_before_onnx_crashes_on_it); the checker refuses it.
        assert isinstance(our_error, onnx.shape_inference.InferenceError)
        assert outcome(onnx.checker.check_model, model)[0] is not None
        return
    if stock_error is None:
        assert our_error is None, f"stock accepts, we raise {our_error!r}"
        if compare is not None:
            compare(stock_result, our_result)
        return
    assert our_error is not None, f"stock raises {stock_error!r}, we accept"
    assert isinstance(our_error, type(stock_error)), f"stock {type(stock_error)}, ours {type(our_error).__mro__}"
    assert isinstance(our_error, S.ValidationError), repr(our_error)


def same_model(a: onnx.ModelProto, b: onnx.ModelProto) -> None:
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


def assert_parity(model) -> None:
    for flags in CHECK_FLAGS:
        assert_same_outcome(onnx.checker.check_model, S.check_model, model, **flags)
        stock_error = outcome(onnx.checker.check_model, model, **flags)[0]
        diagnostics = S.validate(model, **flags)  # the CLI's: as check_model, every finding listed
        assert (stock_error is None) == (diagnostics == []), diagnostics
    for flags in INFER_FLAGS:
        assert_same_outcome(onnx.shape_inference.infer_shapes, S.infer_shapes, model, compare=same_model, **flags)


# ---------------------------------------------------------------------- the wheel's models
def test_the_wheel_ships_models():
    assert len(WHEEL_MODELS) >= 100  # the corpus is not an empty glob


@pytest.mark.parametrize("path", WHEEL_MODELS, ids=lambda p: p.parent.name if p.name == "model.onnx" else p.stem)
def test_wheel_model_parity(path):
    model = onnx.load(path, load_external_data=False)
    assert_parity(model)
    assert_parity(model.SerializeToString())
    assert_same_outcome(onnx.checker.check_model, S.check_model, str(path))


@pytest.mark.slow
def test_backend_node_models_parity():
    from onnx.backend.test.case import node

    cases = node.collect_testcases("")
    assert len(cases) > 1000
    for case in cases:
        assert_parity(case.model)


# ---------------------------------------------------------------------- mutations
def _graph(nodes, inputs=("X",), outputs=("Y",), initializer=()):
    return oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info(name, TensorProto.FLOAT, [2]) for name in inputs],
        [oh.make_tensor_value_info(name, TensorProto.FLOAT, [2]) for name in outputs],
        initializer=list(initializer),
    )


def _model(graph, **fields):
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], **fields)


def _mutants() -> dict[str, onnx.ModelProto]:
    relu = oh.make_node("Relu", ["X"], ["H"])
    neg = oh.make_node("Neg", ["H"], ["Y"])
    mutants = {"valid": _model(_graph([relu, neg]))}
    m = _model(_graph([relu, neg]))
    m.ir_version = 0
    mutants["ir_version 0"] = m
    m = _model(_graph([relu, neg]))
    oh.set_model_props(m, {"a": "1"})
    m.metadata_props.add(key="a", value="2")
    mutants["duplicate metadata key"] = m
    mutants["unsorted nodes"] = _model(_graph([neg, relu]))
    mutants["undefined input"] = _model(_graph([oh.make_node("Add", ["X", "nowhere"], ["Y"])]))
    mutants["empty input name"] = _model(_graph([oh.make_node("Relu", [""], ["Y"])]))
    short = onnx.numpy_helper.from_array(np.zeros(2, np.float32), "W")
    short.raw_data = bytes(7)
    mutants["raw_data 7 bytes for 2 floats"] = _model(
        _graph([oh.make_node("Add", ["X", "W"], ["Y"])], initializer=[short])
    )
    mutants["unknown operator"] = _model(_graph([oh.make_node("NoSuchOp", ["X"], ["Y"])]))
    mutants["wrong attribute"] = _model(_graph([oh.make_node("Relu", ["X"], ["Y"], alpha=1.0)]))
    mutants["shape conflict"] = _model(
        oh.make_graph(
            [oh.make_node("MatMul", ["X", "X"], ["Y"])],
            "g",
            [oh.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
            [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])],
        )
    )
    mutants["duplicate output name"] = _model(_graph([relu, oh.make_node("Neg", ["X"], ["H"])], outputs=("H",)))
    m = _model(_graph([relu, neg]))
    m.opset_import[0].version = 999
    mutants["opset 999"] = m
    m = _model(_graph([relu, neg]))
    del m.opset_import[:]
    mutants["no opset import"] = m
    return mutants


MUTANTS = _mutants()


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_parity(name):
    assert_parity(MUTANTS[name])


def test_the_mutation_corpus_holds_refusals():
    refused = [name for name, model in MUTANTS.items() if outcome(onnx.checker.check_model, model)[0] is not None]
    assert len(refused) >= 8  # the corpus exercises refusals, not only acceptance


FLIP = """
import sys, onnx, onnx.checker, onnx.shape_inference
sys.path.insert(0, {root!r})
data = open(sys.argv[1], "rb").read()
if sys.argv[2] == "ours":
    import onnx_struct as S
    check, infer = S.check_model, S.infer_shapes
else:
    check, infer = onnx.checker.check_model, onnx.shape_inference.infer_shapes
for function in (check, lambda m: check(m, full_check=True), infer):
    try:
        function(data)
        print("ok")
    except Exception as error:
        print(" ".join(sorted(c.__module__ + "." + c.__qualname__ for c in type(error).__mro__)))
"""


@pytest.mark.slow
def test_byte_flips_parity(tmp_path):
    """Byte flips of a valid model: ours refuses exactly where stock refuses, with every class of
    stock's error, and crashes only where stock crashes (each run in a child process)."""
    data = _model(_graph([oh.make_node("Relu", ["X"], ["H"]), oh.make_node("Neg", ["H"], ["Y"])])).SerializeToString()
    rng = np.random.default_rng(27)
    code = FLIP.format(root=str(pathlib.Path(S.__file__).parent.parent))
    for k in range(24):
        flipped = bytearray(data)
        flipped[rng.integers(len(flipped))] ^= 1 << int(rng.integers(8))
        path = tmp_path / f"flip{k}.onnx"
        path.write_bytes(bytes(flipped))
        runs = {
            who: subprocess.run(
                [sys.executable, "-c", code, str(path), who], capture_output=True, text=True, timeout=60
            )
            for who in ("stock", "ours")
        }
        stock, ours = runs["stock"], runs["ours"]
        assert (stock.returncode == 0) == (ours.returncode == 0) or stock.returncode != 0, ours.stderr
        if stock.returncode != 0:
            continue  # stock itself crashes on it: not ours to compare
        assert ours.returncode == 0, ours.stderr
        for stock_line, our_line in zip(stock.stdout.splitlines(), ours.stdout.splitlines(), strict=True):
            if stock_line == "ok":
                assert our_line == "ok", (k, our_line)
            else:
                assert set(stock_line.split()) <= set(our_line.split()), (k, stock_line, our_line)


# ---------------------------------------------------------------------- exception classes
def test_missing_file_is_stocks_validation_error_and_a_file_not_found_error(tmp_path):
    missing = str(tmp_path / "absent.onnx")
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(missing)
    with pytest.raises(S.ValidationError) as raised:
        S.check_model(missing)
    assert isinstance(raised.value, FileNotFoundError) and raised.value.errno == 2
    assert raised.value.filename == missing and raised.value.code == "file_not_found"


def test_directory_is_stocks_runtime_error(tmp_path):
    with pytest.raises(RuntimeError):
        onnx.checker.check_model(str(tmp_path))
    with pytest.raises(S.ValidationError) as raised:
        S.check_model(str(tmp_path))
    assert isinstance(raised.value, RuntimeError) and isinstance(raised.value, OSError)


@pytest.mark.parametrize("function", [S.check_model, S.infer_shapes])
def test_unparsable_bytes_are_a_value_error(function):
    stock = {S.check_model: onnx.checker.check_model, S.infer_shapes: onnx.shape_inference.infer_shapes}[function]
    with pytest.raises(ValueError):
        stock(b"\xff\xff")
    with pytest.raises(S.ValidationError) as raised:
        function(b"\xff\xff")
    assert isinstance(raised.value, ValueError)


def test_full_check_inference_failure_is_an_inference_error():
    model = MUTANTS["shape conflict"]
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.checker.check_model(model, full_check=True)
    with pytest.raises(S.ValidationError) as raised:
        S.check_model(model, full_check=True)
    assert isinstance(raised.value, onnx.shape_inference.InferenceError)


@pytest.mark.parametrize(
    "cls", [errors.InferenceError, errors.ModelValueError, errors.ModelFileNotFoundError, errors.ModelRuntimeError]
)
def test_dual_classes_pickle_with_their_attributes(cls):
    error = cls("graph", "reason", code="onnx_checker", file="m.onnx")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls and str(again) == "graph: reason"
    assert (again.path, again.code, again.details) == ("graph", "onnx_checker", {"file": "m.onnx"})


def test_arguments_mirror_stocks_signatures():
    import inspect

    def positional(function):
        return [p.name for p in inspect.signature(function).parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD]

    assert positional(S.check_model) == positional(onnx.checker.check_model)
    assert positional(S.infer_shapes) == positional(onnx.shape_inference.infer_shapes)


def test_stock_only_types_fail_as_stock_fails():
    with pytest.raises(AttributeError):
        onnx.checker.check_model(5)
    with pytest.raises(AttributeError):
        S.check_model(5)
    with pytest.raises(TypeError):
        S.infer_shapes(5)


# ---------------------------------------------------------------------- struct models
def _loop_model() -> onnx.ModelProto:
    """A Loop whose body inputs carry no type: onnx's inference types them from the node."""
    body = oh.make_graph(
        [oh.make_node("Identity", ["c"], ["co"]), oh.make_node("Add", ["v", "v"], ["vo"])],
        "body",
        [
            oh.make_value_info("i", onnx.TypeProto()),
            oh.make_value_info("c", onnx.TypeProto()),
            oh.make_value_info("v", onnx.TypeProto()),
        ],
        [oh.make_value_info("co", onnx.TypeProto()), oh.make_value_info("vo", onnx.TypeProto())],
    )
    graph = oh.make_graph(
        [oh.make_node("Loop", ["M", "cond", "X"], ["Y"], body=body)],
        "g",
        [
            oh.make_tensor_value_info("M", TensorProto.INT64, []),
            oh.make_tensor_value_info("cond", TensorProto.BOOL, []),
            oh.make_tensor_value_info("X", TensorProto.FLOAT, [2]),
        ],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    return _model(graph)


def test_struct_model_keeps_stocks_subgraph_types():
    plain = _loop_model()
    expected = onnx.shape_inference.infer_shapes(plain)
    assert expected.graph.node[0].attribute[0].g.input[2].type.tensor_type.elem_type == TensorProto.FLOAT
    with_struct = _loop_model()
    S.add_struct_types(with_struct, S.make_array(TensorProto.UINT8, 4))
    inferred = S.infer_shapes(with_struct)
    assert S.get_struct_types(inferred)  # the struct part is kept
    assert inferred.graph == expected.graph  # every type stock infers, the body's included


def test_a_struct_model_is_not_sent_to_stock():
    # base_model is plain; one invalid declaration makes it a struct model that we refuse where
    # stock onnx, which skips the unknown field, accepts.
    model = base_model()
    S.add_struct_types(model, S.make_array(TensorProto.STRING, 4))
    onnx.checker.check_model(model)
    with pytest.raises(S.ValidationError, match=r"^struct_types\[0\]"):
        S.check_model(model)


@pytest.mark.parametrize("where", ["none", "model", "main graph value", "subgraph type"])
@pytest.mark.parametrize("form", ["bytes", "path"])
def test_a_large_model_is_tested_beside_its_initializers(tmp_path, where, form):
    """Above CUT_MIN_BYTES the test skips the main graph's initializer records (a file: reads
    only their headers); a struct part before or after them, or in a subgraph, is still found."""
    from onnx_struct.check import stock
    from onnx_struct.schema.plain import CUT_MIN_BYTES

    model = _loop_model()
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.ones(CUT_MIN_BYTES // 2, np.float32), "big"))
    if where == "model":
        S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4))
    elif where == "main graph value":
        S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4))
        S.add_struct_values(model, S.make_struct_value("w", 0, raw_data=bytes(4)))
    elif where == "subgraph type":
        info = S.make_struct_value_info("s", 0)
        model.graph.node[0].attribute[0].g.value_info.append(onnx.ValueInfoProto.FromString(info.SerializeToString()))
    data = model.SerializeToString()
    assert len(data) > CUT_MIN_BYTES
    argument = data
    if form == "path":
        argument = tmp_path / "m.onnx"
        argument.write_bytes(data)
    kind, handed = stock.classify(argument)
    assert kind == (stock.PLAIN if where == "none" else stock.STRUCT)
    if where == "none":
        assert handed is argument  # onnx gets the path, or the bytes, unchanged
        assert_same_outcome(onnx.checker.check_model, S.check_model, argument)


EYELIKE_UNDEFINED = """
import sys, onnx, onnx.shape_inference
from onnx import helper as oh, TensorProto as T
node = oh.make_node("EyeLike", ["nowhere"], ["Y"], dtype=T.DOUBLE)
graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("X", T.INT32, [3, 4])], [oh.make_tensor_value_info("Y", T.DOUBLE, [3, 4])])
model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 22)])
if sys.argv[1] == "ours":
    import onnx_struct as S
    try:
        S.infer_shapes(model)
    except onnx.shape_inference.InferenceError as error:
        print(error.code, error.path)
else:
    onnx.shape_inference.infer_shapes(model)
"""


@pytest.mark.slow
def test_an_undefined_input_is_refused_before_onnx_crashes_on_it():
    """Stock onnx 1.23's inference kills the process on an EyeLike (LabelEncoder, TreeEnsemble)
    whose input names nothing; ours refuses the model before handing it over."""
    runs = {
        who: subprocess.run([sys.executable, "-c", EYELIKE_UNDEFINED, who], capture_output=True, text=True, timeout=120)
        for who in ("stock", "ours")
    }
    assert runs["stock"].returncode < 0  # killed by a signal (SIGSEGV)
    assert runs["ours"].returncode == 0, runs["ours"].stderr
    assert runs["ours"].stdout.split() == ["undefined_input", "graph.node[0].input[0]", "('nowhere')"]


def test_undefined_inputs_are_found_in_node_order_and_in_subgraphs():
    from onnx_struct.check.stock import first_undefined_input

    assert first_undefined_input(MUTANTS["valid"].graph, frozenset(), "graph") is None
    assert (
        first_undefined_input(MUTANTS["unsorted nodes"].graph, frozenset(), "graph") == "graph.node[0].input[0] ('H')"
    )
    loop = _loop_model()
    assert first_undefined_input(loop.graph, frozenset(), "graph") is None  # the body sees X from outside
    loop.graph.node[0].attribute[0].g.node[1].input[1] = "nowhere"
    assert (
        first_undefined_input(loop.graph, frozenset(), "graph")
        == "graph.node[0].attribute.body[0].node[1].input[1] ('nowhere')"
    )
    assert_same_outcome(onnx.shape_inference.infer_shapes, S.infer_shapes, loop)  # no crashing operator: stock's


def test_an_undefined_input_of_a_crashing_operator_is_refused_in_a_subgraph():
    loop = _loop_model()
    body = loop.graph.node[0].attribute[0].g
    body.node.append(oh.make_node("EyeLike", ["nowhere"], ["e"], dtype=TensorProto.DOUBLE))
    with pytest.raises(onnx.shape_inference.InferenceError) as raised:
        S.infer_shapes(loop)  # in process: refused before onnx sees it
    assert raised.value.code == "undefined_input" and raised.value.path.startswith(
        "graph.node[0].attribute.body[0].node[2]"
    )


def test_a_crashing_operator_is_found_beside_a_large_models_initializers():
    """Above CUT_MIN_BYTES the names are searched without the main graph's initializer records
    (which hold no node): a node before or after them is still walked and refused."""
    from onnx_struct.check.stock import _names_crashing_operator
    from onnx_struct.schema.plain import CUT_MIN_BYTES

    big = onnx.numpy_helper.from_array(np.ones(CUT_MIN_BYTES // 4, np.float32), "big")
    named = onnx.numpy_helper.from_array(np.frombuffer(b"EyeLike" * 1000, np.uint8), "named")
    eyelike = oh.make_node("EyeLike", ["nowhere"], ["e"], dtype=TensorProto.DOUBLE)
    for nodes in ([eyelike], [oh.make_node("Identity", ["X"], ["Y"]), eyelike]):
        model = base_model()
        model.graph.initializer.extend([big, named])
        model.graph.node.extend(nodes)
        with pytest.raises(onnx.shape_inference.InferenceError) as raised:
            S.infer_shapes(model)  # in process: refused before onnx sees it
        assert raised.value.code == "undefined_input"
    plain = base_model()
    plain.graph.initializer.extend([big, named])  # the name only in a tensor's bytes
    assert _names_crashing_operator(plain.SerializeToString()) is False
    assert _names_crashing_operator(named.SerializeToString() * 200) is True  # no main graph: all searched
    assert _names_crashing_operator(b"\x0a" + b"\xff" * CUT_MIN_BYTES + b"EyeLike") is True  # no protobuf: all searched
    assert_same_outcome(onnx.shape_inference.infer_shapes, S.infer_shapes, plain)


PIECES = [b"E", b"F", b"x", b"EyeLik", b"yeLike", b"Label", b"Encoder", b"Tree", b"Ensemble", b"Regex", b"FullMatch"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES + [b"E" * 40, *CRASHING_OPERATORS]), max_size=12))
def test_the_crashing_operator_search_finds_exactly_the_names(pieces):
    """Found by a letter each name holds, then the name around it: the same answer as a search
    for each name (the oracle), with near misses, the letters many times, names at either end."""
    from onnx_struct.check.stock import _names_crashing_operator

    data = b"".join(pieces)
    assert _names_crashing_operator(data) is any(name in data for name in CRASHING_OPERATORS)


def test_each_crashing_operator_is_listed_by_a_letter_it_holds():
    from onnx_struct.check.stock import _BY_LETTER

    listed = [(letter, name, at) for letter, names in _BY_LETTER for name, at in names]
    assert sorted(name for _, name, _ in listed) == sorted(CRASHING_OPERATORS)
    assert all(name[at : at + 1] == letter for letter, name, at in listed)


@pytest.mark.parametrize("hooked", [False, True])
def test_the_size_limit_is_onnxs_at_each_call(monkeypatch, hooked):
    """onnx reads ``onnx.checker.MAXIMUM_PROTOBUF`` when it is called (onnx's own
    ``test_check_model_protobuf_size_over_limit_raises`` lowers it): so does the direct call."""
    model = base_model()
    monkeypatch.setattr(onnx.checker, "MAXIMUM_PROTOBUF", len(model.SerializeToString()) - 1)
    for argument in (model, model.SerializeToString()):
        with pytest.raises(ValueError) as stock_raised:
            onnx.checker.check_model(argument)
        if hooked:
            S.install()
            try:
                with pytest.raises(ValueError) as raised:
                    onnx.checker.check_model(argument)
            finally:
                S.uninstall()
            assert type(raised.value) is type(stock_raised.value)  # onnx's own exception
        else:
            with pytest.raises(ValueError) as raised:
                S.check_model(argument)
            assert isinstance(raised.value, S.ValidationError)
        assert str(stock_raised.value) in str(raised.value)
