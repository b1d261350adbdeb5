"""The Hugging Face cache layout: a GGUF that is a symlink into ``blobs/`` (huggingface_hub's
``snapshots/<rev>/x.gguf -> ../../blobs/<sha>``) or a hard link is accepted by
``from-gguf --reference``, and the model loads and runs (external.resolve's links rule,
docs/security.md "Links"): the model records the file's identity and every read verifies it. A
link the model records no identity of, or one that now reaches another file, is still refused,
and ``check`` reports that once, not once per value.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import onnx
import pytest

gguf = pytest.importorskip("gguf")

from support.llm import TinyLlama, write_gguf  # noqa: E402

import onnx_struct  # noqa: E402
from onnx_struct.check.checker import validate  # noqa: E402
from onnx_struct.cli import main  # noqa: E402
from onnx_struct.payload.file_identity import REFERENCED_FILES_KEY  # noqa: E402
from onnx_struct.schema.model import load  # noqa: E402

TENSOR = "blk.0.attn_q.weight"


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(path, TinyLlama(n_layers=1, n_embd=64, n_ff=128, n_heads=2, n_kv_heads=1, n_vocab=32))
    return path


def _hf_cache(tmp_path, gguf_file):
    """``models--o--n/snapshots/rev/tiny.gguf -> ../../blobs/<sha>``, as huggingface_hub lays it out."""
    repo = tmp_path / "models--o--n"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "rev").mkdir(parents=True)
    shutil.copyfile(gguf_file, repo / "blobs" / "0123abcd")
    link = repo / "snapshots" / "rev" / "tiny.gguf"
    link.symlink_to(os.path.join("..", "..", "blobs", "0123abcd"))
    return link


def _expected(gguf_file) -> np.ndarray:
    """gguf-py's own dequantization of the tensor (an oracle independent of ours)."""
    tensor = next(t for t in gguf.GGUFReader(gguf_file).tensors if t.name == TENSOR)
    return gguf.quants.dequantize(tensor.data, tensor.tensor_type)


def _convert(link) -> object:
    model = link.parent / "tiny.onnx"
    assert main(["from-gguf", str(link), str(model), "--reference", "--quiet"]) == 0
    return model


def _hard_link(tmp_path, gguf_file):
    shutil.copyfile(gguf_file, tmp_path / "original.gguf")
    (tmp_path / "model").mkdir()
    os.link(tmp_path / "original.gguf", tmp_path / "model" / "tiny.gguf")
    return tmp_path / "model" / "tiny.gguf"


@pytest.mark.parametrize("layout", ["symlink_into_blobs", "hard_link"])
def test_a_linked_gguf_converts_with_reference_and_the_model_reads_it(tmp_path, gguf_file, layout):
    link = _hf_cache(tmp_path, gguf_file) if layout == "symlink_into_blobs" else _hard_link(tmp_path, gguf_file)
    model = _convert(link)
    assert validate(str(model)) == []
    refs = {e.value for e in load(model).proto.graph.struct_initializer[0].external_data}
    assert "tiny.gguf" in refs  # the link's own name, as the user gave it, not the blob's
    np.testing.assert_array_equal(onnx_struct.decode(TENSOR, str(model)), _expected(gguf_file))


def test_a_link_that_now_reaches_another_file_is_refused_once(tmp_path, gguf_file):
    link = _hf_cache(tmp_path, gguf_file)
    model = _convert(link)
    other = tmp_path / "other.gguf"
    write_gguf(other, TinyLlama(n_layers=1, n_embd=64, n_ff=128, n_heads=2, n_kv_heads=1, n_vocab=32, seed=7))
    link.unlink()
    link.symlink_to(other)
    diagnostics = validate(str(model))
    assert [d.code for d in diagnostics] == ["file_changed"]
    with pytest.raises(onnx_struct.ValidationError, match="not the file this model was made from"):
        onnx_struct.decode(TENSOR, str(model))


def _without_record(model):
    proto = onnx.load(model, load_external_data=False)
    kept = [p for p in proto.metadata_props if p.key != REFERENCED_FILES_KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    out = model.parent / "no_record.onnx"
    onnx.save(proto, out)
    return out


@pytest.mark.parametrize(
    ("layout", "code"), [("symlink_into_blobs", "file_outside_model_dir"), ("hard_link", "hard_link")]
)
def test_a_link_the_model_records_no_identity_of_is_refused_and_reported_once(tmp_path, gguf_file, layout, code):
    link = _hf_cache(tmp_path, gguf_file) if layout == "symlink_into_blobs" else _hard_link(tmp_path, gguf_file)
    model = _without_record(_convert(link))
    n_values = len(load(model).proto.graph.struct_initializer)
    assert n_values > 5  # every value points into the same file
    diagnostics = validate(str(model))
    assert [d.code for d in diagnostics] == [code]
    with pytest.raises(onnx_struct.ValidationError) as caught:
        onnx_struct.decode(TENSOR, str(model))
    assert caught.value.code == code


def test_check_prints_one_line_for_one_file(tmp_path, gguf_file, capsys):
    model = _without_record(_convert(_hf_cache(tmp_path, gguf_file)))
    assert main(["check", str(model)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "resolves outside the model directory" in lines[0]
