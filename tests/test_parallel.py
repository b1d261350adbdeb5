"""Block-range parallel decode (onnx_struct.parallel) and the recycled output buffers it writes into
(onnx_struct.buffer_pool).

The oracle for a split decode is the same value decoded whole, in one session over every block
(which the format tests check bit for bit against gguf-py, ml_dtypes and numpy): splitting must not
change a bit, NaN payloads included. The thresholds are lowered so that small tensors split into
many ranges.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import warnings
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import helper as oh
from support.models import base_model

from onnx_struct import add_struct_values, formats, limits
from onnx_struct.errors import ValidationError
from onnx_struct.functions import models as function_models
from onnx_struct.payload import buffer_pool
from onnx_struct.runtime import parallel
from onnx_struct.runtime import runners as runtime
from onnx_struct.runtime.codec import decode
from onnx_struct.schema.model import from_onnx


@pytest.fixture(autouse=True)
def fresh_pool():
    buffer_pool.clear()
    yield
    buffer_pool.clear()


@pytest.fixture
def splits(monkeypatch):
    """Split every decode into ranges of about one block row on 2 threads; yields the list of
    range counts of the decodes that split."""
    monkeypatch.setattr(parallel, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(parallel, "RANGE_ELEMENTS", 1)
    monkeypatch.setattr(runtime, "INTRA_OP_THREADS", 2)
    counts: list[int] = []
    run_all = parallel._run_all

    def counting(jobs, flat_out, threads):
        counts.append(len(jobs))
        return run_all(jobs, flat_out, threads)

    monkeypatch.setattr(parallel, "_run_all", counting)
    return counts


def whole(monkeypatch, value, model) -> np.ndarray:
    with monkeypatch.context() as m:
        m.setattr(parallel, "MIN_ELEMENTS", 1 << 62)
        return decode(value, model)


def random_value(name: str, shape, seed: int = 0):
    fmt = formats.get(name)
    payload = np.random.default_rng(seed).integers(0, 256, fmt.num_blocks(shape) * fmt.bytes_per_block, dtype=np.uint8)
    model = base_model()
    add_struct_values(model, fmt.make_value(model, "w", shape, payload.tobytes()))
    return "w", model


def bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(np.uint32)


GGUF = [n for n in formats.names() if formats.get(n).family == "gguf"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # formats onnxruntime cannot run fall back
@pytest.mark.parametrize("name", formats.names())
def test_split_decode_is_bit_identical_to_whole(name, splits, monkeypatch):
    fmt = formats.get(name)
    value, model = random_value(name, (7, 2 * fmt.block_size))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = whole(monkeypatch, value, model)
    in_onnxruntime = not any("ReferenceEvaluator" in str(w.message) for w in caught)
    assert not splits
    actual = decode(value, model)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_array_equal(bits(actual), bits(expected))
    if name in GGUF and in_onnxruntime:  # byte-sized leaves: these must have split, by rows
        assert splits == [7]


@pytest.mark.parametrize("shape", [(96 * 32,), (3, 5, 64), (1, 4096), (9, 32)])
def test_split_along_the_first_axis_of_any_rank(shape, splits, monkeypatch):
    value, model = random_value("Q4_0", shape, seed=1)
    expected = whole(monkeypatch, value, model)
    np.testing.assert_array_equal(bits(decode(value, model)), bits(expected))
    # a 1-D value splits by blocks; otherwise by rows of the first axis (one row: nothing to split)
    assert splits == ([96] if len(shape) == 1 else [shape[0]] if shape[0] > 1 else [])


def test_row_ranges_by_hand():
    # 5 rows of 2 blocks in 2 ranges: rows [0, 2) and [2, 5), blocks [0, 4) and [4, 10)
    assert parallel._row_ranges((5, 64), 32, 2) == [((2, 64), 0, 4), ((3, 64), 4, 10)]
    # 1-D: 3 blocks in 2 ranges
    assert parallel._row_ranges((96,), 32, 2) == [((32,), 0, 1), ((64,), 1, 3)]
    # more ranges asked than rows: one per row, none empty
    assert parallel._row_ranges((2, 3, 32), 32, 5) == [((1, 3, 32), 0, 3), ((1, 3, 32), 3, 6)]


def test_edited_decoder_runs_whole(splits):
    """Same name and domain as the registry's decoder, a different body: never split, and its own
    result (here doubled) is what decode returns."""
    value, model = random_value("Q8_0", (4, 64))
    plain = decode(value, model)
    assert splits == [4]
    edited = from_onnx(model)
    decoder = edited.struct_types[-1].decoder
    final = decoder.node[-1]
    before = final.output[0] + "_before_doubling"
    two = oh.make_node("Constant", [], ["_two"], value=onnx.numpy_helper.from_array(np.float32(2), "_two"))
    decoder.node.extend([two, oh.make_node("Mul", [before, "_two"], [final.output[0]])])
    final.output[0] = before
    result = decode(value, edited)
    assert splits == [4]  # not split again
    np.testing.assert_array_equal(result, plain * 2)


def test_a_registered_format_name_with_another_decoder_decodes_with_its_own(splits):
    """A root named like a registered format's value ("Q8_0[4,64]") whose decoder is not the
    registry's (its own function, here the registry's body doubled under another name): never
    split, and its own decoder's result is what decode returns."""
    value, model = random_value("Q8_0", (4, 64))
    plain = decode(value, model)
    assert splits == [4]
    mine = from_onnx(model)
    root = mine.struct_types[-1]
    assert root.name == "Q8_0[4,64]"
    decoder = root.decoder
    decoder.name = "my_decoder"
    final = decoder.node[-1]
    before = final.output[0] + "_before_doubling"
    two = oh.make_node("Constant", [], ["_two"], value=onnx.numpy_helper.from_array(np.float32(2), "_two"))
    decoder.node.extend([two, oh.make_node("Mul", [before, "_two"], [final.output[0]])])
    final.output[0] = before
    result = decode(value, mine)
    assert splits == [4]  # not split again
    np.testing.assert_array_equal(result, plain * 2)


@pytest.mark.parametrize("name", ["my_weights", "Q4_0[99999999999999999999,32]", "Q4_0[4,128]", "Q9_9[8,64]"])
def test_the_root_name_plays_no_part(splits, name):
    """The root's name is free text: renamed (an absurd shape, another shape of the same element
    count, an unknown format, no format at all), the registry's own decoder still splits by the
    shape it was built for, with the same bits, and no name is an error."""
    value, model = random_value("Q4_0", (8, 64))
    expected = decode(value, model)
    assert splits == [8]
    renamed = from_onnx(model)
    renamed.struct_types[-1].name = name
    result = decode(value, renamed)
    assert splits == [8, 8] and result.shape == (8, 64)
    np.testing.assert_array_equal(bits(result), bits(expected))


def test_a_format_not_marked_block_wise_runs_whole(splits, monkeypatch):
    value, model = random_value("Q4_0", (4, 64))
    q4_0 = formats.get("Q4_0")
    monkeypatch.setattr(
        formats.base, "_BY_DECODER", {("onnx_struct.formats", "decode_Q4_0"): replace(q4_0, block_ranges=False)}
    )
    decode(value, model)
    assert splits == []


@pytest.mark.parametrize("name", formats.names())
def test_every_registered_decoder_is_recognised_with_its_shape(name, monkeypatch):
    """Block-range eligibility of every registered format (what the name-based lookup gave
    before): its decoder for a shape is found by (domain, name) with that shape."""
    monkeypatch.setattr(parallel, "MIN_ELEMENTS", 1)
    fmt = formats.get(name)
    shape = (3, 2 * fmt.block_size)
    declaration = fmt.root_declaration(shape, 0)
    assert parallel._registered_format(declaration, declaration.decoder, 6) == (fmt, shape)
    assert parallel._registered_format(declaration, declaration.decoder, 5) is None  # not the payload's blocks


def test_one_thread_or_the_reference_evaluator_never_splits(splits, monkeypatch):
    value, model = random_value("Q4_0", (4, 64))
    monkeypatch.setattr(runtime, "INTRA_OP_THREADS", 1)
    single = decode(value, model)
    monkeypatch.setattr(runtime, "INTRA_OP_THREADS", 2)
    reference = decode(value, model, runtime="reference")
    assert splits == []
    np.testing.assert_array_equal(bits(single), bits(reference))


def test_a_failing_range_raises_after_all_threads_stop():
    ran: list[int] = []

    class Runner:
        def __init__(self, index):
            self.index = index

        def run_into(self, feeds, out):
            ran.append(self.index)
            if self.index == 1:
                raise ValidationError("r", "range 1 failed")
            out[...] = self.index

    jobs = [(Runner(i), {}, (2,), 2 * i) for i in range(6)]
    out = np.zeros(12, np.float32)
    with pytest.raises(ValidationError, match="range 1 failed"):
        parallel._run_all(jobs, out, 2)
    assert 1 in ran and len(ran) == len(set(ran))  # no range ran twice; later ranges may be skipped


# ---------------------------------------------------------------------------------- buffer pool
def test_a_released_buffer_is_reused():
    first = buffer_pool.empty((1000,), np.float32)
    address = first.ctypes.data
    del first
    gc.collect()
    assert buffer_pool.free_bytes() == 4000
    again = buffer_pool.empty((10, 100), np.float32)  # same byte count, any shape
    assert again.ctypes.data == address and again.shape == (10, 100) and again.flags.writeable
    assert buffer_pool.free_bytes() == 0


def test_a_buffer_reachable_from_a_view_is_not_reused():
    first = buffer_pool.empty((1000,), np.float32)
    first[:] = 1.0
    window = first[10:20].reshape(2, 5)
    address = first.ctypes.data
    del first
    gc.collect()
    assert buffer_pool.free_bytes() == 0
    other = buffer_pool.empty((1000,), np.float32)
    other[:] = 2.0
    assert other.ctypes.data != address
    np.testing.assert_array_equal(window, np.ones((2, 5), np.float32))
    del window
    gc.collect()
    assert buffer_pool.free_bytes() == 4000


def test_free_buffers_stay_within_budget(monkeypatch):
    monkeypatch.setattr(limits, "MAX_FREE_BUFFER_BYTES", 5000)
    arrays = [buffer_pool.empty((1000,), np.float32) for _ in range(3)]
    del arrays
    gc.collect()
    assert buffer_pool.free_bytes() == 4000  # two would be 8000 bytes: the older ones are dropped
    other_size = buffer_pool.empty((999,), np.float32)
    assert other_size.nbytes == 3996
    runtime.clear_cache()  # clears the pool too
    assert buffer_pool.free_bytes() == 0


def test_decode_results_never_share_memory_while_alive(splits):
    value, model = random_value("Q4_0", (8, 64))
    kept = decode(value, model)
    snapshot = kept.copy()
    other_value, other_model = random_value("Q4_0", (8, 64), seed=5)
    second = decode(other_value, other_model)
    assert not np.shares_memory(kept, second)
    np.testing.assert_array_equal(bits(kept), bits(snapshot))
    address = second.ctypes.data
    del second
    gc.collect()
    assert decode(value, model).ctypes.data == address  # recycled once released
    assert splits == [8, 8, 8]


def test_a_format_onnxruntime_cannot_run_warns_once_and_decodes_whole(splits, monkeypatch):
    """OCP MXFP6's decoder casts from FLOAT6, which onnxruntime 1.32 cannot load: the range
    sessions are not built with a fallback, so the whole decode falls back, warning once."""
    value, model = random_value("OCP_MXFP6_E2M3", (4, 64))
    with pytest.warns(RuntimeWarning) as caught:
        result = decode(value, model)
    fallbacks = [w for w in caught if "ReferenceEvaluator" in str(w.message)]
    if not fallbacks:
        pytest.skip("this onnxruntime runs FLOAT6 casts")
    assert len(fallbacks) == 1 and splits == []
    np.testing.assert_array_equal(bits(result), bits(decode(value, model, runtime="reference")))


def test_concurrent_split_decodes_from_several_threads(splits, monkeypatch):
    """Callers in several threads share the helper threads and the range sessions."""
    values = [random_value(name, (6, 256), seed=seed) for seed, name in enumerate(["Q4_0", "Q6_K", "Q4_0", "IQ2_XS"])]
    expected = [whole(monkeypatch, value, model) for value, model in values]
    results: list = [None] * len(values)

    def work(index: int) -> None:
        for _ in range(5):
            results[index] = decode(*values[index])

    workers = [threading.Thread(target=work, args=(i,)) for i in range(len(values))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for result, wanted in zip(results, expected, strict=True):
        np.testing.assert_array_equal(bits(result), bits(wanted))
    assert len(splits) == 5 * len(values)


def test_released_buffers_are_trimmed_without_a_new_request(monkeypatch):
    monkeypatch.setattr(limits, "MAX_FREE_BUFFER_BYTES", 5000)
    arrays = [buffer_pool.empty((1000,), np.float32) for _ in range(3)]
    del arrays
    gc.collect()
    # filed and trimmed by the releases themselves, not left queued until the next request
    assert not buffer_pool._returned and buffer_pool._free_bytes == 4000


def test_a_runner_without_fallback_refuses_to_run():
    """onnxruntime 1.32 has no FLOAT6 type: a runner built with fallback=False is unavailable,
    and says so instead of running nothing."""
    from onnx_struct.formats.function_builder import FunctionBuilder  # noqa: PLC0415

    b = FunctionBuilder("to_float6_and_back", ["x"], opset=28)
    function = b.build(b.cast(b.cast("x", onnx.TensorProto.FLOAT6E2M3), onnx.TensorProto.FLOAT, out="y"))
    inputs = [("x", function_models.tensor_type(onnx.TensorProto.FLOAT, (4,)))]
    runner = runtime.cached_runner(function, "f", inputs, [], "onnxruntime", threads=1, fallback=False)
    if runner.runtime == "onnxruntime":
        pytest.skip("this onnxruntime runs FLOAT6 casts")
    assert runner.output_shape() is None and runner.output_dtype() is None
    feed = runtime.Feed(onnx.TensorProto.FLOAT, (4,), array=np.ones(4, np.float32))
    with pytest.raises(ValidationError, match="cannot run this function"):
        runner.run({"x": feed})


SHUTDOWN_SCRIPT = """
import atexit
import numpy as np, onnx
from onnx_struct import formats
from onnx_struct.runtime import parallel
from onnx_struct.runtime import runners as runtime
from onnx_struct.runtime.codec import decode
runtime.INTRA_OP_THREADS = 2
fmt = formats.get("Q4_0")
payload = np.random.default_rng(0).integers(0, 256, 16 * fmt.bytes_per_block, dtype=np.uint8)
model = onnx.ModelProto()
value = fmt.make_value(model, "w", (8, 64), payload.tobytes())
expected = decode(value, model).copy()  # whole: below MIN_ELEMENTS
parallel.MIN_ELEMENTS, parallel.RANGE_ELEMENTS = 1, 1

def at_exit():
    calls = []
    run_all = parallel._run_all
    parallel._run_all = lambda *args: (calls.append(1), run_all(*args))[1]
    result = decode(value, model)
    same = np.array_equal(result.view(np.uint32), expected.view(np.uint32))
    print("split" if calls else "whole", "same" if same else "different")

atexit.register(at_exit)
if WARM:
    decode(value, model)  # the helper threads exist, then shut down before at_exit
"""


@pytest.mark.slow
@pytest.mark.parametrize("warm", [False, True])
def test_decoding_while_the_interpreter_shuts_down(warm):
    """An atexit handler may decode: the helper threads are gone (or cannot start), so the
    calling thread decodes every range itself."""
    script = SHUTDOWN_SCRIPT.replace("WARM", str(warm))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["split", "same"], result.stdout + result.stderr
