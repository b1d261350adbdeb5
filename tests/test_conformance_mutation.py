"""The conformance suite has teeth (docs/conformance.md): switching off any one checker rule makes
a case fail, and mutating any one format's decoder makes its decode case fail."""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import onnx
import pytest

pytest.importorskip("gguf")
pytest.importorskip("onnxruntime")

from onnx_struct import conformance, formats  # noqa: E402
from onnx_struct.check.reporting import rule_disabled  # noqa: E402
from onnx_struct.conformance import rules, runner, writer  # noqa: E402

pytestmark = pytest.mark.slow

# Operators whose inputs are values (not shapes or axes): a constant feeding one changes results.
VALUE_OPS = {"Mul", "Add", "Sub", "Div", "BitShift", "BitwiseAnd", "BitwiseOr", "Gather", "GatherElements",
             "Where", "Pow", "Less", "Greater", "Equal", "Mod", "And", "Or"}  # fmt: skip
SWAPPED = {"Mul": "Div", "Div": "Mul", "Add": "Sub", "Sub": "Add"}


@pytest.fixture(scope="module")
def checker_suite(tmp_path_factory):
    directory = tmp_path_factory.mktemp("checker_suite")
    conformance.export(directory)
    return directory


@pytest.mark.parametrize("code", rules.checker_rules())
def test_switching_off_a_rule_fails_a_case(checker_suite, code):
    assert not [r for r in conformance.run(checker_suite, "onnxruntime", kinds={"checker"}) if r.status == "failed"]
    with rule_disabled(code):
        results = conformance.run(checker_suite, "onnxruntime", kinds={"checker"})
    assert [r.id for r in results if r.status == "failed"], f"no case fails with {code} switched off"


def flip_lowest_bits(tensor: onnx.TensorProto) -> bool:
    """Flip the lowest bit of every element of ``tensor`` (floats in *_data: the next float up)."""
    if tensor.raw_data:
        step = max(1, onnx.numpy_helper.to_array(tensor).dtype.itemsize)
        raw = bytearray(tensor.raw_data)
        raw[::step] = bytes(b ^ 1 for b in raw[::step])
        tensor.raw_data = bytes(raw)
        return True
    for field in ("float_data", "double_data", "int32_data", "int64_data", "uint64_data"):
        values = getattr(tensor, field)
        if len(values):
            for i, v in enumerate(values):
                values[i] = (
                    float(np.nextafter(np.float32(v), np.float32(np.inf)))
                    if "float" in field or "double" in field
                    else v ^ 1
                )
            return True
    return False


def mutate(function: onnx.FunctionProto) -> str:
    """One mutation of a decoder: its first constant feeding a value operator, bit-flipped; else
    its first arithmetic operator swapped; else a Neg on its output. Returns what was changed."""
    consumers: dict[str, set[str]] = {}
    for node in function.node:
        for name in node.input:
            consumers.setdefault(name, set()).add(node.op_type)
    for node in function.node:
        if node.op_type == "Constant" and consumers.get(node.output[0], set()) & VALUE_OPS:
            if any(a.name == "value" and flip_lowest_bits(a.t) for a in node.attribute):
                return f"constant {node.output[0]}"
    for node in function.node:
        if node.op_type in SWAPPED:
            node.op_type = SWAPPED[node.op_type]
            return f"{node.output[0]}: {node.op_type}"
    output = function.output[0]
    for node in function.node:
        node.output[:] = [f"{o}_unmutated" if o == output else o for o in node.output]
    function.node.append(onnx.helper.make_node("Neg", [f"{output}_unmutated"], [output]))
    return "Neg on the output"


@pytest.mark.parametrize("seed_name", list(enumerate(formats.names())), ids=formats.names())
def test_a_mutated_decoder_fails_its_decode_case(tmp_path, seed_name):
    seed, name = seed_name
    changed = []
    _, files = writer.decode_case(name, seed, mutate=lambda function: changed.append(mutate(function)))
    assert changed, "no decoder was mutated"
    case_dir = tmp_path / "decode" / name
    for relative, data in files.items():
        (case_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (case_dir / relative).write_bytes(data)
    case = {"id": f"decode/{name}", "kind": "decode", "format": name,
            "files": {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = runner.run_case(runner.OnnxStructBackend(), tmp_path, case)
        if result.status == "skipped":  # onnxruntime has no kernel for it: onnx's reference evaluator
            result = runner.run_case(runner.ReferenceBackend(), tmp_path, case)
    assert result.status == "failed", f"{name}: the mutation ({changed}) survives"
