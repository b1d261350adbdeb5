"""check_model on a 2,000-node model with 2,000 struct values vs the stock checker's own time.

Goal (issue 2): the struct checks add no more than the stock checker's time, i.e.
(onnx_struct.check_model - onnx.checker.check_model) / onnx.checker.check_model <= 1.

    python benchmarks/bench_check.py            # the goal's ratio
    python benchmarks/bench_check.py --parts    # where one check_model call spends its time
"""

from __future__ import annotations

import sys
import time

import numpy as np
import onnx
from _timing import interleaved_minimum
from onnx import TensorProto
from onnx import helper as oh

import onnx_struct as S
from onnx_struct.check import checker
from onnx_struct.check.checker import checker_view
from onnx_struct.schema import wire
from onnx_struct.schema.model import load

N = 2000


def build() -> onnx.ModelProto:
    decoder = oh.make_function(
        "bench",
        "dec",
        ["d", "qs"],
        ["y"],
        [
            oh.make_node("Cast", ["qs"], ["q"], to=TensorProto.FLOAT),
            oh.make_node("Cast", ["d"], ["df"], to=TensorProto.FLOAT),
            # [4] -> [4, 1]: one scale per block row (the decoder is type-checked by check_model)
            oh.make_node("Constant", [], ["axis"], value=oh.make_tensor("axis", TensorProto.INT64, [1], [1])),
            oh.make_node("Unsqueeze", ["df", "axis"], ["scale"]),
            oh.make_node("Mul", ["q", "scale"], ["y"]),
        ],
        [oh.make_opsetid("", 21)],
    )
    block = S.make_structure(
        [S.make_field("d", TensorProto.FLOAT16), S.make_field("qs", S.make_tensor_type(TensorProto.UINT8, [16]))]
    )
    nodes, outputs = [], []
    previous = "X"
    for i in range(N):
        nodes.append(oh.make_node("Add", [previous, f"w{i}"], [f"h{i}"]))
        previous = f"h{i}"
    outputs.append(oh.make_tensor_value_info(previous, TensorProto.FLOAT, [4, 16]))
    graph = oh.make_graph(nodes, "bench", [oh.make_tensor_value_info("X", TensorProto.FLOAT, [4, 16])], outputs)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    S.add_struct_types(model, block, S.make_array(S.make_type_reference(0), 4, decoder=decoder))
    payload = np.random.default_rng(0).integers(0, 256, 4 * 18, dtype=np.uint8).tobytes()
    S.add_struct_values(model, *[S.make_struct_value(f"w{i}", 1, raw_data=payload) for i in range(N)])
    return model


def plain_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """The stock checker's peer: the same graph with the struct values as plain initializers."""
    plain = oh.make_graph(
        list(model.graph.node),
        "bench",
        list(model.graph.input),
        list(model.graph.output),
        initializer=[onnx.numpy_helper.from_array(np.zeros((4, 16), np.float32), f"w{i}") for i in range(N)],
    )
    return oh.make_model(plain, opset_imports=[oh.make_opsetid("", 21)])


def main() -> None:
    model = build()
    plain = plain_model(model)
    # What onnx_struct hands to the stock checker: the model's bytes plus one node defining the values.
    view = checker_view(load(model), [], external_initializers=False, check_custom_domain=False)
    # 150 rounds (~2 s): this machine alternates between fast and slow phases lasting seconds,
    # which slow Python more than onnx's C++; the minimum over a long interleaved run compares
    # both at their fastest, instead of whichever phase a short run happened to fall in.
    stock, on_view, ours = interleaved_minimum(
        [
            lambda: onnx.checker.check_model(plain),
            lambda: onnx.checker.check_model(view),
            lambda: S.check_model(model),
        ],
        repeat=150,
    )
    added = (ours - stock) / stock
    print("| measurement | time |\n|---|---|")
    print(f"| onnx.checker.check_model, {N} nodes + {N} initializers | {stock * 1e3:.1f} ms |")
    print(f"| onnx_struct.check_model, {N} nodes + {N} struct values | {ours * 1e3:.1f} ms |")
    print(f"| of which onnx.checker.check_model on the stock view | {on_view * 1e3:.1f} ms |")
    print(f"| added / stock (goal <= 1.0) | {added:.2f} |")
    print(f"| onnx_struct's own work / stock checker on the view | {(ours - on_view) / on_view:.2f} |")


def parts(rounds: int = 150) -> None:
    """One check_model call taken apart in the order it runs (the checker's own steps, so this
    follows its internals): the minimum of each part over ``rounds`` calls, and whole calls."""
    model, times = build(), {}
    plain = plain_model(model)
    for _ in range(rounds):
        _one_call(model, plain, times)
    print("| part | ms (minimum) | ms (median) |\n|---|---:|---:|")
    for part, values in times.items():
        values.sort()
        print(f"| {part} | {values[0] * 1e3:.2f} | {values[len(values) // 2] * 1e3:.2f} |")


def _one_call(model: onnx.ModelProto, plain: onnx.ModelProto, times: dict[str, list[float]]) -> None:
    def timed(part: str, function, *args):
        start = time.perf_counter()
        result = function(*args)
        times.setdefault(part, []).append(time.perf_counter() - start)
        return result

    loaded = timed("load: serialize the onnx.ModelProto, parse it into the overlay", _parsed, model)
    graph = loaded.proto.graph
    counts = (len(graph.node), len(graph.struct_initializer))
    scan = timed("wire scan of the serialized model", wire.scan_model, loaded.serialized, counts)
    scan_model, wire.scan_model = wire.scan_model, lambda *_: scan  # the checker's own scan is the one timed above
    try:
        check = timed("walk for struct parts (the nodes the scan names)", checker._Checker, loaded)
    finally:
        wire.scan_model = scan_model
    timed("declarations: size, decoder policy, binding, logical type", _declarations, check)
    timed("struct value rules", check.check_values)
    timed("external tensors", check.check_external_tensors)
    timed("graph rules: types, names, references, consumers, local functions", check.check_graph_rules)
    view = timed("the view's bytes", checker_view, loaded, [], False, False, list(check.value_names))
    timed("onnx.checker.check_model on the view", checker._stock_check_model, view)
    assert not check.diagnostics, check.diagnostics
    held = [loaded, check]
    del loaded, check
    timed("freeing the parsed model", held.clear)
    timed("onnx_struct.check_model, whole call", S.check_model, model)
    timed("onnx.checker.check_model, plain model", onnx.checker.check_model, plain)


def _parsed(model):
    loaded = load(model)
    loaded.proto  # noqa: B018 - parsed here, to be timed
    return loaded


def _declarations(check) -> None:
    for i, declaration in enumerate(check.proto.struct_types):
        check.check_root(declaration, check.table.path(i), i)


if __name__ == "__main__":
    parts() if "--parts" in sys.argv else main()
