"""Issue 41 item 6: ``threads=1000`` (under MAX_INTRA_OP_THREADS) in a process limited to 4 GB of
address space: onnxruntime could not create its pool and the process hung. It is now a
ValidationError naming ``generate(threads)`` before any session exists, and a count that fits
still runs."""

from __future__ import annotations

import pytest

pytest.importorskip("gguf")

from support.llm import TinyLlama, write_gguf  # noqa: E402

from adversarial.bounded import run_bounded  # noqa: E402

pytestmark = pytest.mark.slow

CODE = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from onnx_struct.llm.generation import Generator
tokens = Generator(ARG["model"], threads=ARG["threads"]).generate([1, 2, 3], max_new_tokens=2, stop_at_eos=False).tokens
assert len(tokens) == 2
"""


def test_a_thread_pool_over_the_address_space_is_refused_not_hung(tmp_path):
    from onnx_struct.convert import convert

    write_gguf(tmp_path / "tiny.gguf", TinyLlama(n_layers=1, default_type="F32"))
    (tmp_path / "tiny.onnx").write_bytes(convert(tmp_path / "tiny.gguf", graph=True).SerializeToString())
    model = str(tmp_path / "tiny.onnx")
    refused = run_bounded(CODE, {"model": model, "threads": 1000}, cpu_seconds=60, memory_mib=1500)
    assert refused.is_validation_error, refused.traceback
    assert refused.path == "generate(threads)" and "address-space limit" in refused.message
    fits = run_bounded(CODE, {"model": model, "threads": 2}, cpu_seconds=60, memory_mib=1500)
    assert fits.error is None, fits.traceback
