"""Hostile arguments and models for generation (issue 41, items 2, 3, 5, 19, 20): each a
ValidationError naming its cause, or handled, never numpy's or onnxruntime's own failure.

- (2) a model whose logits are NaN: ``non_finite_logits``, not numpy's "probabilities contain NaN";
- (3) ``temperature=1e-320``: logits / temperature overflows; sampled as the limit (greedy);
- (5) ``max_new_tokens`` as numpy's largest integers: compared as Python ints, refused as too long;
- (19) ``accuracy_level`` of another type or range: ``bad_argument``;
- (20) a stdout that cannot encode the reply (PYTHONIOENCODING=ascii): no traceback (slow: a child);
- an onnxruntime failure inside the loop: ``runtime_failure`` naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from support.llm import TinyLlama, greedy, read_weights, spm_tokenize, spm_vocab, write_gguf  # noqa: E402

import onnx_struct  # noqa: E402
from onnx_struct.cli import main  # noqa: E402
from onnx_struct.llm import kv_cache  # noqa: E402
from onnx_struct.llm.generation import Generator, sample  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    config = TinyLlama(**spm_vocab(), seed=5)
    directory = tmp_path_factory.mktemp("adversarial_generate")
    write_gguf(directory / "model.gguf", config)
    assert main(["from-gguf", str(directory / "model.gguf"), str(directory / "model.onnx"), "--graph"]) == 0
    return config, directory


@pytest.fixture(scope="module")
def generator(tiny):
    return Generator(str(tiny[1] / "model.onnx"), accuracy_level=0)


def _nan_model(tiny, tmp_path) -> str:
    """The model converted from its GGUF file with the final norm's weights NaN."""
    import shutil  # noqa: PLC0415

    import gguf  # noqa: PLC0415

    shutil.copy(tiny[1] / "model.gguf", tmp_path / "model.gguf")
    tensor = next(t for t in gguf.GGUFReader(tmp_path / "model.gguf").tensors if t.name == "output_norm.weight")
    with open(tmp_path / "model.gguf", "r+b") as file:
        file.seek(int(tensor.data_offset))
        file.write(np.full(int(tensor.n_elements), np.nan, np.float32).tobytes())
    assert main(["from-gguf", str(tmp_path / "model.gguf"), str(tmp_path / "model.onnx"), "--graph"]) == 0
    return str(tmp_path / "model.onnx")


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_nan_logits_are_refused_naming_the_cause(tiny, tmp_path, temperature):
    with pytest.raises(onnx_struct.ValidationError, match="logits hold NaN") as caught:
        onnx_struct.generate(
            _nan_model(tiny, tmp_path), "hello", max_new_tokens=2, temperature=temperature, accuracy_level=0
        )
    assert (caught.value.path, caught.value.code) == ("generate(logits)", "non_finite_logits")


@pytest.mark.parametrize(
    ("logits", "words"),
    [
        ([0.0, np.nan, 1.0], "NaN"),
        ([0.0, np.inf, 1.0], r"\+inf"),
        ([-np.inf, -np.inf], "only -inf"),
    ],
)
def test_the_sampler_refuses_logits_it_cannot_draw_from(logits, words):
    for temperature in (0.0, 1.0):
        with pytest.raises(onnx_struct.ValidationError, match=words) as caught:
            sample(np.array(logits, np.float32), np.random.default_rng(0), temperature=temperature)
        assert caught.value.code == "non_finite_logits"


def test_a_minus_inf_logit_is_a_token_never_drawn():
    rng = np.random.default_rng(0)
    draws = {sample(np.array([-np.inf, 0.0, 0.0], np.float32), rng, temperature=1.0) for _ in range(200)}
    assert draws == {1, 2}


@pytest.mark.parametrize("temperature", [1e-320, 5e-324, 1e-300])
def test_a_temperature_so_small_that_logits_overflow_samples_the_largest(tiny, generator, temperature):
    config, directory = tiny
    prompt = spm_tokenize(config.tokens, config.token_scores, "hello world")
    expected = greedy(read_weights(directory / "model.gguf"), config, prompt, 6)
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # no overflow warning escapes either
        result = generator.generate(prompt, max_new_tokens=6, temperature=temperature, seed=1, stop_ids=())
    assert result.tokens == expected


@pytest.mark.parametrize("value", [np.uint64(2**64 - 1), np.int64(2**63 - 1), 2**70])
def test_max_new_tokens_as_the_largest_integers_is_refused_before_any_arithmetic(generator, value):
    with pytest.raises(onnx_struct.ValidationError, match="exceed the context length 128") as caught:
        generator.generate([1, 2], max_new_tokens=value)
    assert (caught.value.path, caught.value.code) == ("generate(max_new_tokens)", "bad_argument")
    assert str(int(value)) in caught.value.reason  # the number as given, not wrapped or negative


def test_max_new_tokens_as_a_numpy_integer_in_range_works(generator):
    assert len(generator.generate([1, 2], max_new_tokens=np.uint64(3), stop_ids=()).tokens) == 3


@pytest.mark.parametrize("level", [7, -1, 4.5, "4", 2**70, True, np.float32(4)])
def test_an_accuracy_level_outside_matmulnbits_levels_is_a_bad_argument(tiny, level):
    with pytest.raises(onnx_struct.ValidationError) as caught:
        onnx_struct.generate(str(tiny[1] / "model.onnx"), "hello", max_new_tokens=1, accuracy_level=level)
    assert (caught.value.path, caught.value.code) == ("generate(accuracy_level)", "bad_argument")


def test_an_onnxruntime_failure_in_the_loop_is_a_runtime_failure_naming_it(generator, monkeypatch):
    def failing(self, ids):
        raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : out of memory")

    monkeypatch.setattr(kv_cache.KVCache, "_run", failing)
    with pytest.raises(onnx_struct.ValidationError, match="RuntimeError: .*out of memory") as caught:
        generator.generate([1, 2], max_new_tokens=2)
    assert (caught.value.path, caught.value.code) == ("generate", "runtime_failure")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["generate", "chat"])
def test_an_ascii_stdout_gets_no_traceback(tiny, command):
    """The reply holds characters ASCII lacks (the tiny model emits "é" and U+FFFD): printed as '?'."""
    model = str(tiny[1] / "model.onnx")
    args = ["--prompt", "the café"] if command == "generate" else []
    child = [sys.executable, "-m", "onnx_struct", command, model, *args, "--max-new-tokens", "12"]
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONIOENCODING": "ascii"}
    if command == "chat":  # the tiny file has no chat template: a built-in one would be needed
        pytest.importorskip("onnx_struct.llm.chat.template")
        child += ["--chat-template", "chatml"]
    done = subprocess.run(child, input=b"the caf\xc3\xa9\n", capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr
    unicode = onnx_struct.generate(model, "the café", max_new_tokens=12).text if command == "generate" else None
    if unicode is not None:
        assert not unicode.isascii()
        assert done.stdout.decode("ascii") == unicode.encode("ascii", "replace").decode() + "\n"


def _edited(tiny, tmp_path, edit) -> str:
    """The converted model with ``edit(model)`` applied to its ONNX graph (its struct parts kept:
    onnx.load / onnx.save carry them as unknown fields)."""
    import onnx  # noqa: PLC0415

    model = onnx.load(str(tiny[1] / "model.onnx"))
    edit(model)
    onnx.save(model, str(tmp_path / "model.onnx"))
    return str(tmp_path / "model.onnx")


def test_kv_inputs_edited_to_disagree_with_the_attention_heads_are_refused(tiny, tmp_path):
    """Issue 41 item 8: KV inputs declaring another head count than GroupQueryAttention's
    kv_num_heads failed inside onnxruntime mid-generation."""

    def edit(model):
        for value in model.graph.input:  # every layer alike, so only the attention nodes disagree
            if value.name.startswith("past_key_values."):
                value.type.tensor_type.shape.dim[1].dim_value = 1

    heads = tiny[0].n_kv_heads
    assert heads != 1  # the tiny model has more than one KV head, so the edit changes something
    with pytest.raises(onnx_struct.ValidationError) as caught:
        Generator(_edited(tiny, tmp_path, edit), accuracy_level=0)
    assert caught.value.path.startswith("graph.node[") and f"kv_num_heads is {heads}" in str(caught.value)


def test_one_kv_input_shaped_unlike_the_others_is_refused_naming_it(tiny, tmp_path):
    def edit(model):
        value = next(v for v in model.graph.input if v.name == "past_key_values.1.value")
        value.type.tensor_type.shape.dim[3].dim_value += 8

    with pytest.raises(onnx_struct.ValidationError) as caught:
        Generator(_edited(tiny, tmp_path, edit), accuracy_level=0)
    assert caught.value.path == "graph.input ('past_key_values.1.value')"
