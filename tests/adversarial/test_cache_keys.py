"""The memo of decoder analyses and the cache of decoder runners are keyed by a digest of the
decoder, its input types and its constants. Fed in bare, one after the other, a decoder with a
trailing unknown field ``0x08 0x01`` and a constant ``[N]`` gave the same bytes as the decoder
without it and a constant ``[1, N]`` (whose dims start with ``0x08 0x01``): found by a red-team
pass. One declaration then took the other's analysis (and passed the policy), or its runner
(and decoded to the other's shape). Each in a child: the caches live per process."""

from __future__ import annotations

import pytest

from adversarial.bounded import run_bounded

# Every test here starts a child process (tests/support/tiers.py).
pytestmark = pytest.mark.slow

COLLIDING = """
from onnx import TensorProto, helper as oh
N = ARG["n"]
nodes = [oh.make_node("Flatten", ["c"], ["flat"], axis=1), oh.make_node("Mul", ["flat", "c"], ["y"])]
F = oh.make_function("t.dec", "f", ["c"], ["y"], nodes, [oh.make_opsetid("", 21)])
F_TAIL = onnx.FunctionProto.FromString(F.SerializeToString(deterministic=True) + b"\\x08\\x01")
A = S.make_structure([S.make_constant_field("c", np.ones((1, N), np.float32))], decoder=F)  # y: [1, N]
B = S.make_structure([S.make_constant_field("c", np.ones((N,), np.float32))], decoder=F_TAIL)  # y: [N, N]

def model(*declarations):
    X, Y = (oh.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in "XY")
    graph = oh.make_graph([oh.make_node("Identity", ["X"], ["Y"])], "g", [X], [Y])
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    indices = S.add_struct_types(m, *declarations)
    S.add_struct_values(m, *[S.make_struct_value(f"v{i}", i, raw_data=b"") for i in indices])
    return m
"""


@pytest.mark.parametrize("models", ["one model", "two models"])
def test_a_colliding_declaration_does_not_take_anothers_analysis(models):
    """B's decoder makes N x N floats (256 MiB at N = 8192, beyond the policy's budget): refused
    alone, it passed after A, in the same model (keys by content) or, keys by path, in a model
    checked before it."""
    code = COLLIDING + (
        "S.check_model(model(A, B))"
        if models == "one model"
        else "S.check_model(model(A))  # valid: [1, N]\nS.check_model(model(B))"
    )
    out = run_bounded(code, {"n": 8192}, cpu_seconds=30, memory_mib=400)
    where = "struct_types[1]" if models == "one model" else "struct_types[0]"
    out.assert_validation_error(where, contains="budget")


def test_a_colliding_decoder_does_not_run_anothers_runner():
    """decode of B after decode of A returned A's [1, 4] (the runner cache's key collided)."""
    code = (
        COLLIDING
        + """
a = S.decode("v0", model(A))
b = S.decode("v0", model(B))
expected = np.ones((4, 1), np.float32) * np.ones(4, np.float32)  # numpy's broadcast of Flatten(c) * c
assert a.shape == (1, 4) and b.shape == expected.shape == (4, 4), (a.shape, b.shape)
raise S.ValidationError("done", "decoded apart")
"""
    )
    run_bounded(code, {"n": 4}, cpu_seconds=30, memory_mib=400).assert_validation_error("done")
