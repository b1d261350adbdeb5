"""InferenceSession hands its repacked weights to onnxruntime through a temporary external-data
file (onnx_struct/runtime/weights_file.py): the file holds every external tensor of the lowered
model, the directory is gone once the session exists, and where no file can be written the
arrays go over in memory with the same results. Oracle: gguf-py's dequantization, in float64."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from test_affine import oracle, random_payload

import onnx_struct as S
from onnx_struct import formats, limits
from onnx_struct.runtime import weights_file

K, N = 256, 48


def bias_model(
    tmp_path, name: str = "Q4_0", bias_file: str = "b.bin", length: bool = True
) -> tuple[str, np.ndarray, np.ndarray]:
    """y = x @ W^T + b: W [N, K] a struct value in ``w.bin``, b a float initializer in ``b.bin``
    (a stock external tensor the weights file must carry too); (path, W as float, b)."""
    payload = random_payload(name, (N, K), 3, sane=True)
    bias = np.random.default_rng(4).standard_normal(N).astype(np.float32)
    nodes = [
        oh.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
        oh.make_node("MatMul", ["x", "Wt"], ["xw"]),
        oh.make_node("Add", ["xw", "b"], ["y"]),
    ]
    b = numpy_helper.from_array(bias, "b")
    b.ClearField("raw_data")
    b.data_location = TensorProto.EXTERNAL
    entries = [("location", bias_file), ("offset", "16")] + [("length", str(bias.nbytes))] * length
    for key, value in entries:
        b.external_data.add(key=key, value=value)  # as onnx.save writes them, not at the file's start
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", K])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", N])],
        [b],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    value = formats.get(name).make_value(model, "W", (N, K), b"")
    value.ClearField("raw_data")
    value.external_data.add(key="location", value="w.bin")
    S.add_struct_values(model, value)
    (tmp_path / "w.bin").write_bytes(payload)
    (tmp_path / bias_file).write_bytes(b"x" * 16 + bias.tobytes() + b"more tensors after it")
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path), oracle(name, payload, (N, K)).astype(np.float64), bias


def expected(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) @ weight.T + bias


def run_and_compare(path: str, weight: np.ndarray, bias: np.ndarray, monkeypatch, seed: int) -> list:
    """Run ``path`` at accuracy level 0 against the float64 oracle; what write_weights_file returned."""
    routes = []
    original = weights_file.write_weights_file
    monkeypatch.setattr(
        "onnx_struct.runtime.delivery.write_weights_file", lambda *a: routes.append(original(*a)) or routes[-1]
    )
    x = np.random.default_rng(seed).standard_normal((2, K)).astype(np.float32)
    (y,) = S.InferenceSession(path, accuracy_level=0).run(None, {"x": x})
    reference = expected(x, weight, bias)
    assert np.max(np.abs(y - reference)) <= 1e-5 * np.max(np.abs(reference))
    return routes


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A temporary directory of the test's own for tempfile, to see what is left in it."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_weights_reach_onnxruntime_through_a_file_that_is_removed(tmp_path, private_tmp, monkeypatch):
    seen = []
    original = weights_file.write_weights_file

    def spy(model, arrays, base_dir):
        written = original(model, arrays, base_dir)
        assert written is not None
        data = os.path.join(written.directory, weights_file.FILE_NAME)
        # The placeholders and the stock external bias now point into the one file.
        locations = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
        seen.append((os.path.getsize(data), locations, set(arrays)))
        return written

    monkeypatch.setattr("onnx_struct.runtime.delivery.write_weights_file", spy)
    path, weight, bias = bias_model(tmp_path)
    session = S.InferenceSession(path, accuracy_level=0)
    ((size, locations, names),) = seen
    assert locations == {weights_file.FILE_NAME} and names  # every external tensor, in one file
    assert size >= N * K // 2 + N * 4  # at least the 4-bit codes and the bias
    assert list(private_tmp.iterdir()) == []  # removed once the session exists
    # ``lowered`` shows the placeholders again, and the bias where it was.
    by_name = {t.name: t for t in session.lowered.graph.initializer}
    assert by_name["b"].external_data[0].value == "b.bin"
    x = np.random.default_rng(5).standard_normal((3, K)).astype(np.float32)
    (y,) = session.run(None, {"x": x})
    reference = expected(x, weight, bias)
    assert np.max(np.abs(y - reference)) <= 1e-5 * np.max(np.abs(reference))


def test_without_a_temporary_directory_the_arrays_go_in_memory(tmp_path, monkeypatch):
    path, weight, bias = bias_model(tmp_path)
    x = np.random.default_rng(6).standard_normal((2, K)).astype(np.float32)
    (from_file,) = S.InferenceSession(path).run(None, {"x": x})

    def no_directory(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", no_directory)
    (in_memory,) = S.InferenceSession(path).run(None, {"x": x})
    np.testing.assert_array_equal(in_memory, from_file)  # the same MatMulNBits over the same bytes
    reference = expected(x, weight, bias)
    assert np.max(np.abs(in_memory - reference)) <= 2e-2 * np.max(np.abs(reference))  # level 4: int8 x


def test_a_failed_write_leaves_the_model_and_no_file(tmp_path, private_tmp, monkeypatch):
    """Disk full half way: the model's references are as before and the directory is gone."""
    path, _, _ = bias_model(tmp_path)
    lowered = S.lower(path)
    from onnx_struct.check.checked import checked_model  # noqa: PLC0415
    from onnx_struct.lowering.lower import lower_checked  # noqa: PLC0415

    checked = checked_model(path)
    loaded = checked.loaded
    lowering = lower_checked(checked, execution="quantized", accuracy_level=4, in_memory=True)
    arrays = lowering.arrays
    before = lowering.model.SerializeToString()
    calls = []

    def full_disk(file, array):
        calls.append(1)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(weights_file, "_write_array", full_disk)
    assert weights_file.write_weights_file(lowering.model, arrays, loaded.base_dir) is None
    assert calls and lowering.model.SerializeToString() == before
    assert list(private_tmp.iterdir()) == []
    assert lowered.graph.node  # the portable lowering is untouched by any of this


def test_large_other_external_tensors_stay_where_they_are(tmp_path, monkeypatch):
    """The model's other external tensors are copied into the weights file only while they are
    not much more than the weights (a big float table, or a sparse file a hostile model names,
    is read by onnxruntime from where it is): beyond that, the in-memory route."""
    path, weight, bias = bias_model(tmp_path)
    monkeypatch.setattr(limits, "EXTERNAL_COPY_ALLOWANCE", -(10**9))  # the bias is now "too large"
    assert run_and_compare(path, weight, bias, monkeypatch, seed=7) == [None]


def test_a_model_file_named_like_the_placeholders_is_read_as_the_models(tmp_path, monkeypatch):
    """The placeholders' location is only a label; a tensor of the model's own stored in a file of
    that name (legal in the model's directory) is copied from it, not taken for an array."""
    from onnx_struct.lowering.execution.emit import IN_MEMORY_LOCATION  # noqa: PLC0415

    path, weight, bias = bias_model(tmp_path, bias_file=IN_MEMORY_LOCATION)
    (route,) = run_and_compare(path, weight, bias, monkeypatch, seed=8)
    assert route is not None  # the file route, the bias copied from the model's file


def test_an_external_tensor_without_length_is_copied_at_its_types_size(tmp_path, monkeypatch):
    """Without ``length`` onnxruntime reads the tensor's size from its type; the copy into the
    weights file takes that size too, not the rest of the file (here more tensors follow)."""
    path, weight, bias = bias_model(tmp_path, length=False)
    (route,) = run_and_compare(path, weight, bias, monkeypatch, seed=9)
    assert route is not None  # the file route


def test_small_tensors_are_packed_not_spread_over_holes(tmp_path, monkeypatch):
    """Only tensors of 64 KiB or more start at a 64 KiB boundary: many small external tensors do
    not make a file of holes (20,000 of them made 1.3 GB of apparent size)."""
    path, _, _ = bias_model(tmp_path)
    sizes = []
    original = weights_file.write_weights_file

    def spy(model, arrays, base_dir):
        written = original(model, arrays, base_dir)
        nbytes = [a.nbytes for a in arrays.values()]  # the session empties the dict afterwards
        sizes.append((os.path.getsize(os.path.join(written.directory, weights_file.FILE_NAME)), nbytes))
        return written

    monkeypatch.setattr("onnx_struct.runtime.delivery.write_weights_file", spy)
    S.InferenceSession(path)
    ((size, nbytes),) = sizes
    assert nbytes and max(nbytes) < 1 << 16  # all small here: the bound below is theirs
    assert size <= sum(n + 64 for n in nbytes) + N * 4 + 64
