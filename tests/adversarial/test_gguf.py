"""Hostile GGUF files are refused before gguf-py parses them: a ValidationError naming the header,
key-value pair or tensor, in well under a second of CPU and a few MiB.

Each file is assembled by hand (tests/adversarial/gguf_bytes.py), so the expected paths and sizes
follow from the bytes written here, not from the code under test.
"""

from __future__ import annotations

import pathlib
import struct

import pytest

import onnx_struct as S
from adversarial import gguf_bytes as G
from adversarial.bounded import run_bounded

CONVERT = "from onnx_struct.convert import convert; convert(ARG)"
CONVERT_BOTH = """
from onnx_struct.convert import convert
errors = []
for reference in (False, True):
    try:
        convert(ARG, reference=reference)
    except S.ValidationError as error:
        errors.append(error)
assert len(errors) in (0, 2), f"refused in {len(errors)} of the 2 modes: {errors}"
assert len({str(e) for e in errors}) <= 1, errors
if errors:
    raise errors[0]
"""
CLI = "import sys; from onnx_struct.cli import main; sys.exit(main(ARG))"


def _write(tmp_path, data: bytes, name: str = "hostile.gguf") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _refused(tmp_path, data: bytes, path: str, contains: str = "", *, cpu_seconds: float = 2, memory_mib: int = 100):
    out = run_bounded(CONVERT_BOTH, _write(tmp_path, data), cpu_seconds=cpu_seconds, memory_mib=memory_mib)
    out.assert_validation_error(path, contains=contains)
    return out


@pytest.mark.slow
def test_the_49_byte_array_of_2_40_bytes_is_refused_at_once(tmp_path):
    data = G.gguf([G.kv("a", G.ARRAY, G.array(G.UINT8, 2**40))])
    assert len(data) == 49
    out = run_bounded(CONVERT, _write(tmp_path, data), cpu_seconds=2, memory_mib=100)
    out.assert_validation_error("gguf.kv[0] ('a')", contains=f"{2**40} UINT8")


@pytest.mark.slow
def test_arrays_nested_5000_deep_are_refused_without_recursion(tmp_path):
    value = G.array(G.ARRAY, 1) * 4999 + G.array(G.UINT8, 0)
    _refused(tmp_path, G.gguf([G.kv("deep", G.ARRAY, value)]), "gguf.kv[0] ('deep')", "nested more than 4 deep")


@pytest.mark.slow
def test_nesting_up_to_the_limit_is_read(tmp_path):
    value = G.array(G.ARRAY, 1) * 3 + G.array(G.UINT8, 2, b"\x01\x02")  # 4 levels of arrays
    out = run_bounded(CONVERT_BOTH, _write(tmp_path, G.gguf([G.kv("ok", G.ARRAY, value)])), cpu_seconds=5)
    assert out.error is None, out.traceback


@pytest.mark.slow
@pytest.mark.parametrize(
    "counts, contains",
    [((2**60, 0), "tensor count 1152921504606846976 exceeds the limit 65536"), ((0, 2**40), "key-value count")],
)
def test_header_counts_beyond_limits_are_refused(tmp_path, counts, contains):
    _refused(tmp_path, G.gguf(counts=counts), "gguf.header", contains)


@pytest.mark.slow
def test_counts_must_fit_in_the_file(tmp_path):
    # 1,000 tensor infos need at least 24,000 bytes; the file has 24.
    _refused(tmp_path, G.gguf(counts=(1000, 0)), "gguf.header", "needs 24000 bytes")


@pytest.mark.slow
@pytest.mark.parametrize(
    "kvs, path, contains",
    [
        ([struct.pack("<Q", 2**63) + b"k" * 16], "gguf.kv[0]", "its key (9223372036854775808 bytes)"),
        ([G.kv("s", G.STRING, struct.pack("<Q", 2**62))], "gguf.kv[0] ('s')", "string value"),
        ([G.kv("t", 13, b"")], "gguf.kv[0] ('t')", "unknown GGUF value type 13"),
        ([G.kv("t", G.ARRAY, G.array(77, 0))], "gguf.kv[0] ('t')", "unknown GGUF value type 77"),
        ([G.kv("a", G.ARRAY, G.array(G.STRING, 2**40, G.string("x")))], "gguf.kv[0] ('a')", "STRING values"),
        ([G.kv(b"\xff\xfe", G.UINT8, b"\x00")], "gguf.kv[0]", "not valid UTF-8"),
        ([G.kv("k", G.UINT8, b"\x00"), G.kv("k", G.UINT8, b"\x00")], "gguf.kv[1] ('k')", "twice"),
        ([G.kv("general.name", G.STRING, G.string(b"\xff"))], "gguf.kv[0] ('general.name')", "not valid UTF-8"),
        ([G.kv("general.alignment", G.UINT32, struct.pack("<I", 48))], "gguf.kv[0] ('general.alignment')", "power"),
        ([G.kv("general.alignment", G.UINT8, b"\x20")], "gguf.kv[0] ('general.alignment')", "UINT32"),
        (
            [G.kv("mixed", G.ARRAY, G.array(G.ARRAY, 2, G.array(G.UINT8, 1, b"\x01") + G.array(G.STRING, 0)))],
            "gguf.kv[0] ('mixed')",
            "different element types",
        ),
        (
            [G.kv("onnx_struct.gguf.version", G.UINT32, b"\x09\0\0\0")],
            "gguf.kv[0] ('onnx_struct.gguf.version')",
            "reserved",
        ),
    ],
)
def test_hostile_metadata_is_refused(tmp_path, kvs, path, contains):
    _refused(tmp_path, G.gguf(kvs), path, contains)


@pytest.mark.slow
def test_the_metadata_item_limit_bounds_gguf_py(tmp_path):
    # 2^21 + 1 one-byte elements: a 2 MiB file that would cost gguf-py about 2 GB and a minute.
    data = G.gguf([G.kv("big", G.ARRAY, G.array(G.UINT8, 2**21 + 1, b"\0" * (2**21 + 1)))])
    _refused(tmp_path, data, "gguf.kv[0] ('big')", "more than 2097152 values", memory_mib=150)


@pytest.mark.slow
@pytest.mark.parametrize(
    "info, data, path, contains",
    [
        (G.tensor_info("w", [2**32 - 1], G.F32, 0), b"", "gguf.tensors[0] ('w')", "run past the end"),
        (
            G.string("w") + struct.pack("<I", 2**32 - 1) + b"\0" * 16,
            b"",
            "gguf.tensors[0] ('w')",
            "dimensions, not 1 to 4",
        ),
        (G.tensor_info("w", [], G.F32, 0), b"", "gguf.tensors[0] ('w')", "0 dimensions"),
        (G.tensor_info("w", [2**32, 2**32], G.F32, 0), b"\0" * 32, "gguf.tensors[0] ('w')", "run past the end"),
        (G.tensor_info("w", [4, 0], G.F32, 2**40), b"\0" * 32, "gguf.tensors[0] ('w')", "include a zero"),
        (G.tensor_info("w", [8], 1000, 0), b"\0" * 32, "gguf.tensors[0] ('w')", "unknown GGML type 1000"),
        (G.tensor_info("w", [40], G.Q8_0, 0), b"\0" * 64, "gguf.tensors[0] ('w')", "multiple of the block size 32"),
        (G.tensor_info("w", [2], G.F32, 4), b"\0" * 32, "gguf.tensors[0] ('w')", "not a multiple of the alignment"),
        (G.tensor_info("w", [8], G.F32, 32), b"\0" * 32, "gguf.tensors[0] ('w')", "run past the end"),
    ],
)
def test_hostile_tensor_infos_are_refused(tmp_path, info, data, path, contains):
    _refused(tmp_path, G.gguf(tensors=[info], data=data), path, contains)


@pytest.mark.slow
def test_duplicate_tensor_names_are_refused(tmp_path):
    infos = [G.tensor_info("w", [8], G.F32, 0), G.tensor_info("w", [8], G.F32, 32)]
    _refused(tmp_path, G.gguf(tensors=infos, data=b"\0" * 64), "gguf.tensors[1] ('w')", "two tensors")


@pytest.mark.slow
@pytest.mark.parametrize(
    "infos, path, contains",
    [
        # Found by a red-team pass: convert() returned a model check_model refuses (a nameless value).
        ([G.tensor_info("", [8], G.F32, 0)], "gguf.tensors[0] ('')", "the tensor has no name"),
        # Found by a red-team pass: two weights made of the same bytes (llama.cpp refuses the file).
        (
            [G.tensor_info("a", [64], G.F32, 0), G.tensor_info("b", [32], G.F32, 0)],
            "gguf.tensors[0] ('a')",
            "overlaps the 128 bytes of gguf.tensors[1] ('b') at offset 0",
        ),
        (
            [G.tensor_info("a", [16], G.F32, 0), G.tensor_info("b", [8], G.F32, 32)],
            "gguf.tensors[1] ('b')",
            "at offset 32 overlaps the 64 bytes of gguf.tensors[0] ('a')",
        ),
    ],
)
def test_nameless_and_overlapping_tensors_are_refused(tmp_path, infos, path, contains):
    _refused(tmp_path, G.gguf(tensors=infos, data=b"\0" * 256), path, contains)
    adjacent = [G.tensor_info("a", [8], G.F32, 0), G.tensor_info("b", [8], G.F32, 32)]  # end to end: fine
    from onnx_struct.convert import convert  # noqa: PLC0415 - gguf-py, imported by the test only

    model = convert(_write(tmp_path, G.gguf(tensors=adjacent, data=b"\0" * 64), "adjacent.gguf"))
    assert [v.name for v in S.get_struct_values(model)] == ["a", "b"]


def test_empty_arrays_keep_their_element_type(tmp_path):
    """Found by a red-team pass: gguf-py records an array's element type from its first element,
    so an empty array's type was recorded as ARRAY (value_types promises the metadata can be rebuilt)."""
    import json  # noqa: PLC0415

    from onnx_struct.convert import convert  # noqa: PLC0415 - gguf-py, imported by the test only

    inner = G.array(6, 0) + G.array(6, 1, struct.pack("<f", 1.0))  # FLOAT32: [], [1.0]
    kvs = [
        G.kv("e_u8", 9, G.array(0, 0)),
        G.kv("e_str", 9, G.array(8, 0)),
        G.kv("nested", 9, G.array(9, 2, inner)),
        G.kv("none", 9, G.array(9, 0)),  # an empty array of arrays: its arrays' type is not in the file
    ]
    path = _write(tmp_path, G.gguf(kvs, [G.tensor_info("w", [8], G.F32, 0)], b"\0" * 32))
    props = {p.key: p.value for p in convert(path).metadata_props}
    assert json.loads(props["onnx_struct.gguf.value_types"]) == {
        "e_u8": "ARRAY[UINT8]",
        "e_str": "ARRAY[STRING]",
        "nested": "ARRAY[ARRAY[FLOAT32]]",
        "none": "ARRAY[ARRAY]",
    }
    assert (props["e_u8"], props["e_str"], props["nested"]) == ("[]", "[]", "[1.0]")  # flattened, as documented


@pytest.mark.slow
def test_truncated_tensor_data_names_the_tensor(tmp_path):
    # gguf-py's message for this is "cannot reshape array of size ... into shape (...)".
    infos = [G.tensor_info("a", [32], G.F32, 0), G.tensor_info("blk.0.attn_q.weight", [64, 64], G.F32, 128)]
    data = G.gguf(tensors=infos, data=b"\0" * (128 + 64 * 64 * 4))
    out = _refused(tmp_path, data[:-1000], "gguf.tensors[1] ('blk.0.attn_q.weight')", "16384 bytes at data offset 128")
    assert "reshape" not in out.message


@pytest.mark.slow
@pytest.mark.parametrize(
    "data, contains",
    [
        (b"", "not a GGUF file"),
        (b"GGUF", "the version needs 4 bytes"),
        (b"GGUF" + struct.pack("<I", 1) + b"\0" * 16, "version 1 is not supported"),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "not a GGUF file"),
    ],
)
def test_not_a_gguf_file(tmp_path, data, contains):
    _refused(tmp_path, data, "gguf.header", contains)


@pytest.mark.slow
@pytest.mark.parametrize(
    "info, contains",
    [
        (G.tensor_info("w", [8, 0], G.F32, 2**40), "include a zero"),  # was: exit 0, a model `check` rejects
        (G.tensor_info("w", [8], G.F32, 64), "past the end"),  # was: gguf-py's "cannot reshape array"
    ],
)
def test_cli_reference_mode_refuses_a_tensor_past_the_end(tmp_path, info, contains):
    hostile = _write(tmp_path, G.gguf(tensors=[info], data=b"\0" * 32))
    out = run_bounded(CLI, ["from-gguf", hostile, str(tmp_path / "w.onnx"), "--reference", "--quiet"], cpu_seconds=5)
    assert (out.error, out.message) == ("builtins.SystemExit", "1"), out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "gguf.tensors[0] ('w')" in lines[0] and contains in lines[0], out.stderr
    assert not (tmp_path / "w.onnx").exists()


DATA = pathlib.Path(__file__).parent / "data" / "gguf"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("fuzz-*.gguf")))
def test_files_the_fuzzer_found_hanging_gguf_py_are_refused(name):
    # Mutations of gguf-py-written seeds (tests/fuzz/targets_gguf.py) that hung the converter
    # for more than 5 CPU seconds each before the pre-scan; all state huge array lengths.
    out = run_bounded(CONVERT_BOTH, str(DATA / name), cpu_seconds=2, memory_mib=100)
    out.assert_validation_error("gguf.kv[")


@pytest.mark.slow
def test_a_short_mutation_campaign_finds_no_escape():
    code = """
import sys
sys.path.insert(0, ARG)
from fuzz.targets_gguf import run_mutations
counts = run_mutations(150, seed=7)
assert counts["escapes"] == 0 and counts["conversions accepted"] > 0, counts
"""
    out = run_bounded(code, str(pathlib.Path(__file__).parents[1]), cpu_seconds=30, memory_mib=300)
    assert out.error is None, out.traceback


SHRINK = r"""
import os
from onnx_struct.convert import convert

def shrink(done, total, name):
    if done == 1:  # the first tensor is read: the file loses the others' bytes
        os.truncate(ARG["path"], ARG["size"])

try:
    convert(ARG["path"], progress=shrink)
except S.ValidationError as error:
    assert error.code == "file_changed" and error.path.startswith("gguf.tensors[1]"), error
else:
    raise AssertionError("the shrunken file converted")
"""


@pytest.mark.slow
def test_a_file_that_shrinks_during_conversion_is_a_validation_error_not_a_signal(tmp_path):
    """gguf-py memory-maps the file: a tensor read through the map after the file was truncated
    touched pages past its end and killed the process (SIGBUS). Tensors are read from the open
    file instead; the truncation is a short read."""
    size = 1 << 20  # four float32 tensors of 1 MiB each, page-aligned
    infos = [G.tensor_info(f"t{i}", [size // 4], G.F32, i * size) for i in range(4)]
    data = G.gguf(tensors=infos, data=b"\1" * (4 * size))
    path = _write(tmp_path, data)
    header = len(data) - 4 * size
    outcome = run_bounded(SHRINK, {"path": path, "size": header + size // 2}, cpu_seconds=30)
    assert outcome.returncode == 0 and outcome.error is None, (outcome.returncode, outcome.message, outcome.stderr)
