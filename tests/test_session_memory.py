"""Peak RSS of creating an ``InferenceSession`` over quantized weights (issue 12), in a child.

Two Q4_0 weights of 4096 x 4096 (18 MiB of payload) in an external file, the moderate size of
docs/benchmarks.md ("Session memory"). The child (tests/adversarial/bounded.py: CPU and address
space limits) imports onnxruntime next to onnx_struct and numpy, reads its VmHWM (the baseline
the goal's 100 MiB is for, 64 MiB here), creates the session and reads VmHWM again (VmHWM, not
ru_maxrss: a child's ru_maxrss starts from its parent's RSS at fork).

The goal is ``peak <= 1.5 x payload + 100 MiB``: 1.5 x payload + 36 MiB above this machine's
baseline (63 MiB). Measured: +60 MiB, with the repacked arrays going to onnxruntime through a
temporary external-data file; +82 MiB when they went over in memory (onnxruntime's copy of them
while it loads, docs/execution.md "Memory"), +152 MiB before that. The bound, 1.5 x payload + 45
MiB above the baseline (72 MiB), fails on a return of the in-memory copy, of the weights'
serialized copy (+20 MiB) or of the payload kept in memory (+18 MiB).
"""

from __future__ import annotations

import pathlib

import pytest
from adversarial.bounded import run_bounded

# Every test here starts a child process (tests/support/tiers.py).
pytestmark = pytest.mark.slow

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
K = N = 4096
LAYERS = 2

CHILD = r"""
import onnxruntime  # the baseline: onnx_struct, onnxruntime and numpy imported

def peak_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:"))

baseline = peak_mib()
session = S.InferenceSession(ARG["path"])
peak = peak_mib()
assert peak - baseline <= ARG["allowance"], (
    f"peak RSS {peak:.0f} MiB is {peak - baseline:.0f} MiB above the imports' {baseline:.0f} MiB; "
    f"allowed {ARG['allowance']:.0f}"
)
"""


# (format, where the payloads are): 2 x 4096x4096 Q4_0 in an external file (18 MiB), and inline Q8_0
# (34 MiB, the size at which holding the model's parse while repacking shows). Inline, the session
# reads the payloads from the model's own file once it is checked (runtime/file_backed.py):
# measured +85 MiB above the baseline against an allowance of 96; +99 while the parse held them,
# +119 while the checker's views also copied them.
CASES = [("Q4_0", "external"), ("Q8_0", "inline")]


@pytest.mark.parametrize(("name", "storage"), CASES)
def test_session_peak_rss_stays_near_the_quantized_bytes(tmp_path, monkeypatch, name, storage):
    # The benchmark's own model (y = sum_i x @ Transpose(W_i), W_i^T [N, K], random blocks with
    # finite scales), its payloads in one external file or inline.
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from bench_session_memory import build  # noqa: PLC0415 - a script of benchmarks/, found via sys.path

    path, nbytes = build(name, K, N, LAYERS, str(tmp_path), inline=storage == "inline")
    payload_mib = nbytes / 2**20
    outcome = run_bounded(CHILD, {"path": path, "allowance": 1.5 * payload_mib + 45}, cpu_seconds=30)
    assert outcome.error is None, outcome.message


OPTIONS_CHILD = CHILD.replace(
    'S.InferenceSession(ARG["path"])',
    'S.InferenceSession(ARG["path"], options() if ARG["options"] else None)',
).replace(
    "baseline = peak_mib()",
    "def options():\n"
    "    o = onnxruntime.SessionOptions()\n"
    "    o.intra_op_num_threads = 1  # the caller's way to set the thread count\n"
    "    return o\n"
    "\nbaseline = peak_mib()",
)


@pytest.mark.slow
@pytest.mark.parametrize("options", [False, True], ids=["own options", "caller's options"])
def test_a_callers_options_keep_the_memory_route(tmp_path, monkeypatch, options):
    """A caller's SessionOptions (here setting the thread count) take the same route: the goal
    ``peak <= 1.5 x payload + 100 MiB`` holds with and without them (+369 MiB against +116 MiB
    before, on 54 MiB of Q4_0)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from bench_session_memory import build  # noqa: PLC0415

    path, nbytes = build("Q4_0", K, N, LAYERS, str(tmp_path), inline=False)
    allowance = 1.5 * nbytes / 2**20 + 45
    outcome = run_bounded(OPTIONS_CHILD, {"path": path, "allowance": allowance, "options": options}, cpu_seconds=30)
    assert outcome.error is None, outcome.message


USED_CHILD = CHILD.replace(
    'S.InferenceSession(ARG["path"])', 'S.InferenceSession(ARG["path"], execution=ARG["execution"])'
)


@pytest.mark.slow
@pytest.mark.parametrize("execution", ["quantized", "decode"])
def test_only_the_weights_the_graph_reads_are_prepared(tmp_path, monkeypatch, execution):
    """Twelve Q4_0 weights of 6 MiB, one read by the graph (the README's GGUF snippet in small):
    the session grows by at most 150 MiB (every weight was decoded before: 72 MiB of payload,
    540 MiB as float32)."""
    import onnx  # noqa: PLC0415
    from onnx import helper as oh  # noqa: PLC0415

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from bench_session_memory import build  # noqa: PLC0415

    n = 2730  # 4096 x 2730 Q4_0: 6 MiB
    path, nbytes = build("Q4_0", K, n, 12, str(tmp_path), inline=False)
    assert 5.9 * 2**20 * 12 < nbytes < 6.1 * 2**20 * 12
    model = onnx.load(path, load_external_data=False)
    nodes = [node for node in model.graph.node if node.op_type != "Sum" and node.output[0] in ("W0t", "y0")]
    nodes[-1].output[0] = "y"
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    assert [node.input[0] for node in model.graph.node] == ["W0", "x"]
    onnx.save(model, path)
    del oh
    outcome = run_bounded(USED_CHILD, {"path": path, "allowance": 150, "execution": execution}, cpu_seconds=60)
    assert outcome.error is None, outcome.message
