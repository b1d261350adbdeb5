"""check_model's verdict does not depend on the working directory (check/stand_ins.py).

onnx's checker, given bytes, looks for external tensors' files in the current directory. The main
graph's external initializers never reach it as such; tensors in Constant attributes, subgraph
initializers, model functions and training graphs do, so a valid model stored with
``onnx.save(..., save_as_external_data=True)`` was refused unless the caller stood in the model's
directory, where stock onnx (given the path) accepts it. The files are checked by onnx_struct's
own rules against the model's directory, wherever the caller stands."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper

import onnx_struct as S

C = np.arange(4, dtype=np.float32)


def external(name: str, location: str = "c.bin") -> onnx.TensorProto:
    tensor = numpy_helper.from_array(C, name)
    tensor.ClearField("raw_data")
    tensor.data_location = T.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(C.nbytes))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def add_of(place: str) -> onnx.ModelProto:
    """y = x + c, with c external in ``place``: if (a then-branch initializer), constant (a
    Constant node), function (a Constant in a model-local function), training (an initializer of
    a training graph; the main graph adds a plain constant)."""
    x = oh.make_tensor_value_info("x", T.FLOAT, [4])
    y = oh.make_tensor_value_info("y", T.FLOAT, [4])
    inputs, nodes, functions, opsets = [x], [], [], [oh.make_opsetid("", 21)]
    if place == "if":
        then = oh.make_graph(
            [oh.make_node("Add", ["x", "c"], ["t"])],
            "then",
            [],
            [oh.make_tensor_value_info("t", T.FLOAT, [4])],
            [external("c")],
        )
        other = oh.make_graph(
            [oh.make_node("Identity", ["x"], ["e"])], "else", [], [oh.make_tensor_value_info("e", T.FLOAT, [4])]
        )
        inputs.append(oh.make_tensor_value_info("cond", T.BOOL, []))
        nodes.append(oh.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other))
    elif place == "constant":
        nodes += [oh.make_node("Constant", [], ["c"], value=external("c")), oh.make_node("Add", ["x", "c"], ["y"])]
    elif place == "function":
        body = [oh.make_node("Constant", [], ["k"], value=external("k")), oh.make_node("Add", ["a", "k"], ["o"])]
        functions.append(oh.make_function("local", "AddC", ["a"], ["o"], body, [oh.make_opsetid("", 21)]))
        opsets.append(oh.make_opsetid("local", 1))
        nodes.append(oh.make_node("AddC", ["x"], ["y"], domain="local"))
    else:
        nodes.append(oh.make_node("Identity", ["x"], ["y"]))
    graph = oh.make_graph(nodes, "g", inputs, [y])
    model = oh.make_model(graph, opset_imports=opsets, ir_version=10, functions=functions)
    if place == "training":
        training = model.training_info.add()
        training.initialization.CopyFrom(oh.make_graph([], "init", [], [], [external("t")]))
        training.algorithm.CopyFrom(oh.make_graph([], "algorithm", [], []))
    return model


PLACES = ["if", "constant", "function", "training"]


def saved(tmp_path, place: str, with_file: bool = True) -> str:
    directory = tmp_path / "model"
    directory.mkdir()
    if with_file:
        (directory / "c.bin").write_bytes(C.tobytes())
    path = directory / "model.onnx"
    path.write_bytes(add_of(place).SerializeToString())
    return str(path)


@pytest.mark.parametrize("full_check", [False, True])
@pytest.mark.parametrize("place", PLACES)
def test_a_valid_model_passes_from_any_working_directory(place, full_check, tmp_path, monkeypatch):
    path = saved(tmp_path, place)
    onnx.checker.check_model(path, full_check=full_check)  # stock onnx, given the path, accepts it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    S.check_model(path, full_check=full_check)
    assert S.validate(path, full_check=full_check) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "model"]  # nothing left behind


@pytest.mark.parametrize("place", PLACES)
def test_a_file_in_the_working_directory_does_not_stand_in_for_a_missing_one(place, tmp_path, monkeypatch):
    path = saved(tmp_path, place, with_file=False)
    here = tmp_path / "here"
    here.mkdir()
    (here / "c.bin").write_bytes(C.tobytes())
    monkeypatch.chdir(here)
    with pytest.raises(S.ValidationError, match="c.bin") as caught:
        S.check_model(path)
    assert caught.value.code == "file_unreadable"


def test_a_struct_model_with_an_external_constant_passes_from_elsewhere(tmp_path, monkeypatch):
    """The same with struct parts (the view is then onnx_struct's, not the file's bytes)."""
    model = S.from_onnx(add_of("constant"))
    model.struct_types.add().CopyFrom(S.StructTypeProto(structure=S.StructTypeProto.Structure()))
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "c.bin").write_bytes(C.tobytes())
    path = directory / "model.onnx"
    path.write_bytes(model.SerializeToString())
    monkeypatch.chdir(tmp_path)
    S.check_model(str(path))
    assert S.validate(str(path)) == []
