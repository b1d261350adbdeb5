"""onnx_struct.generate / onnx-struct generate and the GGUF tokenizer (onnx_struct/llm/generation.py,
llm/tokenizer/compat.py): token ids against a plain port of llama.cpp's SentencePiece tokenizer
(tests/support/llm.py) on a test vocabulary, greedy tokens against the float64 numpy forward,
EOS stop, streaming, the sampler against hand-computed distributions."""

from __future__ import annotations

import codecs

import numpy as np
import onnx
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from support.llm import (  # noqa: E402
    TEXTS,
    TinyLlama,
    bpe_vocab,
    greedy,
    read_weights,
    spm_detokenize,
    spm_tokenize,
    spm_vocab,
    write_gguf,
)

import onnx_struct  # noqa: E402
from onnx_struct.cli import main  # noqa: E402
from onnx_struct.convert import convert, decode_metadata  # noqa: E402
from onnx_struct.llm.generation import Generator, sample  # noqa: E402
from onnx_struct.llm.tokenizer.compat import GGUFTokenizer  # noqa: E402

PROMPT = "hello world and the café"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    config = TinyLlama(**spm_vocab(), seed=5)
    directory = tmp_path_factory.mktemp("generate")
    write_gguf(directory / "model.gguf", config)
    model = convert(directory / "model.gguf", graph=True)
    return config, directory, model, read_weights(directory / "model.gguf")


@pytest.fixture(scope="module")
def generator(tiny):
    return Generator(tiny[2], accuracy_level=0)


@pytest.mark.parametrize("text", TEXTS)
def test_spm_token_ids_match_llama_cpp_algorithm(tiny, text):
    config, _, model, _ = tiny
    tokenizer = GGUFTokenizer(decode_metadata(model))
    expected = spm_tokenize(config.tokens, config.token_scores, text)
    ids = tokenizer.encode(text)
    assert ids == expected
    assert tokenizer.decode(ids) == spm_detokenize(config.tokens, expected)


# Hand-derived from bpe_vocab(): bytes are ids 0-255, merged pieces 256-267 in merge order
# ("he", "Ġw", "or", "Ġwor", "Ġworl", "Ġworld", "ll", "Ġt", "Ġthe", "hell", "hello", "12"), BOS 268;
# llama-bpe splits words, single spaces and digits in threes before merging.
BPE_CASES = {
    "hello world": [268, 266, 261],  # whole words that are tokens
    "the 12345": [268, 116, 256, 32, 267, 51, 52, 53],  # "the" -> t + he; " "; "123" -> 12 + 3; "45"
    "Hello": [268, 72, 101, 262, 111],  # no "H e" merge: H, e, ll, o
    "h\u00e9llo": [268, 104, 195, 169, 262, 111],  # é as its two UTF-8 bytes
}


@pytest.mark.parametrize("text", sorted(BPE_CASES))
def test_byte_level_bpe_token_ids(tmp_path, text):
    path = tmp_path / "bpe.gguf"
    write_gguf(
        path, TinyLlama(**bpe_vocab(), default_type="F32", n_layers=1, n_embd=64, n_ff=64, n_heads=2, n_kv_heads=1)
    )
    tokenizer = GGUFTokenizer(decode_metadata(convert(path)))
    assert tokenizer.encode(text) == BPE_CASES[text]
    assert tokenizer.decode(BPE_CASES[text]) == text


def test_greedy_generation_matches_numpy_forward(tiny, generator):
    config, _, _, weights = tiny
    result = generator.generate(PROMPT, max_new_tokens=12, stop_at_eos=False)
    prompt = spm_tokenize(config.tokens, config.token_scores, PROMPT)
    assert result.prompt_tokens == prompt
    assert result.tokens == greedy(weights, config, prompt, 12)
    expected_text = spm_detokenize(config.tokens, prompt + result.tokens)[len(spm_detokenize(config.tokens, prompt)) :]
    assert result.text == expected_text


def test_generation_stops_at_eos(tiny):
    config, _, _, weights = tiny
    prompt = spm_tokenize(config.tokens, config.token_scores, PROMPT)
    expected = greedy(weights, config, prompt, 12)
    # EOS := the first token that does not appear before it in the oracle's greedy run
    stop = next(i for i in range(1, 12) if expected[i] not in expected[:i])
    metadata_eos = TinyLlama(**{**spm_vocab(), "seed": 5, "eos": expected[stop]})
    path = tiny[1] / "eos.gguf"
    write_gguf(path, metadata_eos)
    result = onnx_struct.generate(convert(path, graph=True), PROMPT, max_new_tokens=12, accuracy_level=0)
    assert result.tokens == expected[:stop]
    assert result.stopped_at_eos


def test_streamed_pieces_make_the_text(generator):
    pieces: list[str] = []
    result = generator.generate(PROMPT, max_new_tokens=10, stream=pieces.append, stop_at_eos=False)
    assert "".join(pieces) == result.text
    # Python's incremental UTF-8 decoder is the oracle of "whole characters only": it holds an
    # unfinished character back and replaces a byte that can start none (a lone continuation byte)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    expected = [decoder.decode(generator.tokenizer.token_to_piece(t)) for t in result.tokens]
    expected[-1] += decoder.decode(b"", final=True)
    assert [p for p in pieces if p] == [p for p in expected if p]


def test_threads_option_gives_the_same_tokens(tiny, generator):
    """--threads goes through SessionOptions (the lowered model keeps DequantizeLinear there)."""
    expected = generator.generate(PROMPT, max_new_tokens=6, stop_at_eos=False).tokens
    threaded = Generator(tiny[2], threads=1, accuracy_level=0).generate(PROMPT, max_new_tokens=6, stop_at_eos=False)
    assert threaded.tokens == expected


def test_cli_generate_prints_the_text(tiny, generator, capsys):
    directory = tiny[1]
    assert (
        main(["from-gguf", str(directory / "model.gguf"), str(directory / "model.onnx"), "--graph", "--reference"]) == 0
    )
    capsys.readouterr()
    args = ["generate", str(directory / "model.onnx"), "--prompt", PROMPT, "--max-new-tokens", "8"]
    assert main([*args, "--accuracy-level", "0"]) == 0
    out, err = capsys.readouterr()
    expected = generator.generate(PROMPT, max_new_tokens=8)
    assert out == expected.text + "\n"
    assert "new tokens at" in err
    assert main([*args, "--max-new-tokens", "1000"]) == 2
    assert "--max-new-tokens: " in (err := capsys.readouterr().err) and "exceed the context length 128" in err


def test_a_prompt_past_the_context_or_without_tokens_is_a_bad_argument(generator):
    """Like every other argument of generate (they were plain ValueErrors)."""
    with pytest.raises(onnx_struct.ValidationError, match="exceed the context length 128") as info:
        generator.generate(PROMPT, max_new_tokens=1000)
    assert (info.value.path, info.value.code) == ("generate(max_new_tokens)", "bad_argument")
    with pytest.raises(onnx_struct.ValidationError, match="the prompt has no tokens") as info:
        generator.generate([], max_new_tokens=1)
    assert (info.value.path, info.value.code) == ("generate(prompt)", "bad_argument")


def test_sampling_is_seeded(generator):
    first = generator.generate(PROMPT, max_new_tokens=8, temperature=0.8, top_k=20, top_p=0.9, seed=7)
    second = generator.generate(PROMPT, max_new_tokens=8, temperature=0.8, top_k=20, top_p=0.9, seed=7)
    assert first.tokens == second.tokens


def test_a_thread_count_past_the_limit_is_refused_before_onnxruntime_starts_them(tiny, capsys):
    """onnxruntime starts its whole pool at session creation: 10^6 threads crashed the process."""
    with pytest.raises(onnx_struct.ValidationError, match="from 1 to 1024") as caught:
        Generator(tiny[2], threads=10**6)
    assert (caught.value.path, caught.value.code) == ("generate(threads)", "bad_argument")
    onnx.save(tiny[2], tiny[1] / "threads.onnx")
    argv = ["generate", str(tiny[1] / "threads.onnx"), "--prompt", "hi", "--threads", "1000000"]
    assert main(argv) == 2
    assert "--threads" in capsys.readouterr().err


@pytest.mark.parametrize("piece", ["<0xZZ>", "<0x+1>"])
def test_a_byte_piece_that_is_not_hexadecimal_is_refused_naming_it(tiny, piece):
    metadata = decode_metadata(tiny[2])
    n = len(metadata["tokenizer.ggml.tokens"])
    hostile = {
        "tokenizer.ggml.tokens": [piece, *metadata["tokenizer.ggml.tokens"][1:]],
        "tokenizer.ggml.token_type": [6] + [1] * (n - 1),  # 6: a byte piece
    }
    with pytest.raises(onnx_struct.ValidationError, match="is not <0xXX>") as caught:
        GGUFTokenizer({**metadata, **hostile})
    assert caught.value.path == "gguf.kv['tokenizer.ggml.tokens'][0]"


def test_a_bytes_prompt_is_refused(generator):
    with pytest.raises(onnx_struct.ValidationError) as caught:
        generator.generate(b"hello", max_new_tokens=1)  # would read as the ids 104, 101, ...
    assert (caught.value.path, caught.value.code) == ("generate(prompt)", "bad_argument")


# --------------------------------------------------------------------------------- the sampler
LOGITS = np.log(np.array([1.0, 2.0, 4.0, 8.0]))  # softmax: 1/15, 2/15, 4/15, 8/15


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"temperature": 1.0}, [1 / 15, 2 / 15, 4 / 15, 8 / 15]),
        ({"temperature": 1.0, "top_k": 2}, [0, 0, 1 / 3, 2 / 3]),
        ({"temperature": 1.0, "top_p": 0.8}, [0, 0, 1 / 3, 2 / 3]),  # 8/15 < 0.8 <= 12/15
        ({"temperature": 1.0, "top_p": 0.5}, [0, 0, 0, 1]),  # 8/15 reaches 0.5 alone
        ({"temperature": 0.5}, np.array([1, 4, 16, 64]) / 85),  # logits / 0.5: squared weights
        ({"temperature": 0.0}, [0, 0, 0, 1]),
    ],
)
def test_sampler_distribution(options, expected):
    rng = np.random.default_rng(0)
    draws = np.array([sample(LOGITS, rng, **options) for _ in range(20000)])
    frequencies = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(frequencies, expected, atol=0.015)


# ----------------------------------------------------------------------------------- refusals
def test_a_model_without_decoder_graph_is_refused(tiny):
    with pytest.raises(onnx_struct.ValidationError, match="no decoder graph"):
        Generator(convert(tiny[1] / "model.gguf"))


def test_unknown_tokenizer_models_are_refused(tiny):
    """llama.cpp refuses a tokenizer model or a pre-tokenizer name it does not know."""
    metadata = decode_metadata(tiny[2])
    with pytest.raises(onnx_struct.ValidationError, match="tokenizer model 'no-such-model'") as caught:
        GGUFTokenizer({**metadata, "tokenizer.ggml.model": "no-such-model"})
    assert caught.value.path == "gguf.kv['tokenizer.ggml.model']"
    with pytest.raises(onnx_struct.ValidationError, match="pre-tokenizer type 'no-such-pre'") as caught:
        GGUFTokenizer(
            {
                **metadata,
                "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.pre": "no-such-pre",
                "tokenizer.ggml.merges": [],
            }
        )
    assert caught.value.path == "gguf.kv['tokenizer.ggml.pre']"
    with pytest.raises(onnx_struct.ValidationError, match="one score per token"):
        GGUFTokenizer({**metadata, "tokenizer.ggml.scores": [0.0]})


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"tokenizer.ggml.add_bos_token": "false"}, "gguf.kv['tokenizer.ggml.add_bos_token']"),  # was true
        ({"tokenizer.ggml.add_space_prefix": 0}, "gguf.kv['tokenizer.ggml.add_space_prefix']"),
    ],
)
def test_tokenizer_flags_that_are_not_booleans_are_refused_naming_the_key(tiny, changes, path):
    metadata = decode_metadata(tiny[2])
    with pytest.raises(onnx_struct.ValidationError, match="not a boolean") as caught:
        GGUFTokenizer({**metadata, **changes})
    assert caught.value.path == path


def test_a_model_without_context_length_is_refused_naming_the_key(tiny):
    model = onnx.ModelProto()
    model.CopyFrom(tiny[2])
    kept = [p for p in model.metadata_props if p.key != "llama.context_length"]
    assert len(kept) == len(model.metadata_props) - 1  # the GGUF key is stored under its own name
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    with pytest.raises(onnx_struct.ValidationError) as caught:
        Generator(model, accuracy_level=0)
    assert caught.value.path == "gguf.kv['llama.context_length']"


def test_a_context_length_past_the_graphs_rope_tables_is_refused(tiny):
    """The graph was built for 128 positions; metadata claiming more made onnxruntime's
    GroupQueryAttention fail past position 128 (a RuntimeError mid-generation)."""
    model = onnx.ModelProto()
    model.CopyFrom(tiny[2])
    entry = next(p for p in model.metadata_props if p.key == "llama.context_length")
    assert entry.value == str(tiny[0].context_length) == "128"
    entry.value = "100000"
    with pytest.raises(onnx_struct.ValidationError, match="100000 positions, but the graph's RoPE tables cover 128"):
        Generator(model, accuracy_level=0)


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("llama.block_count", "{not json"),
        ("onnx_struct.gguf.value_types", "{not json"),
        ("llama.block_count", "[" * 100_000),  # json's RecursionError, not a ValueError
        ("onnx_struct.gguf.value_types", "[" * 100_000),
        # a lone surrogate: the tokenizer's TypeError from tokenizers (no UTF-8 GGUF string holds one)
        ("tokenizer.ggml.tokens", '["a", "\\ud800"]'),
    ],
)
def test_metadata_that_is_not_json_is_refused_naming_the_entry(tiny, key, text):
    props = {p.key: p.value for p in tiny[2].metadata_props}
    props[key] = text
    with pytest.raises(onnx_struct.ValidationError) as caught:
        decode_metadata(props)
    assert caught.value.path == f"metadata_props[{key!r}]"


def _with_metadata(model: onnx.ModelProto, **changes: str) -> onnx.ModelProto:
    """A copy of ``model`` whose GGUF metadata entries ``changes`` hold other JSON text."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for prop in out.metadata_props:
        prop.value = changes.pop(prop.key, prop.value)
    assert not changes, changes  # every key changed is a stored entry
    return out


def test_a_context_length_over_the_limit_is_refused_by_the_generator(tiny):
    with pytest.raises(onnx_struct.ValidationError) as caught:
        Generator(_with_metadata(tiny[2], **{"llama.context_length": str(2**40)}), accuracy_level=0)
    assert caught.value.path == "gguf.kv['llama.context_length']"
    assert caught.value.code == "limit_exceeded"


def test_a_vocabulary_shorter_than_the_logits_is_refused_by_the_generator(tiny):
    import json

    metadata = decode_metadata(tiny[2])
    short = {
        key: json.dumps(metadata[key][:-1])
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")
    }
    with pytest.raises(onnx_struct.ValidationError, match=r"\d+ tokens, but the model's logits have") as caught:
        Generator(_with_metadata(tiny[2], **short), accuracy_level=0)
    assert caught.value.path == "gguf.kv['tokenizer.ggml.tokens']"


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"prompt": [1, "n_vocab"]}, "generate(prompt)[1]"),
        ({"prompt": [1, 2**70]}, "generate(prompt)[1]"),
        ({"prompt": [-1]}, "generate(prompt)[0]"),
        ({"prompt": [1, 2.0]}, "generate(prompt)[1]"),
        ({"prompt": [True]}, "generate(prompt)[0]"),
        ({"max_new_tokens": -1}, "generate(max_new_tokens)"),
        ({"max_new_tokens": 2.5}, "generate(max_new_tokens)"),
        ({"temperature": float("nan")}, "generate(temperature)"),
        ({"temperature": float("inf")}, "generate(temperature)"),
        ({"temperature": -0.5}, "generate(temperature)"),
        ({"temperature": "0.5"}, "generate(temperature)"),
        ({"top_k": -1}, "generate(top_k)"),
        ({"top_k": 1.5}, "generate(top_k)"),
        ({"top_p": 0.0}, "generate(top_p)"),
        ({"top_p": 1.5}, "generate(top_p)"),
        ({"top_p": float("nan")}, "generate(top_p)"),
        ({"seed": -1}, "generate(seed)"),
        ({"seed": 1.5}, "generate(seed)"),
    ],
)
def test_generate_arguments_out_of_range_are_refused(generator, arguments, path):
    arguments = dict(arguments)
    prompt = [generator.n_vocab if t == "n_vocab" else t for t in arguments.pop("prompt", [1, 2])]
    with pytest.raises(onnx_struct.ValidationError) as caught:
        onnx_struct.generate(generator, prompt, **{"max_new_tokens": 2, **arguments})
    assert (caught.value.path, caught.value.code) == (path, "bad_argument")


def test_the_last_token_id_is_accepted(generator):
    """The refusal's bound is the vocabulary: its last id is a prompt token."""
    result = generator.generate([1, generator.n_vocab - 1], max_new_tokens=1, stop_at_eos=False)
    assert result.prompt_tokens == [1, generator.n_vocab - 1]


def test_a_thread_count_below_one_is_refused(tiny):
    with pytest.raises(onnx_struct.ValidationError) as caught:
        Generator(tiny[2], threads=0)
    assert (caught.value.path, caught.value.code) == ("generate(threads)", "bad_argument")


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (["--temperature", "nan"], "--temperature: nan is not a finite number"),
        (["--top-p", "nan"], "--top-p: nan is not a number in (0, 1]"),
        (["--seed", "-1"], "--seed: -1 is not None or an integer >= 0"),
        (["--max-new-tokens", "-1"], "--max-new-tokens: -1 is not an integer >= 0"),
        (["--top-k", "-2"], "--top-k: -2 is not an integer >= 0"),
        (["--threads", "0"], "--threads must be from 1 to 1024"),
    ],
)
def test_cli_generate_options_out_of_range_are_usage_errors(tmp_path, capsys, option, words):
    """Refused before the model is read (the file does not exist): exit 2, as other usage errors."""
    assert main(["generate", str(tmp_path / "absent.onnx"), "--prompt", "x", *option]) == 2
    assert words in capsys.readouterr().err


# ------------------------------------------------------------------------- hostile tokenizer metadata
def test_a_merge_naming_no_token_is_accepted_as_llama_cpp_accepts_it(tmp_path):
    """llama.cpp merges by the ranks alone: a merged symbol that is no token falls back to the
    tokens of its single bytes (those that have one), so " x" with a first merge "\u0120 x" (no
    token "\u0120x") loses its space: the byte 0x20 as GPT-2's character is "\u0120", whose UTF-8
    bytes are no tokens, and only "x" remains."""
    path = tmp_path / "bpe.gguf"
    write_gguf(
        path, TinyLlama(**bpe_vocab(), default_type="F32", n_layers=1, n_embd=64, n_ff=64, n_heads=2, n_kv_heads=1)
    )
    metadata = decode_metadata(convert(path))
    tokens = metadata["tokenizer.ggml.tokens"]
    assert "\u0120x" not in tokens and "x" in tokens
    tokenizer = GGUFTokenizer(
        {**metadata, "tokenizer.ggml.merges": ["\u0120 x", "h zz", *metadata["tokenizer.ggml.merges"]]}
    )
    assert tokenizer.encode(" x", add_bos=False) == [tokens.index("x")]
    with pytest.raises(
        onnx_struct.ValidationError, match=r"pre-tokenizer type \['llama-bpe'\]|\['llama-bpe'\] is not a string"
    ) as caught:
        GGUFTokenizer({**metadata, "tokenizer.ggml.pre": ["llama-bpe"]})
    assert caught.value.path == "gguf.kv['tokenizer.ggml.pre']"


def test_scores_that_are_not_numbers_are_refused_naming_the_key(tiny):
    metadata = decode_metadata(tiny[2])
    for scores in (["1.0"] * len(metadata["tokenizer.ggml.scores"]), [True] * len(metadata["tokenizer.ggml.scores"])):
        with pytest.raises(onnx_struct.ValidationError, match="array of numbers") as caught:
            GGUFTokenizer({**metadata, "tokenizer.ggml.scores": scores})
        assert caught.value.path == "gguf.kv['tokenizer.ggml.scores']"


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("tokenizer.ggml.scores", True),  # one bool among floats
        ("tokenizer.ggml.scores", np.float32(1.0)),  # a numpy scalar is not a Python number
        ("tokenizer.ggml.token_type", False),
        ("tokenizer.ggml.token_type", 1.0),
        ("tokenizer.ggml.tokens", b"t"),
        ("tokenizer.ggml.tokens", None),
    ],
)
def test_one_wrong_element_in_a_vocabulary_array_is_refused_naming_the_key(tiny, key, bad):
    """The arrays' element types are judged by their set of types first (vocab.py's _all_of): one
    wrong element anywhere is still found."""
    metadata = decode_metadata(tiny[2])
    values = list(metadata[key])
    values[len(values) // 2] = bad
    with pytest.raises(onnx_struct.ValidationError) as caught:
        GGUFTokenizer({**metadata, key: values})
    assert caught.value.path == f"gguf.kv[{key!r}]"


def test_integer_scores_are_read_as_floats(tiny):
    metadata = decode_metadata(tiny[2])
    scores = [int(round(v)) for v in metadata["tokenizer.ggml.scores"]]
    vocab = GGUFTokenizer({**metadata, "tokenizer.ggml.scores": scores}).tokenizer.vocab
    assert vocab.scores == [float(v) for v in scores] and all(type(v) is float for v in vocab.scores)


def _spm_metadata(tiny, extra: list[str]) -> dict[str, object]:
    metadata = decode_metadata(tiny[2])
    return {
        **metadata,
        "tokenizer.ggml.tokens": metadata["tokenizer.ggml.tokens"] + extra,
        "tokenizer.ggml.scores": metadata["tokenizer.ggml.scores"] + [-1000.0] * len(extra),
        "tokenizer.ggml.token_type": metadata["tokenizer.ggml.token_type"] + [1] * len(extra),
    }


def test_a_very_long_piece_builds_and_tokenizes_as_llama_cpp(tiny):
    """A 400,000-character piece (splitting it at every cut was quadratic) changes no tokenization."""
    config = tiny[0]
    metadata = _spm_metadata(tiny, ["\u2581" + "q" * 400_000])
    tokenizer = GGUFTokenizer(metadata)
    tokens, scores = metadata["tokenizer.ggml.tokens"], metadata["tokenizer.ggml.scores"]
    for text in ("hello world and the café", "q" * 50):
        assert tokenizer.encode(text) == spm_tokenize(tokens, scores, text)
    assert tokenizer.encode("hello") == spm_tokenize(config.tokens, config.token_scores, "hello")


def test_many_long_pieces_of_distinct_lengths_build_and_tokenize(tiny):
    """Pieces of 1,500 distinct lengths (building every split of every piece was quadratic; the
    SentencePiece session indexes pieces without enumerating splits)."""
    metadata = _spm_metadata(tiny, ["r" * n for n in range(2, 1500)])
    tokenizer = GGUFTokenizer(metadata)
    tokens, scores = metadata["tokenizer.ggml.tokens"], metadata["tokenizer.ggml.scores"]
    assert tokenizer.encode("rrrr") == spm_tokenize(tokens, scores, "rrrr")
    assert tokenizer.decode(tokenizer.encode("rrrr", add_bos=False)) == "rrrr"
