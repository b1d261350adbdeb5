"""llama.cpp's own K-quant reference quantizers, called through ctypes, and the golden blocks.

The oracle is ``quantize_row_q{2..6}_K_ref`` in the ``libggml-base`` shared library that
llama-cpp-python installs (``llama_cpp/lib``), the same function ``llama_model_quantize`` calls
for these types without an importance matrix. This module needs only numpy, so it runs in a
llama-cpp-python environment without onnx_struct. Regenerate the checked-in golden blocks with::

    python tests/support/ggml_kquants.py            # in a venv with llama-cpp-python
    python tests/support/ggml_kquants.py --lib /path/to/libggml-base.so

which rewrites ``tests/data/kquant_golden/<TYPE>.npz`` (``x``: float32 input, ``blocks``: the
bytes ggml wrote, ``library``: the file name of the library that wrote them).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
from pathlib import Path

import numpy as np

QK_K = 256
BLOCK_BYTES = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}
GOLDEN_DIR = Path(__file__).resolve().parent.parent / "data" / "kquant_golden"
GOLDEN_TYPES = ("Q4_K", "Q5_K", "Q6_K", "Q3_K", "Q2_K")


def find_library() -> Path | None:
    """``libggml-base``: the file named by ``$GGML_BASE_LIBRARY``, else the installed
    llama-cpp-python's, else None."""
    if os.environ.get("GGML_BASE_LIBRARY"):
        return Path(os.environ["GGML_BASE_LIBRARY"])
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        found = sorted((Path(location) / "lib").glob("libggml-base.*"))
        if found:
            return found[0]
    return None


class Reference:
    """The ggml library at ``path``: ``quantize(name, x)`` is the bytes its reference quantizer writes."""

    def __init__(self, path: Path | str) -> None:
        self.library = ctypes.CDLL(str(path))
        self.path = Path(path)

    def quantize(self, name: str, x: np.ndarray) -> bytes:
        values = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        if values.size % QK_K:
            raise ValueError(f"{values.size} values are not whole blocks of {QK_K}")
        out = np.zeros(values.size // QK_K * BLOCK_BYTES[name], np.uint8)
        function = getattr(self.library, f"quantize_row_{name[:2].lower()}_K_ref")
        function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        function.restype = None
        function(values.ctypes.data, out.ctypes.data, values.size)
        return out.tobytes()


def hard_blocks(seed: int, rows: int = 32) -> np.ndarray:
    """``[rows, 256]`` float32, one block per row: the cases where ggml's branches and ties matter
    (zero, constant, zero sub-blocks, an outlier, integer ties, a +-max tie, tiny values whose
    FLOAT16 scale underflows, large values, all-positive, float32 extremes), then normal rows at
    varied scales."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, QK_K))
    x *= np.ldexp(1.0, rng.integers(-6, 6, (rows, 1)))
    x[0] = 0.0
    x[1] = 0.5
    x[2] = -0.25
    x[3, :32] = 0.0  # a zero sub-block in a normal block
    x[3, 32:48] = 0.0
    x[4, 17] = 40.0  # an outlier
    x[5] = rng.integers(-8, 9, QK_K)  # exact integers: rounding ties
    x[6, 0], x[6, 1] = 3.0, -3.0  # largest magnitude twice, with both signs
    x[6, 2:] = np.clip(x[6, 2:], -2.5, 2.5)
    x[7] *= 1e-7  # sub-block scales below FLOAT16's smallest subnormal
    x[8] *= 1e-4
    x[9] *= 3e3
    x[10] = np.abs(x[10]) + 1.0  # all positive: the minimum clamps to 0
    x[11] = -np.abs(x[11]) - 1.0
    x[12, ::3] = 0.0
    x[13, :128] = 1.0
    x[13, 128:] = rng.standard_normal(128) * 1e-3
    x[14] = np.round(x[14] * 4) / 4  # a coarse grid: many equal values
    x[15, 16:] = 0.0  # one non-zero sub-block
    # extremes: subnormal ranges (scales overflow to inf), sums that overflow float32
    x[16] *= 1e-38
    x[17] *= 1e15
    x[18] *= 1e30
    return x.astype(np.float32)


def write_golden(reference: Reference, directory: Path = GOLDEN_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for seed, name in enumerate(GOLDEN_TYPES):
        x = hard_blocks(seed)
        blocks = np.frombuffer(reference.quantize(name, x), np.uint8).reshape(len(x), -1)
        path = directory / f"{name}.npz"
        np.savez_compressed(path, x=x, blocks=blocks, library=np.array(reference.path.name))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lib", type=Path, help="libggml-base shared library (default: llama-cpp-python's)")
    args = parser.parse_args(argv)
    path = args.lib or find_library()
    if path is None:
        parser.error("llama-cpp-python is not installed here; pass --lib")
    for written in write_golden(Reference(path)):
        print(written)


if __name__ == "__main__":
    main()
