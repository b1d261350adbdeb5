"""``onnx-struct from-gguf --graph --reference --genai DIR`` / ``export genai``: onnxruntime-genai's
own generation loop (og.Model, og.Generator, greedy) on DIR gives the tokens onnx_struct.generate
gives on the same GGUF file, and genai's tokenizer (onnxruntime-extensions reading our
tokenizer.json) gives our ids.

Slow tier (a model session each); skipped where onnxruntime_genai is not installed.
"""

from __future__ import annotations

import json

import onnx
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
og = pytest.importorskip("onnxruntime_genai")

from support.llm import TEXTS, TinyLlama, bpe_vocab, spm_vocab, write_gguf  # noqa: E402

import onnx_struct  # noqa: E402
from onnx_struct.cli import main  # noqa: E402
from onnx_struct.errors import ValidationError  # noqa: E402
from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow
N_NEW = 40


def _genai_greedy(folder, prompt: list[int], n: int) -> list[int]:
    """onnxruntime-genai's example loop: append the prompt, generate_next_token until done."""
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + n, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    out = []
    while not generator.is_done():
        generator.generate_next_token()
        out.append(int(generator.get_next_tokens()[0]))
    return out


@pytest.mark.parametrize("share_buffer", [False, True], ids=["own-cache", "shared-buffer"])
@pytest.mark.parametrize("vocab", [bpe_vocab(), spm_vocab()], ids=["bpe", "spm"])
def test_genai_generates_our_greedy_tokens(tmp_path, vocab, share_buffer):
    gguf_path, model_path, folder = tmp_path / "tiny.gguf", tmp_path / "tiny.onnx", tmp_path / "genai"
    write_gguf(gguf_path, TinyLlama(**vocab))
    argv = ["from-gguf", str(gguf_path), str(model_path), "--graph", "--reference", "--genai", str(folder), "--quiet"]
    assert main(argv) == 0
    config = json.loads((folder / "genai_config.json").read_text())
    assert config["model"]["decoder"]["num_hidden_layers"] == 2
    assert config["model"]["decoder"]["num_key_value_heads"] == 2
    assert config["model"]["decoder"]["head_size"] == 32
    assert config["model"]["vocab_size"] == vocab["n_vocab"]
    # genai's two cache modes: its own past/present tensors, or one buffer of max_length it shares
    config["search"]["past_present_share_buffer"] = share_buffer
    (folder / "genai_config.json").write_text(json.dumps(config))

    ours = onnx_struct.generate(model_path, "hello world", max_new_tokens=N_NEW)
    theirs = _genai_greedy(folder, list(ours.prompt_tokens), N_NEW)
    # genai stops at an end-of-generation id as ours does; up to there the tokens are the same
    assert theirs == list(ours.tokens)

    tokenizer, genai_tokenizer = load_tokenizer(model_path), og.Tokenizer(og.Model(str(folder)))
    for text in TEXTS:  # genai's encode adds no BOS (its chat templates write it)
        assert [int(i) for i in genai_tokenizer.encode(text)] == tokenizer.encode(text, add_bos=False, special=True)


def test_export_genai_into_the_models_own_directory_references_the_gguf(tmp_path):
    gguf_path, model_path = tmp_path / "tiny.gguf", tmp_path / "tiny.onnx"
    write_gguf(gguf_path, TinyLlama(**bpe_vocab()))
    assert main(["from-gguf", str(gguf_path), str(model_path), "--graph", "--reference", "--quiet"]) == 0
    assert main(["export", "genai", str(model_path), str(tmp_path)]) == 0
    lowered = onnx.load(tmp_path / "model.onnx", load_external_data=False)
    locations = {e.value for t in lowered.graph.initializer for e in t.external_data if e.key == "location"}
    assert "tiny.gguf" in locations  # quantized leaves that are contiguous runs of the file stay referenced
    ours = onnx_struct.generate(model_path, [268, 266], max_new_tokens=8)
    assert _genai_greedy(tmp_path, [268, 266], 8) == list(ours.tokens)


def test_a_model_without_a_decoder_graph_is_refused_and_nothing_written(tmp_path):
    gguf_path, model_path, folder = tmp_path / "tiny.gguf", tmp_path / "tiny.onnx", tmp_path / "genai"
    write_gguf(gguf_path, TinyLlama(**bpe_vocab()))
    assert main(["from-gguf", str(gguf_path), str(model_path), "--quiet"]) == 0  # no --graph
    from onnx_struct.convert.genai import export_genai  # noqa: PLC0415

    with pytest.raises(ValidationError) as caught:
        export_genai(model_path, folder)
    assert caught.value.code == "not_a_decoder"
    assert not folder.exists()


def test_export_genai_at_accuracy_level_0_matches_generate_at_level_0(tmp_path):
    gguf_path, model_path, folder = tmp_path / "tiny.gguf", tmp_path / "tiny.onnx", tmp_path / "genai"
    write_gguf(gguf_path, TinyLlama(**bpe_vocab()))
    assert main(["from-gguf", str(gguf_path), str(model_path), "--graph", "--reference", "--quiet"]) == 0
    assert main(["export", "genai", str(model_path), str(folder), "--accuracy-level", "0"]) == 0
    ours = onnx_struct.generate(model_path, [268, 266], max_new_tokens=N_NEW, accuracy_level=0)
    assert _genai_greedy(folder, [268, 266], N_NEW) == list(ours.tokens)


def test_a_gguf_in_the_hugging_face_cache_exports_a_folder_genai_loads(tmp_path):
    """onnxruntime refuses external data that is a symlink out of the model's directory (the
    cache's snapshots/<rev>/x.gguf -> ../../blobs/<sha>): the export copies the weights instead."""
    snapshot = tmp_path / "models--o--n" / "snapshots" / "rev"
    blobs = tmp_path / "models--o--n" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    write_gguf(blobs / "0123abcd", TinyLlama(**bpe_vocab()))
    (snapshot / "tiny.gguf").symlink_to("../../blobs/0123abcd")
    model_path = snapshot / "tiny.onnx"
    argv = ["from-gguf", str(snapshot / "tiny.gguf"), str(model_path), "--graph", "--reference", "--quiet"]
    assert main([*argv, "--genai", str(snapshot)]) == 0
    lowered = onnx.load(snapshot / "model.onnx", load_external_data=False)
    locations = {e.value for t in lowered.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"model.onnx.data"}
    ours = onnx_struct.generate(model_path, [268, 266], max_new_tokens=8)
    assert _genai_greedy(snapshot, [268, 266], 8) == list(ours.tokens)
