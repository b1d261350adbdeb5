"""The benchmark scripts stay runnable (tiny sizes; no time is asserted), and the peer process
that times gguf-py reports its own timings and raises its errors here."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

# Every test here starts a child process (tests/support/tiers.py).
pytestmark = pytest.mark.slow

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
pytest.importorskip("gguf")


def test_bench_formats_reports_a_ratio_per_format():
    command = [sys.executable, str(BENCHMARKS / "bench_formats.py"), "--rows", "64", "--cols", "512", "--repeat", "1"]
    result = subprocess.run(
        [*command, "--only", "Q4_0,Q6_K", "--encode"], capture_output=True, text=True, timeout=600, check=True
    )
    rows = {line.split("|")[1].strip(): line for line in result.stdout.splitlines() if line.startswith("| Q")}
    assert set(rows) == {"Q4_0", "Q6_K"}, result.stdout
    for line in rows.values():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert all(c.endswith("x") and float(c[:-1]) > 0 for c in cells[5:9]), line  # decode table
    assert "| format | encode (ms)" in result.stdout  # Q4_0 has a gguf-py quantizer


@pytest.mark.parametrize("script", ["bench_view.py", "bench_check.py", "bench_decode.py"])
def test_the_quick_benchmarks_run_and_print_a_table(script):
    """These run at their real sizes in a few seconds: an API change that breaks one (as pack's
    fill_missing once did for bench_view) fails here, not in the next benchmark run."""
    if script == "bench_view.py":  # its peers come with the bench extra
        pytest.importorskip("construct")
        pytest.importorskip("bitstruct")
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script)], capture_output=True, text=True, timeout=600, cwd=BENCHMARKS
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "|---" in result.stdout.replace(" ", "") or "| ---" in result.stdout, result.stdout[-2000:]


def test_the_check_benchmark_takes_one_call_apart():
    """``bench_check.py --parts`` follows the checker's internals: a change there breaks it here."""
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_check.py"), "--parts"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=BENCHMARKS,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| wire scan of the serialized model |" in result.stdout, result.stdout[-2000:]


@pytest.fixture
def peer_module(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the spawned child gets this sys.path too
    import _peer  # noqa: PLC0415

    return _peer


@pytest.mark.parametrize("reuse_memory", [False, True])
def test_peer_process_times_calls_and_raises_their_errors(peer_module, tmp_path, reuse_memory):
    values = np.arange(12, dtype=np.float32)
    values.tofile(tmp_path / "a.bin")
    with peer_module.PeerProcess(reuse_memory=reuse_memory) as peer:
        peer.load("a", str(tmp_path / "a.bin"), "float32", (3, 4))
        timing = peer.time("numpy:sum", "a")
        assert isinstance(timing, peer_module.Timing) and timing.wall >= 0 and timing.cpu >= 0
        with pytest.raises(KeyError):
            peer.time("numpy:sum", "not loaded")
        with pytest.raises(ValueError):  # 12 values cannot be 5 x 5: the child's reshape fails
            peer.load("b", str(tmp_path / "a.bin"), "float32", (5, 5))
        assert peer.time("numpy:sum", "a").wall >= 0  # still serving after errors


class Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("cannot travel")
        self.callback = lambda: None  # lambdas do not pickle


def raise_unpicklable(array) -> None:  # called in the peer process
    raise Unpicklable()


def raise_system_exit(array) -> None:
    raise SystemExit(3)


def test_peer_process_reports_errors_that_cannot_be_pickled_and_survives(peer_module, tmp_path):
    np.zeros(4, np.float32).tofile(tmp_path / "z.bin")
    with peer_module.PeerProcess() as peer:
        peer.load("z", str(tmp_path / "z.bin"), "float32", (4,))
        with pytest.raises(RuntimeError, match="Unpicklable: cannot travel"):
            peer.time("test_benchmarks:raise_unpicklable", "z")
        with pytest.raises(SystemExit):
            peer.time("test_benchmarks:raise_system_exit", "z")
        assert peer.time("numpy:sum", "z").wall >= 0


def test_a_dead_peer_is_an_error_and_closing_it_is_not(peer_module):
    peer = peer_module.PeerProcess()
    peer._process.kill()
    peer._process.join()
    with pytest.raises(RuntimeError, match="peer process died"):
        peer.time("numpy:sum", "anything")
    peer.close()
    assert not peer._process.is_alive()


def test_bench_execution_reports_ratios():
    command = [sys.executable, str(BENCHMARKS / "bench_execution.py"), "--shapes", "512x256", "--layers", "1"]
    result = subprocess.run(
        [*command, "--formats", "Q4_K", "--repeat", "1", "--no-rss"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("| Q4_K")]
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    assert cells[:3] == ["Q4_K", "512x256", "4"], row
    assert sum(c.endswith("x") and float(c[:-1]) > 0 for c in cells) >= 2, row  # float32 / ours at 1 and 32 rows
    assert float(cells[-4]) < 1e-5, row  # error at accuracy level 0


def test_bench_session_memory_reports_a_row_per_case():
    command = [sys.executable, str(BENCHMARKS / "bench_session_memory.py"), "--formats", "Q4_0", "--cases", "512x256x1"]
    result = subprocess.run([*command, "--in-memory"], capture_output=True, text=True, timeout=600, check=True)
    rows = [line for line in result.stdout.splitlines() if line.startswith("| Q4_0")]
    assert [row.split("|")[3].strip() for row in rows] == ["ext", "inline"], result.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert float(cells[5]) >= float(cells[4]) > 0, row  # peak >= the imports' baseline
        assert float(cells[14]) >= float(cells[4]), row  # the in-memory route's onnxruntime phase


@pytest.mark.slow
def test_the_plain_model_benchmark_runs_and_prints_its_table():
    """``bench_check.py --plain --quick``: the wheel's model files and a 10 MB model (seconds)."""
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_check.py"), "--plain", "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=BENCHMARKS,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [
        line for line in result.stdout.splitlines() if line.startswith("| check_model") or line.startswith("| infer")
    ]
    assert len(rows) == 7, result.stdout


def test_bench_quantize_memory_reports_peak_and_goal_per_case():
    command = [sys.executable, str(BENCHMARKS / "bench_quantize_memory.py"), "--quick"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and "MiB |" not in line]
    formats = [row.split("|")[2].strip() for row in rows]
    assert formats == ["Q4_0", "Q4_0", "Q4_0", "Q8_0", "F32", "F32", "Q8_0"], result.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        goal, peak, ratio = float(cells[2]), float(cells[3]), float(cells[4])
        assert goal > 200 and peak > 50 and abs(ratio - peak / goal) < 0.01, row


def test_the_process_clock_counts_from_the_process_start():
    """bench_llm.py's "first token from process start": a child that sleeps 0.3 s after starting
    reads at least that much, and not the machine's uptime."""
    if not pathlib.Path("/proc/self/stat").exists():
        pytest.skip("no /proc")
    code = "import time; time.sleep(0.3); from _process_clock import since_process_start; print(since_process_start())"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=BENCHMARKS, capture_output=True, text=True, timeout=60, check=True
    )
    seconds = float(result.stdout)
    assert 0.3 <= seconds < 30, seconds


def test_the_floor_runs_the_saved_graph_to_the_generators_tokens(tmp_path):
    """bench_llm.py's floor: the graph onnxruntime holds inside Generator, saved, then run by
    _ort_floor.py alone (no onnx_struct) with its own KV-cache loop, gives the Generator's greedy
    tokens: the floor measures the same graph, not another."""
    pytest.importorskip("tokenizers")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_llm
    finally:
        sys.path.remove(str(BENCHMARKS))
    import onnx
    from support.llm import TinyLlama, spm_vocab, write_gguf

    from onnx_struct.convert import convert
    from onnx_struct.llm.generation import Generator

    write_gguf(tmp_path / "tiny.gguf", TinyLlama(**spm_vocab(), seed=3))
    onnx.save(convert(tmp_path / "tiny.gguf", graph=True, reference=True), tmp_path / "tiny.onnx")
    ids = [1, 40, 7, 19, 88, 3]
    expected = Generator(tmp_path / "tiny.onnx").generate(ids, max_new_tokens=bench_llm.NEW_TOKENS, stop_at_eos=False)
    saved = bench_llm.run_ours(tmp_path / "tiny.onnx", 1, [], "save")["saved"]
    floor = bench_llm.run_floor(pathlib.Path(saved), 1, ids)
    assert floor["tokens"] == expected.tokens
    assert floor["rss"] > 2**20 and floor["first_token_seconds"] >= floor["session_seconds"] > 0


def test_the_kernel_benchmark_counts_a_family_tokens_products_and_bytes():
    """bench_matmul_nbits.py --shape family --mix q4_k: every product of one token of bench_llm.py's
    family shape (16 layers x q, k, v, o, gate, up, down, and the head), Q4_K matrices and a Q6_K
    head; bytes by hand: 180,355,072 Q4_K weights x 144 / 256 + 32,768,000 Q6_K weights x 210 / 256."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_matmul_nbits
    finally:
        sys.path.remove(str(BENCHMARKS))
    shapes = bench_matmul_nbits.token_shapes(16, "family", "q4_k")
    assert sum(c for _, _, c, _ in shapes) == 16 * 7 + 1
    assert shapes[-1] == [32000, 1024, 1, "Q6_K"]
    q4_k = sum(n * k * c for n, k, c, t in shapes if t == "Q4_K")
    assert q4_k == 180_355_072
    assert q4_k // 256 * 144 + 32_768_000 // 256 * 210 == 128_329_728
    assert bench_matmul_nbits.token_shapes(22)[0] == [2048, 2048, 44, "Q4_0"]  # the 1.1B's, as before
