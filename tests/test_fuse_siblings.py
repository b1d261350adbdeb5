"""Sibling products fused (onnx_struct/lowering/execution/fuse.py): the quantized weights one input
multiplies run as one MatMulNBits and a Split, with the values of the separate products (the
gguf-py / hand-written decoders of test_affine as the oracle)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from test_affine import oracle, random_payload
from test_execution import assert_close_product

import onnx_struct as S
import onnx_struct.lowering.execution as execution
from onnx_struct import formats
from onnx_struct.lowering.execution import fuse
from onnx_struct.lowering.lower import lower_model

pytest.importorskip("onnxruntime")

K, ROWS = 256, 3
# (weight, input, format, N): q/k/v shapes on x, gate/up on h (another format), one more on h of a third
WEIGHTS = [
    ("Wq", "x", "Q4_1", 48),
    ("Wk", "x", "Q4_1", 16),
    ("Wv", "x", "Q4_1", 16),
    ("Wg", "h", "Q4_0", 32),
    ("Wu", "h", "Q4_0", 32),
    ("Wd", "h", "Q4_K", 24),
]


def sibling_model(weights=WEIGHTS) -> tuple[onnx.ModelProto, dict[str, bytes]]:
    nodes, outputs = [], []
    for w, x, _, n in weights:
        nodes += [
            oh.make_node("Transpose", [w], [f"{w}t"], perm=[1, 0]),
            oh.make_node("MatMul", [x, f"{w}t"], [f"y_{w}"]),
            oh.make_node("Neg", [f"y_{w}"], [f"r_{w}"]),  # a reader of each product's value
        ]
        outputs.append(oh.make_tensor_value_info(f"r_{w}", TensorProto.FLOAT, [ROWS, n]))
    inputs = [oh.make_tensor_value_info(x, TensorProto.FLOAT, [ROWS, K]) for x in ("x", "h")]
    model = oh.make_model(
        oh.make_graph(nodes, "g", inputs, outputs), opset_imports=[oh.make_opsetid("", 21)], ir_version=10
    )
    payloads = {}
    for seed, (w, _, name, n) in enumerate(weights):
        payloads[w] = random_payload(name, (n, K), seed, sane=True)
        S.add_struct_values(model, formats.get(name).make_value(model, w, (n, K), payloads[w]))
    return model, payloads


def feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {x: rng.standard_normal((ROWS, K)).astype(np.float32) for x in ("x", "h")}


def ops(session) -> Counter:
    return Counter(n.op_type for n in session.lowered.graph.node)


def test_siblings_of_one_format_run_as_one_product_with_the_oracles_values():
    model, payloads = sibling_model()
    session = S.InferenceSession(model, accuracy_level=0)
    # q/k/v (Q4_1: a minimum each) fused, gate/up (Q4_0) fused, the Q4_K one on h alone
    assert ops(session)["MatMulNBits"] == 3
    assert ops(session)["Split"] == 2
    inputs = feeds()
    results = dict(zip((o.name for o in model.graph.output), session.run(None, inputs), strict=True))
    for w, x, name, n in WEIGHTS:
        product = -results[f"r_{w}"]
        assert product.shape == (ROWS, n)
        assert_close_product(product, inputs[x], oracle(name, payloads[w], (n, K)))


@pytest.mark.parametrize("accuracy_level", [0, 4])
def test_fused_products_equal_the_separate_ones(accuracy_level, monkeypatch):
    model, _ = sibling_model()
    fused = S.InferenceSession(model, accuracy_level=accuracy_level)
    monkeypatch.setattr(execution, "fuse_sibling_products", lambda nodes, *_: nodes)
    separate = S.InferenceSession(model, accuracy_level=accuracy_level)
    assert ops(separate)["MatMulNBits"] == len(WEIGHTS) and ops(fused)["MatMulNBits"] == 3
    inputs = feeds()
    for a, b in zip(fused.run(None, inputs), separate.run(None, inputs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_a_product_alone_or_of_another_format_is_left_as_it_is():
    # one weight per input, and two formats on one input: nothing has a sibling
    weights = [("Wq", "x", "Q4_1", 48), ("Wg", "h", "Q4_0", 32), ("Wd", "h", "Q8_0", 24)]
    model, _ = sibling_model(weights)
    session = S.InferenceSession(model, accuracy_level=0)
    assert ops(session)["MatMulNBits"] == 3 and ops(session)["Split"] == 0


def test_the_fused_weights_replace_the_separate_ones_in_memory():
    """No array is held twice: the separate products' initializers and arrays are gone."""
    model, _ = sibling_model()
    lowered = lower_model(model, execution="quantized", accuracy_level=4).model  # the model's bytes: not fused
    assert Counter(n.op_type for n in lowered.graph.node)["MatMulNBits"] == len(WEIGHTS)
    session = S.InferenceSession(model)
    names = {t.name for t in session.lowered.graph.initializer}
    read = {name for node in session.lowered.graph.node for name in node.input}
    assert names <= read  # every initializer is read: none of the separate weights is left behind
    graph = session.lowered.graph
    defined = names | {i.name for i in graph.input}
    for node in graph.node:  # sorted: each input defined before its reader
        assert set(node.input) - {""} <= defined, node.name
        defined.update(node.output)


def test_a_group_is_fused_in_runs_within_the_size_bound(monkeypatch):
    # 8 KiB: Wq (Q4_1, 48 x 256: codes, scales, zero points, minimum, 9.6 KB) alone, Wk with Wv
    # (3.2 KB each) fused, Wg and Wu (Q4_0, 5 KB each) apart
    model, payloads = sibling_model()
    monkeypatch.setattr(fuse, "FUSED_MAX_BYTES", 8 << 10)
    session = S.InferenceSession(model, accuracy_level=0)
    assert ops(session)["MatMulNBits"] == 5 and ops(session)["Split"] == 1
    inputs = feeds()
    results = dict(zip((o.name for o in model.graph.output), session.run(None, inputs), strict=True))
    for w, x, name, n in WEIGHTS:
        assert_close_product(-results[f"r_{w}"], inputs[x], oracle(name, payloads[w], (n, K)))
