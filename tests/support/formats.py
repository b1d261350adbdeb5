"""Test helpers shared by the format tests (tests/test_formats_*.py).

The user path for one format (declare a tensor in a model, decode / encode it with
``onnx_struct.decode`` / ``encode``, checking which runtime ran), bit-exact float comparison, and
the check that a format's functions are valid ONNX under onnx's strict shape inference. The
oracles themselves (gguf-py, ml_dtypes, numpy transcriptions) stay in each test module.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

from onnx_struct import add_struct_values
from onnx_struct.layout.table import TypeTable
from onnx_struct.runtime.codec import decode, encode
from support.models import base_model


@contextlib.contextmanager
def expect_fallback(expected: bool = False):
    """Fail unless the runtime falls back from onnxruntime to the reference evaluator exactly
    when ``expected`` (by default: never)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    fallbacks = [str(w.message) for w in caught if "ReferenceEvaluator" in str(w.message)]
    assert bool(fallbacks) == expected, fallbacks


def run_decode(fmt, shape, payload: bytes, runtime: str, *, fallback: bool = False) -> np.ndarray:
    """Decode ``payload`` as a tensor of ``shape`` in ``fmt`` through ``onnx_struct.decode``."""
    model = base_model()
    add_struct_values(model, fmt.make_value(model, "w", shape, payload))
    with expect_fallback(fallback):
        return decode("w", model, runtime=runtime)


def run_encode(fmt, x: np.ndarray, runtime: str, *, fallback: bool = False) -> bytes:
    """The payload ``onnx_struct.encode`` writes for ``x`` in ``fmt``."""
    model = base_model()
    index = fmt.add_to_model(model, x.shape)
    with expect_fallback(fallback):
        return encode(x, index, model, runtime=runtime).raw_data


def assert_same_floats(actual: np.ndarray, expected: np.ndarray, *, nan_bits: bool = False) -> None:
    """Bit-identical float32 arrays; NaNs need the same positions only (their sign and payload
    are compared too with ``nan_bits``)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype == np.float32
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan, err_msg="NaN positions differ")
    keep = np.ones_like(nan) if nan_bits else ~nan
    a, e = actual[keep].view(np.uint32), expected[keep].view(np.uint32)
    mismatches = np.flatnonzero(a != e)
    assert mismatches.size == 0, (
        f"{mismatches.size} values differ, first at {mismatches[0]}: "
        f"{actual[keep][mismatches[0]]} != {expected[keep][mismatches[0]]}"
    )


def assert_valid_functions(fmt, shape) -> None:
    """Decoder and encoder, each called from a model typed with the leaves' real types, pass
    onnx.checker with full (strict) shape inference at the opset they import."""
    leaves = {
        leaf.path: leaf for leaf in TypeTable([fmt.block_declaration()]).leaves(fmt.root_declaration(shape, 0), "r")
    }
    for function in (fmt.decoder(shape), fmt.encoder(shape)):
        if function.name.startswith("decode"):
            payload = [name for name in function.input if leaves[name].kind != "constant"]
            inputs = [oh.make_tensor_value_info(p, leaves[p].elem_type, leaves[p].shape) for p in payload]
            constants = [leaves[name].constant for name in function.input if name not in payload]
            outputs = [oh.make_tensor_value_info(function.output[0], TensorProto.FLOAT, shape)]
        else:
            inputs, constants = [oh.make_tensor_value_info("x", TensorProto.FLOAT, shape)], []
            outputs = [oh.make_tensor_value_info(o, leaves[o].elem_type, leaves[o].shape) for o in function.output]
        node = oh.make_node(function.name, list(function.input), list(function.output), domain=function.domain)
        graph = oh.make_graph([node], "g", inputs, outputs, initializer=constants)
        opset = [oh.make_opsetid("", function.opset_import[0].version), oh.make_opsetid(function.domain, 1)]
        model = oh.make_model(graph, functions=[function], opset_imports=opset)
        model.ir_version = onnx.helper.find_min_ir_version_for(opset[:1])
        onnx.checker.check_model(model, full_check=True)
