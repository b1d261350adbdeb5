"""check_model's verdict does not depend on the working directory (check/stand_ins.py).

onnx's checker, given bytes, looks for external tensors' files in the current directory. The main
graph's external initializers never reach it as such; tensors in Constant attributes, subgraph
initializers, model functions and training graphs do, so a valid model stored with
``onnx.save(..., save_as_external_data=True)`` was refused unless the caller stood in the model's
directory, where stock onnx (given the path) accepts it. The files are checked by onnx_struct's
own rules against the model's directory, wherever the caller stands.

These are struct models (one declaration, unused): a model without struct parts goes to stock
onnx itself (docs/semantics.md, "Plain models"), which resolves an in-memory model's files in the
working directory and does not look at training graphs' files; tests/test_dropin_check.py holds those to
stock's verdicts."""

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
    path.write_bytes(with_struct_part(add_of(place)).SerializeToString())
    return str(path)


def with_struct_part(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` plus one (unused) declaration: a struct model, checked by onnx_struct's rules."""
    S.add_struct_types(model, S.make_array(T.UINT8, 4))
    return model


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


def constants_at(locations: list[str]) -> onnx.ModelProto:
    """y = x + c_0 + c_1 + ...: one Constant node per location, each tensor external there."""
    nodes, last = [], "x"
    for i, location in enumerate(locations):
        nodes.append(oh.make_node("Constant", [], [f"c{i}"], value=external(f"t{i}", location)))
        nodes.append(oh.make_node("Add", [last, f"c{i}"], [f"s{i}"]))
        last = f"s{i}"
    nodes.append(oh.make_node("Identity", [last], ["y"]))
    x, y = (oh.make_tensor_value_info(n, T.FLOAT, [4]) for n in "xy")
    return oh.make_model(oh.make_graph(nodes, "g", [x], [y]), opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def test_no_location_is_created_on_disk(tmp_path, monkeypatch):
    """Stand-ins have flat names of their own: a location 990 directories deep (a RecursionError
    in pathlib's mkdir, then in the temporary directory's cleanup, which left it behind) or
    thousands of directories (one per 2 bytes of model, seconds each thousand) cost one empty file
    each. Given as bytes, only the syntax of a location is checked, so any of them is accepted."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temporary))
    monkeypatch.chdir(tmp_path)
    model = with_struct_part(constants_at(["a/" * 990 + "c.bin"] + ["d/" * i + "c.bin" for i in range(1, 300)]))
    S.check_model(model.SerializeToString())
    assert S.validate(model.SerializeToString()) == []
    assert list(temporary.iterdir()) == []


def test_a_deep_location_of_a_model_on_disk_passes_as_stock_onnx_passes_it(tmp_path, monkeypatch):
    directory = tmp_path / "model"
    deep = directory / ("a/" * 300)
    deep.mkdir(parents=True)
    (deep / "c.bin").write_bytes(C.tobytes())
    path = directory / "model.onnx"
    path.write_bytes(constants_at(["a/" * 300 + "c.bin"]).SerializeToString())
    onnx.checker.check_model(str(path))
    monkeypatch.chdir(tmp_path)
    S.check_model(str(path))


def test_without_a_temporary_directory_onnx_checks_as_it_would(tmp_path, monkeypatch):
    """No usable temporary directory: onnx's own behaviour (the working directory), no OSError."""
    path = saved(tmp_path, "if")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "missing"))
    monkeypatch.chdir(tmp_path / "model")
    S.check_model(path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(S.ValidationError, match="onnx.checker: .*c.bin"):
        S.check_model(path)


def test_a_relative_base_dir_is_fixed_when_the_model_is_loaded(tmp_path, monkeypatch):
    """Found by a red-team pass: a relative ``base_dir`` stayed relative and was resolved at each
    read, so after an ``os.chdir`` a view read another directory's file of that name."""
    for folder, byte in (("first", 7), ("second", 9)):
        (tmp_path / folder / "a").mkdir(parents=True)
        (tmp_path / folder / "a" / "w.bin").write_bytes(bytes([byte]) * 4)
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    value = S.make_struct_value("w", S.make_array(onnx.TensorProto.UINT8, 4))
    value.external_data.add(key="location", value="w.bin")
    S.add_struct_values(model, value)
    monkeypatch.chdir(tmp_path / "first")
    loaded = S.load_model(model.SerializeToString(), base_dir="a")
    monkeypatch.chdir(tmp_path / "second")
    np.testing.assert_array_equal(S.view("w", loaded)[""], [7, 7, 7, 7])
