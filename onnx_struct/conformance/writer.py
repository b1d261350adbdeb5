"""Writing the suite: every case's files and ``manifest.json`` (suite version, and per case its id,
kind, rule or format, description and the SHA-256 of each file). Deterministic: fixed seeds,
sorted keys, no timestamps, so two exports are byte-identical."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as oh

from onnx_struct import formats
from onnx_struct.conformance import checker_cases, layout_cases, oracles
from onnx_struct.lowering.lower import lower
from onnx_struct.schema.model import add_struct_types, add_struct_values, get_struct_types, set_struct_types

SUITE_VERSION = 1
MANIFEST = "manifest.json"


def to_json(data) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def tensor_bytes(array: np.ndarray, name: str) -> bytes:
    return onnx.numpy_helper.from_array(np.array(array, order="C"), name).SerializeToString()


def declarations_model(declarations, values=(), nodes=(), inputs=(), outputs=()) -> onnx.ModelProto:
    graph = oh.make_graph(list(nodes), "conformance", list(inputs), list(outputs))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    if declarations:
        add_struct_types(model, *declarations)
    if values:
        add_struct_values(model, *values)
    return model


def backend_layout(plain: onnx.ModelProto, outputs: list[np.ndarray], feeds: dict[str, np.ndarray]) -> dict[str, bytes]:
    """onnx's backend-test layout: model.onnx, test_data_set_0/input_<i>.pb and output_<i>.pb."""
    files = {"model.onnx": plain.SerializeToString()}
    for i, graph_input in enumerate(plain.graph.input):
        files[f"test_data_set_0/input_{i}.pb"] = tensor_bytes(feeds[graph_input.name], graph_input.name)
    for i, (graph_output, array) in enumerate(zip(plain.graph.output, outputs, strict=True)):
        files[f"test_data_set_0/output_{i}.pb"] = tensor_bytes(array, graph_output.name)
    return files


def leaf_feeds(plain: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The lowered model's leaf initializers listed as graph inputs (``compact``), as arrays."""
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in plain.graph.initializer}
    return {i.name: initializers[i.name] for i in plain.graph.input if i.name in initializers}


def format_shape(fmt) -> tuple[int, ...]:
    return (2, 2 * fmt.block_size) if fmt.block_size > 1 else (2, 32)


def format_payload(fmt, shape, seed: int) -> bytes:
    size = fmt.num_blocks(shape) * fmt.bytes_per_block
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


# ---------------------------------------------------------------------- the cases
def checker_entries():
    for case in checker_cases.CASES:
        expected = {"valid": case.code is None}
        if case.code is not None:
            expected.update(code=case.code, path=case.path)
        yield (
            f"checker/{case.name}",
            "checker",
            {"rule": case.rule},
            case.description,
            {**case.build(), "expected.json": to_json(expected)},
        )


def size_entries():
    for case in layout_cases.SIZE_CASES:
        model = declarations_model(case.declarations)
        expected = {"size_bits": {f"struct_types[{i}]": bits for i, bits in case.sizes.items()}}
        yield (
            f"size/{case.name}",
            "size",
            {},
            case.description,
            {"model.onnx": model.SerializeToString(), "expected.json": to_json(expected)},
        )


def view_entries():
    from onnx_struct.schema.builders import make_struct_value

    for seed, case in enumerate(layout_cases.VIEW_CASES):
        data = layout_cases.payload(case, seed)
        model = declarations_model(case.declarations, [make_struct_value("w", case.root, raw_data=data)])
        leaves = layout_cases.expected_leaves(case, data)
        out = {"model.onnx": model.SerializeToString(), "payload.bin": data}
        names = {}
        for k, (path, array) in enumerate(sorted(leaves.items())):
            out[f"leaves/leaf_{k}.pb"] = tensor_bytes(array, path)
            names[path] = f"leaves/leaf_{k}.pb"
        out["expected.json"] = to_json({"value": "w", "leaves": names})
        yield (f"view/{case.name}", "view", {}, case.description, out)


def decode_case(name: str, seed: int, mutate=None) -> tuple[str, dict[str, bytes]]:
    """(description, files) of format ``name``'s decode case; ``mutate(decoder)`` (a test's)
    changes the decoder FunctionProto in place before the model is lowered."""
    fmt = formats.get(name)
    shape = format_shape(fmt)
    payload = format_payload(fmt, shape, seed)
    expected = oracles.dequantize(fmt.family, name, payload, shape)
    model = declarations_model((), nodes=[oh.make_node("Identity", ["w"], ["y"])],
                               outputs=[oh.make_tensor_value_info("y", T.FLOAT, list(shape))])  # fmt: skip
    add_struct_values(model, fmt.make_value(model, "w", shape, payload))
    if mutate is not None:
        declarations = get_struct_types(model)
        for declaration in declarations:
            if declaration.HasField("decoder"):
                mutate(declaration.decoder)
        set_struct_types(model, declarations)
    plain = lower(model, compact=True)
    out = backend_layout(plain, [expected], leaf_feeds(plain))
    out.update({"struct_model.onnx": model.SerializeToString(), "payload.bin": payload})
    return f"{fmt.description} {shape}: oracle {ORACLE_NAMES[fmt.family]}", out


def decode_entries():
    for seed, name in enumerate(formats.names()):
        description, out = decode_case(name, seed)
        yield (f"decode/{name}", "decode", {"format": name}, description, out)


ORACLE_NAMES = {
    "gguf": "gguf.quants.dequantize",
    "mx": "ml_dtypes",
    "nf4": "the published NF4 table",
    "linear": "numpy",
}

LOWERING = (("Q4_0", "Add"), ("Q8_0", "Add"), ("NF4", "Mul"), ("OCP_MXFP8_E4M3", "Sub"))


def lowering_entries():
    for seed, (name, op) in enumerate(LOWERING, start=100):
        fmt = formats.get(name)
        shape = format_shape(fmt)
        payload = format_payload(fmt, shape, seed)
        with np.errstate(all="ignore"):
            x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
            weight = oracles.dequantize(fmt.family, name, payload, shape)
            y = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract}[op](x, weight).astype(np.float32)
        model = declarations_model((), nodes=[oh.make_node(op, ["X", "w"], ["Y"])],
                                   inputs=[oh.make_tensor_value_info("X", T.FLOAT, list(shape))],
                                   outputs=[oh.make_tensor_value_info("Y", T.FLOAT, list(shape))])  # fmt: skip
        add_struct_values(model, fmt.make_value(model, "w", shape, payload))
        plain = lower(model)
        out = backend_layout(plain, [y], {"X": x})
        out["struct_model.onnx"] = model.SerializeToString()
        description = f"Y = {op}(X, w), w a {name} struct value {shape}; expected: numpy on {ORACLE_NAMES[fmt.family]}"
        yield (f"lowering/{name}_{op}", "lowering", {"format": name}, description, out)


def all_entries():
    yield from checker_entries()
    yield from size_entries()
    yield from view_entries()
    yield from decode_entries()
    yield from lowering_entries()


def export(directory: str | os.PathLike) -> dict:
    """Write the conformance suite into ``directory`` (created; files already there are replaced).

    Args:
        directory: where to write it.

    Returns:
        The manifest (as written to ``manifest.json``).

    Raises:
        ImportError: gguf-py is not installed (the GGUF decode cases' oracle).
        OSError: the directory cannot be written.
    """
    root = pathlib.Path(directory)
    cases = []
    for case_id, kind, keys, description, files in all_entries():
        digests = {}
        for relative, data in sorted(files.items()):
            target = root / case_id / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            digests[relative] = hashlib.sha256(data).hexdigest()
        cases.append({"id": case_id, "kind": kind, **keys, "description": description, "files": digests})
    manifest = {"suite_version": SUITE_VERSION, "cases": cases}
    (root / MANIFEST).write_bytes(to_json(manifest))
    return manifest


def suite_digest(directory: str | os.PathLike) -> str:
    """The SHA-256 of the suite's ``manifest.json``, which holds every file's SHA-256.

    Args:
        directory: an exported suite.

    Returns:
        The hex digest.

    Raises:
        OSError: no manifest there.
    """
    return hashlib.sha256((pathlib.Path(directory) / MANIFEST).read_bytes()).hexdigest()
