"""Workflows end to end through the ``onnx-struct`` command, each step a real subprocess on real
files in tmp_path (issue 13): exit codes and the messages people read.

The .gguf files are written by gguf-py's GGUFWriter; the oracles are gguf-py's
``gguf.quants.dequantize`` and plain numpy, never onnx_struct's own output.
"""

from __future__ import annotations

import json
import os
import pathlib
import pty
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_struct as S

# Every test here starts a child process (tests/support/tiers.py).
pytestmark = pytest.mark.slow

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
ROOT = pathlib.Path(__file__).resolve().parent.parent
# A child process that cannot import gguf, as when the [gguf] extra is not installed.
WITHOUT_GGUF = "import sys; sys.modules['gguf'] = None; from onnx_struct.cli import main; sys.exit(main(sys.argv[1:]))"


def cli(*args: str, cwd: pathlib.Path, prelude: str | None = None) -> subprocess.CompletedProcess:
    """``python -m onnx_struct ARGS`` (or ``python -c PRELUDE ARGS``) run from ``cwd``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", prelude] if prelude else [sys.executable, "-m", "onnx_struct"]
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def one_line(result: subprocess.CompletedProcess) -> str:
    """The single stderr line of a refusal (a traceback or a second line fails the test)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def write_gguf(path: pathlib.Path, tensors: dict[str, tuple[Q, tuple[int, ...]]], seed: int = 0) -> dict:
    """Write ``tensors`` (name -> GGML type, numpy shape) with gguf-py; name -> dequantized oracle."""
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_string("general.name", "workflow")
    writer.add_uint32("llama.block_count", 1)
    expected = {}
    for name, (qtype, shape) in tensors.items():
        stored = gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), qtype)
        writer.add_tensor(name, stored, raw_dtype=qtype)
        expected[name] = np.asarray(gguf.quants.dequantize(stored, qtype), np.float32).reshape(shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


TENSORS = {"blk.0.ffn_up.weight": (Q.Q4_0, (8, 64)), "blk.0.ffn_down.weight": (Q.Q8_0, (64, 32))}


@pytest.fixture
def converted(tmp_path) -> tuple[pathlib.Path, dict]:
    expected = write_gguf(tmp_path / "tiny.gguf", TENSORS)
    result = cli("from-gguf", "tiny.gguf", "tiny.onnx", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path / "tiny.onnx", expected


# ---------------------------------------------------------------------- GGUF -> MatMul -> lower -> onnxruntime
def _add_matmul_chain(model: onnx.ModelProto) -> onnx.ModelProto:
    """y = (x @ up) @ down: every node consumes a converted tensor."""
    model.graph.node.extend(
        [
            helper.make_node("MatMul", ["x", "blk.0.ffn_up.weight"], ["h"]),
            helper.make_node("MatMul", ["h", "blk.0.ffn_down.weight"], ["y"]),
        ]
    )
    model.graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8]))
    model.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 32]))
    return model


@pytest.mark.parametrize("reference", [False, True], ids=["inline", "reference"])
def test_converted_gguf_with_a_matmul_consumer_lowers_and_runs_like_gguf_py(tmp_path, reference):
    expected = write_gguf(tmp_path / "tiny.gguf", TENSORS)
    result = cli("from-gguf", "tiny.gguf", "tiny.onnx", *(["--reference"] if reference else []), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    converted = onnx.load(tmp_path / "tiny.onnx", load_external_data=False)
    # The GGUF decoders import opset 21 (onnx_struct/formats/function_builder.py); IR 10 is the
    # first IR version of opset 21 (onnx's versioning table).
    assert [(o.domain, o.version) for o in converted.opset_import] == [("", 21)]
    assert converted.ir_version == 10

    onnx.save(_add_matmul_chain(converted), tmp_path / "mlp.onnx")
    assert cli("check", "mlp.onnx", cwd=tmp_path).returncode == 0
    lowered = cli("lower", "mlp.onnx", "mlp.lowered.onnx", cwd=tmp_path)
    assert lowered.returncode == 0, lowered.stderr

    import onnxruntime  # noqa: PLC0415 - the plain model runs in stock onnxruntime

    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    oracle = (x @ expected["blk.0.ffn_up.weight"]) @ expected["blk.0.ffn_down.weight"]
    session = onnxruntime.InferenceSession(str(tmp_path / "mlp.lowered.onnx"), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x})
    np.testing.assert_allclose(y, oracle, rtol=1e-5, atol=1e-5)
    # The same model, unlowered, through onnx_struct's own session.
    (y,) = S.InferenceSession(str(tmp_path / "mlp.onnx")).run(None, {"x": x})
    np.testing.assert_allclose(y, oracle, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- from-gguf refusals
def test_missing_gguf_extra_is_one_line_and_exit_2(tmp_path):
    write_gguf(tmp_path / "tiny.gguf", TENSORS)
    result = cli("from-gguf", "tiny.gguf", "tiny.onnx", cwd=tmp_path, prelude=WITHOUT_GGUF)
    assert result.returncode == 2
    assert (
        one_line(result) == "onnx-struct from-gguf: reading GGUF files needs gguf-py: pip install 'onnx-struct[gguf]'"
    )
    assert not (tmp_path / "tiny.onnx").exists()


def test_converted_model_is_inspected_checked_and_decoded_without_gguf(converted):
    path, expected = converted
    for args in (["check", path.name], ["inspect", path.name]):
        assert cli(*args, cwd=path.parent, prelude=WITHOUT_GGUF).returncode == 0
    result = cli("decode", path.name, "blk.0.ffn_up.weight", "-o", "up.npy", cwd=path.parent, prelude=WITHOUT_GGUF)
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(path.parent / "up.npy"), expected["blk.0.ffn_up.weight"])


def test_a_directory_given_to_from_gguf_is_called_a_directory(tmp_path):
    (tmp_path / "weights").mkdir()
    result = cli("from-gguf", "weights", "out.onnx", cwd=tmp_path)
    assert result.returncode == 2
    assert "weights is a directory" in one_line(result)


def test_a_truncated_gguf_names_the_tensor_and_the_bytes_missing(tmp_path):
    write_gguf(tmp_path / "full.gguf", TENSORS)
    data = (tmp_path / "full.gguf").read_bytes()
    reader = gguf.GGUFReader(tmp_path / "full.gguf")
    last = max(reader.tensors, key=lambda t: t.data_offset)  # gguf-py's absolute offsets
    padding = len(data) - (int(last.data_offset) + int(last.n_bytes))  # after the last tensor
    cut = padding + 100
    (tmp_path / "cut.gguf").write_bytes(data[:-cut])
    result = cli("from-gguf", "cut.gguf", "cut.onnx", cwd=tmp_path)
    assert result.returncode == 1
    line = one_line(result)
    assert f"({last.name!r})" in line and "100 bytes missing" in line, line
    assert "reshape" not in line


# ---------------------------------------------------------------------- decode -o
def test_decode_writes_exactly_the_path_given(converted):
    path, expected = converted
    result = cli("decode", path.name, "blk.0.ffn_down.weight", "-o", "down.txt", cwd=path.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "blk.0.ffn_down.weight: float32 [64, 32] -> down.txt"
    assert not (path.parent / "down.txt.npy").exists()
    np.testing.assert_array_equal(np.load(path.parent / "down.txt"), expected["blk.0.ffn_down.weight"])


# ---------------------------------------------------------------------- OUT: never the input, never through a link
WRITERS = {
    "lower": ("lower", "tiny.onnx", "{out}"),
    "decode": ("decode", "tiny.onnx", "blk.0.ffn_down.weight", "-o", "{out}"),
    "inspect --svg": ("inspect", "tiny.onnx", "--svg", "{out}", "--type", "0"),
    "quantize": ("quantize", "tiny.onnx", "{out}", "--format", "q8_0"),
    "from-gguf": ("from-gguf", "tiny.gguf", "{out}"),
    "to-gguf": ("to-gguf", "tiny.onnx", "{out}"),
}


@pytest.mark.parametrize("command", list(WRITERS))
def test_out_is_written_anew_never_over_the_input_nor_through_a_link(converted, command):
    """Found by a red-team pass: every command wrote through a symlink at OUT, and `lower m m`
    (and the others) replaced the file they had read."""
    path, _ = converted
    folder = path.parent
    source = "tiny.gguf" if command == "from-gguf" else "tiny.onnx"
    before = (folder / source).read_bytes()
    same = cli(*(a.format(out=source) for a in WRITERS[command]), cwd=folder)
    assert same.returncode == 2 and f"is the input file {source}" in one_line(same)
    assert (folder / source).read_bytes() == before

    (folder / "victim.txt").write_text("keep")
    (folder / "link.out").symlink_to("victim.txt")
    linked = cli(*(a.format(out="link.out") for a in WRITERS[command]), cwd=folder)
    assert linked.returncode == 2 and "'link.out' is a symbolic link" in one_line(linked)
    assert (folder / "victim.txt").read_text() == "keep" and (folder / "link.out").is_symlink()

    (folder / "old.out").write_text("old")  # an ordinary file is replaced, as every CLI does
    written = cli(*(a.format(out="old.out") for a in WRITERS[command]), cwd=folder)
    assert written.returncode == 0, written.stderr
    assert (folder / "old.out").read_bytes() != b"old"
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]  # no temporary left behind

    # OUT is the user's own name, not a location a model states: a ':' is a character on POSIX
    # (the model-location rules called it absolute; found by a review).
    colon = cli(*(a.format(out="x:y.out") for a in WRITERS[command]), cwd=folder)
    assert colon.returncode == 0, colon.stderr
    assert (folder / "x:y.out").stat().st_size > 0


@pytest.mark.parametrize("command", [c for c in WRITERS if c != "from-gguf"])
def test_out_is_never_a_file_the_input_model_references(tmp_path, command):
    """`lower m.onnx w.gguf` where m.onnx's payloads are in w.gguf replaced the payload file: the
    input was destroyed, and a lowered model keeping references into it with it."""
    write_gguf(tmp_path / "w.gguf", TENSORS)
    converted = cli("from-gguf", "w.gguf", "tiny.onnx", "--reference", cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr
    before = (tmp_path / "w.gguf").read_bytes()
    result = cli(*(a.format(out="w.gguf") for a in WRITERS[command]), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "w.gguf: is the file tiny.onnx references at graph.struct_initializer[" in one_line(result)
    assert (tmp_path / "w.gguf").read_bytes() == before
    assert cli("check", "tiny.onnx", cwd=tmp_path).returncode == 0


def test_out_is_never_the_data_file_of_an_input_models_stock_tensor(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["T"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.arange(256, dtype=np.float32), "T"))
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="t.data", size_threshold=0)
    before = (tmp_path / "t.data").read_bytes()
    result = cli("lower", "m.onnx", "t.data", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "t.data: is the file m.onnx references at graph.initializer[0] ('T')" in one_line(result)
    assert (tmp_path / "t.data").read_bytes() == before


def test_out_is_never_a_referenced_file_the_rules_would_refuse(tmp_path):
    """A data file with a second hard link is refused by the model-directory rules, so the OUT
    check skipped it, and `decode m.onnx V -o t.bin` (a command that does not read T) replaced it
    (found by a red-team pass)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["T"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.float32([1, 2, 3, 4]), "T"))
    declaration = S.make_array(TensorProto.UINT8, 4, decoder=helper.make_function(
        "t", "cast", ["x"], ["y"], [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], [helper.make_opsetid("", 21)]
    ))  # fmt: skip
    (index,) = S.add_struct_types(model, declaration)
    S.add_struct_values(model, S.make_struct_value("V", index, raw_data=bytes(4)))
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="t.bin", size_threshold=0)
    os.link(tmp_path / "t.bin", tmp_path / "t.bin.bak")
    before = (tmp_path / "t.bin").read_bytes()
    result = cli("decode", "m.onnx", "V", "-o", "t.bin", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "t.bin: is the file m.onnx references at graph.initializer[0] ('T')" in one_line(result)
    assert (tmp_path / "t.bin").read_bytes() == before


def test_a_model_linked_to_itself_is_one_line(tmp_path):
    """`lower loop.onnx out.onnx` with loop.onnx -> loop.onnx let Python's RuntimeError ('Symlink
    loop') out as a traceback (found by a red-team pass)."""
    (tmp_path / "loop.onnx").symlink_to("loop.onnx")
    for args in (
        ["lower", "loop.onnx", "out.onnx"],
        ["check", "loop.onnx"],
        ["quantize", "loop.onnx", "q.onnx", "--format", "q8_0"],
    ):
        result = cli(*args, cwd=tmp_path)
        assert result.returncode in (1, 2), (args, result.stderr)
        assert "loop.onnx" in one_line(result) and "Traceback" not in result.stderr, args


# ---------------------------------------------------------------------- files that are not models
def test_an_empty_file_is_called_empty_by_check_and_inspect(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    for args in (["check", "empty.onnx"], ["inspect", "empty.onnx"], ["check", "empty.onnx", "--full"]):
        result = cli(*args, cwd=tmp_path)
        assert result.returncode == 1, args
        assert one_line(result).endswith("empty.onnx: the file is empty (0 bytes), not an ONNX model")
    result = cli("check", "empty.onnx", "--json", cwd=tmp_path)
    diagnostics = json.loads(result.stdout)["diagnostics"]
    assert [d["code"] for d in diagnostics] == ["not_parsable"]


def test_a_png_is_refused_in_one_clean_line(tmp_path):
    (tmp_path / "cat.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(40))
    for args in (["check", "cat.png"], ["inspect", "cat.png"], ["decode", "cat.png", "w", "-o", "w.npy"]):
        result = cli(*args, cwd=tmp_path)
        assert result.returncode == 1, args
        line = one_line(result)
        assert line.count("cat.png") == 1 and "not a parsable ONNX model" in line, line
        assert "onnx_struct." not in line and "ModelProto" not in line, line


# ---------------------------------------------------------------------- usage errors and JSON
def test_unknown_value_or_type_is_a_usage_error(converted):
    path, _ = converted
    result = cli("inspect", path.name, "--value", "nope", cwd=path.parent)
    assert result.returncode == 2 and "no struct value named 'nope'" in one_line(result)
    result = cli("inspect", path.name, "--value", "nope", "--json", cwd=path.parent)
    assert result.returncode == 2 and json.loads(result.stdout)["error"]["code"] == "unknown_value"
    for type_ref in ("NOPE", "99"):
        result = cli("inspect", path.name, "--svg", "x.svg", "--type", type_ref, cwd=path.parent)
        assert result.returncode == 2, type_ref
        assert "--type" in one_line(result)
        assert not (path.parent / "x.svg").exists()


def test_check_json_of_a_missing_file_prints_a_json_error(tmp_path):
    result = cli("check", "missing.onnx", "--json", cwd=tmp_path)
    assert result.returncode == 2
    report = json.loads(result.stdout)
    assert report["path"] == "missing.onnx" and report["valid"] is False and report["diagnostics"] == []
    assert report["error"]["code"] == "io_error" and report["error"]["errno"] == 2
    assert "missing.onnx" in report["error"]["message"]
    result = cli("inspect", "missing.onnx", "--json", cwd=tmp_path)
    assert result.returncode == 2 and json.loads(result.stdout)["error"]["code"] == "io_error"


def test_inspect_help_shows_its_examples_one_per_line(tmp_path):
    result = cli("inspect", "--help", cwd=tmp_path)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    examples = [line for line in lines if line.startswith("onnx-struct inspect model.onnx")]
    assert len(examples) == 4, result.stdout


# ---------------------------------------------------------------------- inspect shows more
def test_inspect_shows_gguf_metadata_logical_types_and_type_indices(converted):
    path, _ = converted
    result = cli("inspect", path.name, cwd=path.parent)
    assert result.returncode == 0, result.stderr
    assert "  general.name = workflow" in result.stdout.splitlines()
    up = next(line for line in result.stdout.splitlines() if line.startswith("'blk.0.ffn_up.weight'"))
    assert up.endswith("decodes to FLOAT[8, 64]"), up

    data = json.loads(cli("inspect", path.name, "--json", cwd=path.parent).stdout)
    assert data["metadata_props"]["general.name"] == "workflow"
    assert data["metadata_props"]["llama.block_count"] == "1"
    stored = {v.name: v.type for v in S.get_struct_values(path)}
    for entry in data["struct_values"]:
        shape = TENSORS[entry["name"]][1]
        assert entry["logical_type"] == f"FLOAT[{shape[0]}, {shape[1]}]"
        assert entry["type_index"] == stored[entry["name"]]
        assert entry["type"].startswith(f"struct_types[{stored[entry['name']]}]")  # the old display string


def test_inspect_shows_doc_strings_and_declaration_metadata(tmp_path):
    model = helper.make_model(helper.make_graph([], "g", [], []))
    (index,) = S.add_struct_types(
        model,
        S.make_array(TensorProto.UINT8, 4, name="raw", doc_string="four raw bytes", metadata_props={"origin": "test"}),
    )
    S.add_struct_values(model, S.make_struct_value("w", index, raw_data=bytes(4), doc_string="a weight"))
    onnx.save(model, tmp_path / "m.onnx")
    text = cli("inspect", "m.onnx", cwd=tmp_path).stdout.splitlines()
    assert "  doc: four raw bytes" in text and "  metadata: origin = test" in text and "  doc: a weight" in text
    data = json.loads(cli("inspect", "m.onnx", "--json", cwd=tmp_path).stdout)
    (declaration,) = data["struct_types"]
    assert declaration["doc_string"] == "four raw bytes" and declaration["metadata_props"] == {"origin": "test"}
    assert "logical_type" not in declaration  # no decoder: no logical type
    assert data["struct_values"][0]["doc_string"] == "a weight"


# ---------------------------------------------------------------------- progress on a terminal
def _with_terminal_stderr(*args: str, cwd: pathlib.Path) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal; (exit code, what the terminal showed)."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-m", "onnx_struct", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=terminal
    )
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    process.stdout.close()
    return process.wait(timeout=300), shown.decode(errors="replace")


def test_from_gguf_progress_covers_the_final_check_and_write(tmp_path):
    write_gguf(tmp_path / "tiny.gguf", TENSORS)
    code, shown = _with_terminal_stderr("from-gguf", "tiny.gguf", "tiny.onnx", cwd=tmp_path)
    assert code == 0, shown
    bars = shown.split("\r")
    stages = [bar.split("2/2", 1)[1].strip() for bar in bars if "2/2" in bar]
    assert [s.splitlines()[0].strip() for s in stages[-4:]] == ["serializing", "checking", "writing tiny.onnx", "done"]
    assert "tiny.onnx" in shown.splitlines()[-1] and "bytes" in shown.splitlines()[-1]


def test_check_full_says_what_it_is_doing_on_a_terminal_only(converted):
    path, _ = converted
    code, shown = _with_terminal_stderr("check", path.name, "--full", cwd=path.parent)
    assert code == 0
    assert f"checking {path.name}" in shown
    result = cli("check", path.name, "--full", cwd=path.parent)  # stderr a pipe: nothing but the result
    assert result.returncode == 0 and result.stderr == ""
