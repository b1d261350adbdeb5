"""A model made by ``from-gguf --graph --reference`` points into the .gguf beside it; a .gguf replaced
afterwards by another of the same name (a re-download of another quantization, another model, the
same model with other weights of the same size) computed silently with the wrong bytes. The model
records the file's size and a hash of its header and of both ends of every tensor
(onnx_struct/payload/file_identity.py): `check`, sessions and generate refuse a replaced file,
naming it (docs/security.md, "Files")."""

from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from support.llm import TinyLlama, write_gguf  # noqa: E402

from adversarial.bounded import run_bounded  # noqa: E402

pytestmark = pytest.mark.slow

SMALL = {"n_layers": 1, "n_embd": 64, "n_ff": 64, "n_heads": 2, "n_kv_heads": 1, "random_blocks": True}

CONVERT_AND_RUN = """
import contextlib, io, os
from onnx_struct.cli import main
directory = ARG["directory"]
model, gguf = os.path.join(directory, "model.onnx"), os.path.join(directory, "model.gguf")
if ARG["convert"]:
    assert main(["from-gguf", gguf, model, "--graph", "--reference", "--quiet"]) == 0
    os.replace(ARG["replacement"], gguf) if ARG["replacement"] else None
err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = main(["check", model])
open(ARG["report"], "w").write(f"CHECK {code} {err.getvalue().strip()}")
S.generate(model, [1, 2, 3], max_new_tokens=2, accuracy_level=0)
raise S.ValidationError("done", "generated")
"""


def _model_dir(tmp_path, **config):
    directory = tmp_path / "model"
    directory.mkdir()
    write_gguf(directory / "model.gguf", TinyLlama(**{**SMALL, **config}))
    return directory


def _replacement(tmp_path, **config):
    path = tmp_path / "other.gguf"
    write_gguf(path, TinyLlama(**{**SMALL, **config}))
    return path


def _run(directory, replacement=None, convert=True):
    """(the outcome of generate, what `onnx-struct check` printed and returned) on the model."""
    report = directory.parent / "check.txt"
    arg = {"directory": str(directory), "replacement": replacement and str(replacement), "convert": convert}
    arg["report"] = str(report)
    out = run_bounded(CONVERT_AND_RUN, arg, cpu_seconds=30, memory_mib=600)
    return out, report.read_text()


@pytest.mark.parametrize(
    "other",
    [
        pytest.param({"seed": 1}, id="same-size-other-weights"),  # same header: only the tensors' pages differ
        pytest.param({"default_type": "Q8_0"}, id="another-quantization"),
        pytest.param({"n_vocab": 128}, id="another-model"),
    ],
)
def test_a_replaced_gguf_is_refused_naming_it(tmp_path, other):
    directory = _model_dir(tmp_path, seed=0)
    replacement = _replacement(tmp_path, **{"seed": 0, **other})
    if other == {"seed": 1}:
        assert os.path.getsize(replacement) == os.path.getsize(directory / "model.gguf")
    out, check = _run(directory, replacement)
    out.assert_validation_error("graph.struct_initializer[", contains="'model.gguf' is not the file this model")
    assert check.startswith("CHECK 1 ") and "'model.gguf' is not the file this model was made from" in check


def test_the_same_gguf_written_again_is_accepted(tmp_path):
    """A copy of the very file (a restore from backup, a re-download of the same file) is the file."""
    directory = _model_dir(tmp_path, seed=0)
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(directory / "model.gguf", copy)
    out, check = _run(directory, copy)
    out.assert_validation_error("done")
    assert check.startswith("CHECK 0"), check


def test_a_model_moved_away_from_the_gguf_is_not_checked_against_it(tmp_path):
    """The record binds the files the model still references: once its payloads are inlined
    (save_with_external_data elsewhere), the .gguf may go."""
    directory = _model_dir(tmp_path, seed=0)
    _run(directory)[0].assert_validation_error("done")
    code = """
    S.save_with_external_data(ARG[0], ARG[1], size_threshold=0)
    S.check_model(ARG[1])
    raise S.ValidationError("done", "checked")
    """
    moved = tmp_path / "moved"
    moved.mkdir()
    out = run_bounded(code, [str(directory / "model.onnx"), str(moved / "m.onnx")], cpu_seconds=20)
    out.assert_validation_error("done")


@pytest.mark.parametrize(
    "record, contains",
    [
        ("not json", "not JSON"),
        ('{"a": 1}', "not a JSON array"),
        ('[{"location": "model.gguf"}]', "not an object of location, size, sampled, sha256"),
        ('[{"location": "../x", "size": 1, "sampled": [], "sha256": ""}]', "contains '..'"),
        ('[{"location": "model.gguf", "size": -1, "sampled": [], "sha256": ""}]', "non-negative integer"),
        ('[{"location": "model.gguf", "size": 1, "sampled": [[0, 68719476736]], "sha256": ""}]', "past"),
        ('[{"location": "model.gguf", "size": 1, "sampled": [[0]], "sha256": ""}]', "[offset, length] pairs"),
    ],
)
def test_a_hostile_record_is_refused_without_reading_what_it_asks(tmp_path, record, contains):
    directory = _model_dir(tmp_path, seed=0)
    _run(directory)[0].assert_validation_error("done")
    code = """
    import onnx
    model = onnx.load(ARG[0], load_external_data=False)
    for entry in model.metadata_props:
        if entry.key == "onnx_struct.referenced_files":
            entry.value = ARG[1]
    onnx.save(model, ARG[0])
    S.check_model(ARG[0])
    """
    out = run_bounded(code, [str(directory / "model.onnx"), record], cpu_seconds=10, memory_mib=200)
    out.assert_validation_error("", contains=contains)
    assert "onnx_struct.referenced_files" in out.path or "model.gguf" in (out.message or "")


def test_view_and_decode_of_one_value_refuse_a_replaced_gguf(tmp_path):
    """They resolve one value without the model's check; a file verified once is remembered by its
    inode and change times, so a replacement after a first decode is still refused."""
    directory = _model_dir(tmp_path, seed=0)
    replacement = _replacement(tmp_path, seed=1)
    code = """
    import os
    from onnx_struct.cli import main
    model, gguf = os.path.join(ARG[0], "model.onnx"), os.path.join(ARG[0], "model.gguf")
    assert main(["from-gguf", gguf, model, "--reference", "--quiet"]) == 0
    before = S.decode("token_embd.weight", model)
    os.replace(ARG[1], gguf)
    for read in (lambda: S.view("token_embd.weight", model), lambda: S.decode("output_norm.weight", model)):
        try:
            read()
        except S.ValidationError as error:
            assert "'model.gguf' is not the file this model was made from" in str(error), error
        else:
            raise AssertionError("a value of the replaced file was read")
    S.decode("token_embd.weight", model)
    """
    out = run_bounded(code, [str(directory), str(replacement)], cpu_seconds=20, memory_mib=400)
    out.assert_validation_error("graph.struct_initializer[0] ('token_embd.weight')", contains="is not the file")
