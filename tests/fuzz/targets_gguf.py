"""Byte-level fuzz target for ``from-gguf``: any bytes in, only ``ValidationError`` out.

``fuzz_from_gguf(data)`` writes ``data`` to a temporary .gguf and converts it both ways (tensors
copied inline, and referenced with ``reference=True``); whatever either conversion returns must
then pass ``check_model`` (external payloads resolved from the file's directory), since the CLI
writes nothing the checker would reject. Any other exception is an escape.

``seed_corpus()`` gives small valid files written by gguf-py's own GGUFWriter (every metadata
value type, nested arrays, F32/F16/quantized tensors); ``mutate()`` is a plain mutator for running
without atheris. Run a short campaign with::

    python tests/fuzz/targets_gguf.py 3000          # random mutations of the seeds
    python tests/fuzz/targets_gguf.py --atheris -runs=100000   # coverage-guided, atheris
"""

from __future__ import annotations

import pathlib
import random
import signal
import struct
import sys
import tempfile
import time

import numpy as np

from onnx_struct import ValidationError, check_model
from onnx_struct.convert import convert

# Per-input CPU budget: the pre-scan refuses hostile files in milliseconds; seconds mean a hang.
TIMEOUT_SECONDS = 5


def fuzz_from_gguf(data: bytes) -> None:
    """Convert ``data`` as a GGUF file inline and by reference; let only ValidationError out."""
    convert_both(data)


def convert_both(data: bytes) -> int:
    """How many of the two conversions accepted ``data`` (each accepted model passes check_model)."""
    accepted = 0
    with tempfile.TemporaryDirectory() as directory:
        path = pathlib.Path(directory) / "fuzz.gguf"
        path.write_bytes(data)
        for reference, keep_unknown in ((False, False), (True, True)):
            try:
                model = convert(path, reference=reference, keep_unknown=keep_unknown)
            except ValidationError:
                continue
            accepted += 1
            try:
                check_model(model.SerializeToString(), base_dir=directory)
            except ValidationError as error:
                raise AssertionError(f"from-gguf produced a model check_model rejects: {error}") from error
    return accepted


def seed_corpus() -> list[bytes]:
    """Small valid GGUF files written by gguf-py's GGUFWriter."""
    import gguf  # noqa: PLC0415 - the target needs gguf-py anyway; the seeds are its output

    q = gguf.GGMLQuantizationType
    rng = np.random.default_rng(0)
    seeds = []
    with tempfile.TemporaryDirectory() as directory:
        for variant in range(4):
            path = pathlib.Path(directory) / f"seed{variant}.gguf"
            writer = gguf.GGUFWriter(path, "llama")
            writer.add_string("general.name", "seed")
            writer.add_uint32("llama.block_count", 1)
            writer.add_float32("llama.rope.freq_base", 10000.0)
            writer.add_bool("general.flag", True)
            writer.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b"])
            writer.add_array("tokenizer.ggml.scores", [0.0, -1.5, 2.0])
            if variant == 1:
                writer.add_array("nested", [[1, 2], [3, 4]])
                writer.add_uint64("u64", 2**40)
                writer.add_int8("i8", -3)
            if variant == 2:
                writer.add_uint32("general.alignment", 64)
            x = rng.standard_normal((2, 32)).astype(np.float32)
            writer.add_tensor("f32", x)
            if variant != 3:
                writer.add_tensor("f16", x.astype(np.float16))
                writer.add_tensor("q8", gguf.quants.quantize(x, q.Q8_0), raw_dtype=q.Q8_0)
            if variant == 2:
                writer.add_tensor("q4_0", gguf.quants.quantize(x, q.Q4_0), raw_dtype=q.Q4_0)
                # gguf-py has no Q4_K quantizer; any 144 bytes are one Q4_K block.
                writer.add_tensor("q4k", rng.integers(0, 256, (1, 144), dtype=np.uint8), raw_dtype=q.Q4_K)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
            writer.close()
            seeds.append(path.read_bytes())
    return seeds


_INTERESTING = [
    0,
    1,
    2,
    3,
    4,
    8,
    9,
    12,
    13,
    31,
    32,
    255,
    2**16 - 1,
    2**31 - 1,
    2**32 - 1,
    2**32,
    2**40,
    2**63,
    2**64 - 1,
]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four random edits: bit flips, interesting 4- or 8-byte integers, cuts, duplicated or
    deleted ranges (what shifts a header's fields against each other)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not buf:
            buf += b"GGUF"
        i = rng.randrange(len(buf))
        choice = rng.randrange(6)
        if choice == 0:
            buf[i] ^= 1 << rng.randrange(8)
        elif choice == 1:
            value = rng.choice(_INTERESTING)
            width = rng.choice((4, 8))
            buf[i : i + width] = struct.pack("<Q", value % 2**64)[:width]
        elif choice == 2:
            del buf[rng.randrange(len(buf)) :]
        elif choice == 3:
            j = min(len(buf), i + rng.randint(1, 64))
            buf[i:i] = buf[i:j]
        elif choice == 4:
            del buf[i : i + rng.randint(1, 64)]
        else:
            buf[i] = rng.randrange(256)
    return bytes(buf)


def _on_alarm(signum, frame):  # pragma: no cover - only on a hang
    raise TimeoutError(f"one input took more than {TIMEOUT_SECONDS} CPU seconds")


def run_mutations(n: int, seed: int = 0, crashes: pathlib.Path | None = None) -> dict[str, int]:
    """Run ``n`` mutated seeds through :func:`fuzz_from_gguf`; save escaping inputs to ``crashes``."""
    rng = random.Random(seed)
    corpus = seed_corpus()
    counts = {"inputs": 0, "conversions accepted": 0, "conversions refused": 0, "escapes": 0}
    signal.signal(signal.SIGPROF, _on_alarm)
    slowest = 0.0
    for k in range(n):
        data = mutate(rng.choice(corpus), rng)
        counts["inputs"] += 1
        start = time.process_time()
        signal.setitimer(signal.ITIMER_PROF, TIMEOUT_SECONDS)
        try:
            accepted = convert_both(data)
            counts["conversions accepted"] += accepted
            counts["conversions refused"] += 2 - accepted
        except BaseException as error:  # noqa: BLE001 - every other outcome is an escape
            counts["escapes"] += 1
            if crashes is not None:
                crashes.mkdir(parents=True, exist_ok=True)
                (crashes / f"escape-{seed}-{k}.gguf").write_bytes(data)
            print(f"escape {k}: {type(error).__name__}: {str(error)[:200]}", file=sys.stderr)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        slowest = max(slowest, time.process_time() - start)
    counts["slowest_ms"] = int(slowest * 1000)
    return counts


def _atheris_main(argv: list[str]) -> None:  # pragma: no cover - interactive
    import atheris  # noqa: PLC0415

    atheris.instrument_all()  # coverage of onnx_struct and gguf-py, already imported
    atheris.Setup([argv[0], *argv[1:]], fuzz_from_gguf)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    if "--atheris" in sys.argv:
        _atheris_main([a for a in sys.argv if a != "--atheris"])
    else:
        total = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
        print(run_mutations(total, crashes=pathlib.Path("gguf-crashes")))
