"""llama.cpp's own K-quant reference quantizers, called through ctypes, and the golden blocks.

The oracle is ``ggml_quantize_chunk`` in the ``libggml-base`` shared library that
llama-cpp-python installs (``llama_cpp/lib``): the function ``llama_model_quantize`` calls for
each tensor, which for these types without an importance matrix runs ``quantize_row_q*_K_ref``. This module needs only numpy, so it runs in a
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
GGML_TYPE = {"Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}  # enum ggml_type
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
    """The ggml library at ``path``: ``quantize(name, x)`` is the bytes it writes for ``x``."""

    def __init__(self, path: Path | str) -> None:
        self.library = ctypes.CDLL(str(path))
        self.path = Path(path)

    def quantize(self, name: str, x: np.ndarray) -> bytes:
        """``ggml_quantize_chunk`` over the rows of ``x`` (its last axis, whole blocks), with no
        importance matrix: what ``llama_model_quantize`` calls per tensor, which for these
        types is ``quantize_row_q*_K_ref`` on the whole chunk."""
        values = np.ascontiguousarray(x, dtype=np.float32)
        per_row = values.shape[-1]
        if per_row % QK_K:
            raise ValueError(f"rows of {per_row} values are not whole blocks of {QK_K}")
        out = np.zeros(values.size // QK_K * BLOCK_BYTES[name], np.uint8)
        chunk = self.library.ggml_quantize_chunk
        chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
        chunk.argtypes += [ctypes.c_int64, ctypes.c_void_p]
        chunk.restype = ctypes.c_size_t
        written = chunk(GGML_TYPE[name], values.ctypes.data, out.ctypes.data, 0, values.size // per_row, per_row, None)
        if written != out.size:
            raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, not {out.size}")
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


# llama_model_quantize's ftype whose base type each K-quant is (a llama attn_q tensor gets it)
MODEL_FTYPE = {"Q2_K": 10, "Q3_K": 12, "Q4_K": 15, "Q5_K": 17, "Q6_K": 18}  # _M mixes, Q2_K, Q6_K


def model_quantize(name: str, x: np.ndarray, directory: Path) -> bytes:
    """The bytes ``llama_model_quantize`` writes for ``x [rows, cols]`` as the one tensor
    ``blk.0.attn_q.weight`` of an F32 llama GGUF (written with gguf-py), quantized with the
    ftype whose base type is ``name``; needs llama-cpp-python and gguf. Raises RuntimeError when
    llama.cpp refuses (its row validation rejects blocks with inf scales) or picks another type."""
    import gguf
    import llama_cpp

    rows, cols = x.shape
    source, target = directory / "f32.gguf", directory / f"{name}.gguf"
    writer = gguf.GGUFWriter(str(source), "llama")
    writer.add_context_length(128)
    writer.add_embedding_length(cols)
    writer.add_block_count(1)
    writer.add_feed_forward_length(rows)
    writer.add_head_count(8)
    writer.add_head_count_kv(8)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)
    writer.add_tensor("blk.0.attn_q.weight", np.ascontiguousarray(x, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = MODEL_FTYPE[name]
    if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize refused the tensor as {name}")
    (tensor,) = gguf.GGUFReader(str(target)).tensors
    if tensor.tensor_type.name != name:
        raise RuntimeError(f"llama_model_quantize wrote {tensor.tensor_type.name}, not {name}")
    return np.asarray(tensor.data).tobytes()


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
