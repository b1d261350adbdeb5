"""tokenizer.json from a GGUF vocabulary (onnx_struct.llm.tokenizer.hf_export): HF ``tokenizers``
and ``transformers.PreTrainedTokenizerFast`` give our tokenizer's ids (ours match llama.cpp,
tests/test_tokenizer_vocab_files.py), and what HF cannot express is refused, not approximated.

Texts: llama.cpp's tokenizer test inputs (tests/data/ggml-vocab-*.inp) and support.llm.TEXTS;
in the slow tier also every vocabulary of llama.cpp's models/ against our ids and llama.cpp's own
expected ids (.out), where llama.cpp's source is at hand (ONNX_STRUCT_LLAMA_CPP_SOURCE).
"""

from __future__ import annotations

import json
import pathlib

import pytest
from support.llama_cpp_source import llama_cpp_source, vocab_cases
from support.llm import TEXTS, bpe_vocab, spm_vocab
from support.tiny_vocabs import spm_metadata, wpm_metadata

from onnx_struct.errors import ValidationError
from onnx_struct.llm.tokenizer import hf_export, pre_types
from onnx_struct.llm.tokenizer.regex_split import Splitter
from onnx_struct.llm.tokenizer.tokenizer import Tokenizer, load_tokenizer
from onnx_struct.llm.tokenizer.vocab import load_vocab

tokenizers = pytest.importorskip("tokenizers")

DATA = pathlib.Path(__file__).parent / "data"
SEPARATOR = "\n__ggml_vocab_test__\n"
# texts where HF's regex engine and llama.cpp's split apart (the refused pre types' witnesses)
EXTRA = ["x\u00a0y\u2003z\u3000w", "Hello WORLD HelloWorld it's IT'S", "1234567 12 123456789012", "中文 日本語 한국어"]


def _texts() -> list[str]:
    texts = list(TEXTS) + EXTRA
    for path in sorted(DATA.glob("ggml-vocab-*.inp")):
        texts += path.read_text(encoding="utf-8").split(SEPARATOR)
    return list(dict.fromkeys(texts))


ALL_TEXTS = _texts()


def _metadata(vocab: dict, **extra) -> dict[str, object]:
    metadata = {
        "tokenizer.ggml.model": vocab.get("tokenizer_model", "llama"),
        "tokenizer.ggml.tokens": vocab["tokens"],
        "tokenizer.ggml.token_type": vocab["token_types"],
        "tokenizer.ggml.bos_token_id": vocab.get("bos", 1),
        "tokenizer.ggml.eos_token_id": vocab.get("eos", 2),
    }
    if "token_scores" in vocab:
        metadata["tokenizer.ggml.scores"] = vocab["token_scores"]
    if "add_bos" in vocab:
        metadata["tokenizer.ggml.add_bos_token"] = vocab["add_bos"]
    if "merges" in vocab:
        metadata["tokenizer.ggml.merges"] = vocab["merges"]
        metadata["tokenizer.ggml.pre"] = vocab["pre"]
    return {**metadata, **extra}


def _tokenizer(metadata) -> Tokenizer:
    return Tokenizer(load_vocab(metadata))


def _assert_same_ids(ours: Tokenizer, hf) -> None:
    """HF's ids equal ours with special tokens parsed (its default) and, with
    ``encode_special_tokens``, without (llama.cpp's parse_special=False); BOS as the file says."""
    for special in (True, False):
        hf.encode_special_tokens = not special
        wrong = [(t, ours.encode(t, special=special), hf.encode(t).ids) for t in ALL_TEXTS]
        wrong = [case for case in wrong if case[1] != case[2]]
        assert not wrong, f"{len(wrong)} of {len(ALL_TEXTS)} differ (special={special}); first: {wrong[0]}"


@pytest.mark.parametrize("vocab", [spm_vocab(), bpe_vocab()], ids=["spm", "bpe"])
def test_tokenizer_json_gives_our_ids(vocab):
    ours = _tokenizer(_metadata(vocab))
    _assert_same_ids(ours, hf_export.hf_tokenizer(ours))


def test_every_expressed_pre_type_splits_as_ours_and_every_refused_one_differs():
    """The refusal list is not a guess: each refused pre type splits some text differently in HF
    (or does not compile there), each other one splits every text as our llama.cpp splitter does."""
    differing = set()
    for pre, regexes in pre_types.REGEX_LISTS.items():
        try:
            hf = tokenizers.pre_tokenizers.Sequence(
                [tokenizers.pre_tokenizers.Split(tokenizers.Regex(r), behavior="isolated") for r in regexes]
            )
        except Exception:  # noqa: BLE001 - Oniguruma's refusal of a category it does not have
            differing.add(pre)
            continue
        splitter = Splitter(regexes)
        if any(list(splitter.split(t)) != [w for w, _ in hf.pre_tokenize_str(t)] for t in ALL_TEXTS):
            differing.add(pre)
    assert differing == set(hf_export.UNEXPRESSIBLE_PRE_TYPES)


def test_a_refused_pre_type_names_itself():
    ours = _tokenizer(_metadata({**bpe_vocab(), "pre": "kimi-k2"}))
    with pytest.raises(ValidationError, match="kimi_k2") as caught:
        hf_export.hf_tokenizer(ours)
    assert caught.value.code == "unsupported_tokenizer"
    assert caught.value.path == "gguf.kv['tokenizer.ggml.pre']"


def test_a_tokenizer_model_without_hf_equivalent_is_refused():
    ours = _tokenizer(wpm_metadata(["hello", "world"]))
    with pytest.raises(ValidationError, match="bert") as caught:
        hf_export.hf_tokenizer(ours)
    assert caught.value.code == "unsupported_tokenizer"


def test_spm_pieces_with_one_score_are_refused_as_no_ranking_can_order_them():
    # "ab" and "bc" tie: SentencePiece merges whichever is leftmost in "abc", a ranking cannot
    ours = _tokenizer(spm_metadata({"a": -1.0, "b": -2.0, "c": -3.0, "ab": -5.0, "bc": -5.0}))
    with pytest.raises(ValidationError, match="same score") as caught:
        hf_export.hf_tokenizer(ours)
    assert caught.value.code == "unsupported_tokenizer"


@pytest.mark.parametrize("order", [range(2, 9), range(8, 1, -1)], ids=["short-first", "long-first"])
def test_spm_runs_of_one_character_of_every_length_may_share_a_score(order):
    """llama's multi-space pieces share a sentinel score: ranked longest first they merge as
    SentencePiece's leftmost-first rule merges them, whatever their ids."""
    spaces = {"\u2581" * n: -100.0 for n in order}
    ours = _tokenizer(spm_metadata({"a": -1.0, "b": -2.0, "\u2581": -3.0, **spaces}))
    hf = hf_export.hf_tokenizer(ours)
    for n in range(1, 40):
        for text in (" " * n, "a" + " " * n + "b", " " * n + "a" + " " * (n // 2)):
            assert hf.encode(text).ids == ours.encode(text, special=True)


def test_spm_runs_with_a_missing_length_sharing_a_score_are_refused():
    spaces = {"\u2581" * n: -100.0 for n in (2, 4, 8)}
    ours = _tokenizer(spm_metadata({"a": -1.0, "\u2581": -3.0, **spaces}))
    with pytest.raises(ValidationError, match="same score"):
        hf_export.hf_tokenizer(ours)


@pytest.mark.slow  # importing transformers takes about a second
def test_save_pretrained_writes_the_folder_transformers_loads(tmp_path):
    transformers = pytest.importorskip("transformers")
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    ours = _tokenizer(_metadata(bpe_vocab()))
    ours.metadata = {"tokenizer.chat_template": template}
    written = ours.save_pretrained(tmp_path)
    assert sorted(p.name for p in written) == sorted([*hf_export.TOKENIZER_FILES, "chat_template.jinja"])
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["bos_token"] == "<|begin_of_text|>" and config["add_bos_token"] is True
    fast = transformers.PreTrainedTokenizerFast.from_pretrained(tmp_path)
    for text in ALL_TEXTS:
        assert fast(text)["input_ids"] == ours.encode(text, special=True)
    assert fast.chat_template == template


# llama.cpp's test vocabularies (models/ggml-vocab-*.gguf) without an exact HF equivalent (baichuan:
# SPM pieces "-->" and "---" share a score; the others: their tokenizer model or pre type)
REFUSED_VOCABULARIES = {"baichuan", "bert-bge", "deepseek-coder", "deepseek-llm", "gemma-4", "nomic-bert-moe"}
VOCABULARIES = [
    "aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
    "gpt-neox", "llama-bpe", "llama-spm", "mpt", "nomic-bert-moe", "phi-3", "qwen2", "qwen35", "refact", "starcoder",
]  # fmt: skip


WITH_CASES = set(VOCABULARIES) - {"aquila", "baichuan", "gpt-neox"}  # those have no .inp/.out


@pytest.mark.slow
@pytest.mark.parametrize("name", VOCABULARIES)
def test_llama_cpp_vocabularies_export_with_our_ids_or_are_refused(name):
    source = llama_cpp_source()
    if source is None:
        pytest.skip("llama.cpp's source is not at hand (ONNX_STRUCT_LLAMA_CPP_SOURCE)")
    ours = load_tokenizer(source / "models" / f"ggml-vocab-{name}.gguf")
    if name in REFUSED_VOCABULARIES:
        with pytest.raises(ValidationError) as caught:
            hf_export.hf_tokenizer(ours)
        assert caught.value.code == "unsupported_tokenizer"
        return
    hf = hf_export.hf_tokenizer(ours)
    _assert_same_ids(ours, hf)
    # and llama.cpp's own expected ids (.out: add_special and parse_special false)
    hf.encode_special_tokens = True
    cases = vocab_cases(source / "models" / f"ggml-vocab-{name}.gguf") if name in WITH_CASES else []
    wrong = [(text, ids) for text, ids in cases if hf.encode(text, add_special_tokens=False).ids != ids]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ from llama.cpp's .out; first: {wrong[0]}"
