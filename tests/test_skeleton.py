"""schema/skeleton.py: a model file without its large initializers' bytes, and where they are.

The oracle is onnx's own serialization of the same model with those tensors' raw_data cleared."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from onnx_struct.passes.quantize import quantize
from onnx_struct.schema.skeleton import read_run, split_initializer_data
from onnx_struct.schema.wire_format import Malformed


def model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    big = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"W{i}") for i in range(3)]
    small = numpy_helper.from_array(np.ones(4, np.float32), "small")
    twice = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W0")  # a second "W0"
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", "W1"], ["H"]), oh.make_node("MatMul", ["H", "W2"], ["Y"])],
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 64])],
        [*big, small, twice],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def test_skeleton_is_the_model_without_the_large_raw_data(tmp_path):
    m = model()
    data = m.SerializeToString()
    skeleton, runs = split_initializer_data(data, threshold=1024)
    assert list(runs) == ["W0", "W1", "W2"]  # not "small" (16 bytes), not the second "W0"
    expected = onnx.ModelProto()
    expected.CopyFrom(m)
    for tensor in expected.graph.initializer[:3]:
        tensor.ClearField("raw_data")
    assert skeleton == expected.SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    for tensor in m.graph.initializer[:3]:
        assert read_run(path, *runs[tensor.name]) == tensor.raw_data
    with pytest.raises(OSError, match="bytes expected"):
        read_run(path, len(data) - 10, 20)
    with pytest.raises(Malformed):
        split_initializer_data(b"\x3a\xff\xff\xff\xff\x0f")  # a graph field longer than the bytes


@pytest.mark.parametrize("opset", [21, 17])
def test_quantize_from_a_path_equals_quantize_in_memory(tmp_path, opset):
    """From a path quantize leaves the weights in the file and reads them one at a time (at an
    opset older than the decoders' they come back before onnx's converter sees the model)."""
    m = model()
    del m.graph.initializer[4]  # one W0
    m.opset_import[0].version = opset
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    for fmt in ("Q8_0", "Q4_0"):
        assert (
            quantize(path, fmt, min_elements=1).SerializeToString()
            == quantize(m, fmt, min_elements=1).SerializeToString()
        )
