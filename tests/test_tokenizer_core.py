"""The tokenizer's core against hand-computed expectations (llama.cpp's src/llama-vocab.cpp and
src/unicode.cpp read by hand): the pre-type table, the regex split, BPE merges, the special-token
partition, the end-of-generation set, the framing flags, decoding and streaming.

Tiny vocabularies are metadata dicts; every expected id or piece below is worked out from
llama.cpp's rules in the comment beside it, not from this code.
"""

from __future__ import annotations

import pytest

import onnx_struct
from onnx_struct.llm.tokenizer import pre_types
from onnx_struct.llm.tokenizer.regex_split import Splitter
from onnx_struct.llm.tokenizer.tokenizer import Tokenizer, clean_spaces, load_tokenizer
from onnx_struct.llm.tokenizer.vocab import Attr, load_vocab

NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6


def bpe(tokens, merges=(), *, pre="gpt-2", types=None, **extra):
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": list(tokens),
        "tokenizer.ggml.token_type": list(types) if types else [NORMAL] * len(tokens),
        "tokenizer.ggml.merges": list(merges),
        **extra,
    }


# ---------------------------------------------------------------------------------- the table
def test_the_table_has_every_name_type_and_list_llama_cpp_has():
    assert len(pre_types.PRE_NAMES) == 91
    assert len(pre_types.REGEX_LISTS) == 57
    assert len(set(pre_types.REGEX_LISTS.values())) == 31
    assert {t for t, _ in pre_types.PRE_NAMES.values()} == set(pre_types.REGEX_LISTS)


@pytest.mark.parametrize(
    ("name", "pre", "flags"),
    [
        (None, "default", {}),  # the missing key: llama.cpp warns and uses default
        ("llama-bpe", "llama3", {"ignore_merges": True, "add_bos": True}),
        ("smollm", "smollm", {"clean_spaces": False}),
        ("megrez", "qwen2", {}),  # qwen2's list, but clean_spaces left on
        ("chatglm-bpe", "chatglm4", {"bos": None}),
        ("exaone4", "gpt2", {}),
        ("roberta-bpe", "gpt2", {"add_sep": True}),
    ],
)
def test_pre_names_resolve_as_llama_cpp_loads_them(name, pre, flags):
    assert pre_types.resolve_pre(name) == (pre, flags)


def test_an_unknown_pre_name_is_refused_naming_the_key():
    with pytest.raises(onnx_struct.ValidationError, match="unknown pre-tokenizer type 'nope'") as caught:
        load_vocab(bpe(["a"], pre="nope"))
    assert caught.value.path == "gguf.kv['tokenizer.ggml.pre']"


# ---------------------------------------------------------------------------------- the split
@pytest.mark.parametrize(
    ("pre", "text", "words"),
    [
        # GPT-2: contractions, ' ?\p{L}+', ' ?\p{N}+', '\s+(?!\S)' leaves the last space to the word
        ("gpt2", "Hello world's  12", ["Hello", " world", "'s", " ", " 12"]),
        # \p{L} is llama.cpp's letters (é), U+3000 is whitespace but not ' ': its own piece
        ("gpt2", "é1 a\u3000b", ["é", "1", " a", "\u3000", "b"]),
        # llama3: digits in threes, contractions of either case
        ("llama3", "123456 I'M", ["123", "456", " I", "'M"]),
        # qwen2: single digits
        ("qwen2", "x123", ["x", "1", "2", "3"]),
        # default's four regexes in sequence: [\p{P}$+<=>^~|]+ first, [0-9]{3} last
        ("default", "a+b=1234", ["a", "+", "b", "=", "123", "4"]),
        # deepseek-coder: letters with one optional space, single digits
        ("deepseek_coder", "ab12 cd", ["ab", "1", "2", " cd"]),
        # whitespace pre-tokenizer: runs of non-space and what lies between
        ("whitespace", "a  b", ["a", "  ", "b"]),
        # gemma4: only newline runs are cut
        ("gemma4", "a b\n\nc", ["a b", "\n\n", "c"]),
        # kimi-k2: Han runs apart from other letters
        ("kimi_k2", "你好abc", ["你好", "abc"]),
    ],
)
def test_each_list_splits_a_probe_as_llama_cpp(pre, text, words):
    assert Splitter(pre_types.REGEX_LISTS[pre]).split(text) == words


def test_afmoe_digits_keep_the_text_before_a_run_with_its_first_group():
    # unicode_regex_split_custom_afmoe: 1234 -> 1 | 234 (4 mod 3 = 1), the "x" before joined to "1"
    assert Splitter(("\\p{AFMoE_digits}",)).split("x1234y") == ["x1", "234", "y"]


# ---------------------------------------------------------------------------------- BPE
def test_merges_go_by_rank_not_by_position():
    # "b c" (rank 0) before "a b" (rank 1): abc -> a bc; no "a bc" merge
    tok = Tokenizer(load_vocab(bpe(["a", "b", "c", "ab", "bc"], ["b c", "a b"])))
    assert tok.encode("abc", add_bos=False) == [0, 4]
    tok = Tokenizer(load_vocab(bpe(["a", "b", "c", "ab", "bc", "abc"], ["a b", "b c", "ab c"])))
    assert tok.encode("abc", add_bos=False) == [5]


def test_ignore_merges_takes_a_word_that_is_a_token_whole():
    # no merges at all: "ab" is [a, b] under gpt-2 but [ab] under llama-bpe (ignore_merges)
    assert Tokenizer(load_vocab(bpe(["a", "b", "ab"]))).encode("ab", add_bos=False) == [0, 1]
    assert Tokenizer(load_vocab(bpe(["a", "b", "ab"], pre="llama-bpe"))).encode("ab", add_bos=False) == [2]


def test_characters_without_a_token_are_dropped_as_llama_cpp_drops_them():
    assert Tokenizer(load_vocab(bpe(["a", "b"]))).encode("azb", add_bos=False) == [0, 1]


def test_a_duplicated_piece_encodes_to_its_last_id_and_each_id_decodes_to_its_text():
    tok = Tokenizer(load_vocab(bpe(["a", "b", "a"])))
    assert tok.encode("a", add_bos=False) == [2]  # llama.cpp's token_to_id: the last assignment
    assert tok.decode([0]) == tok.decode([2]) == "a"
    assert tok.decode([0, 1, 2]) == "aba"  # no generated id is dropped


# ---------------------------------------------------------------------------------- special tokens
def _special_vocab():
    tokens = ["a", "b", "\u0120", "<s>", "<|x|>", "<|x|>y", "\u0120\u0120", "<m>"]
    types = [NORMAL, NORMAL, NORMAL, CONTROL, CONTROL, CONTROL, USER_DEFINED, USER_DEFINED]
    return bpe(tokens, types=types)


def test_control_tokens_are_matched_only_with_special_user_defined_always():
    tok = Tokenizer(load_vocab(_special_vocab()))
    assert tok.encode("a<s>b", add_bos=False) == [0, 1]  # '<', 's', '>' have no tokens
    assert tok.encode("a<s>b", add_bos=False, special=True) == [0, 3, 1]
    assert tok.encode("<m>a", add_bos=False) == [7, 0]  # user-defined: matched without special


def test_the_longest_special_token_is_matched_first():
    tok = Tokenizer(load_vocab(_special_vocab()))
    assert tok.encode("<|x|>y<|x|>", add_bos=False, special=True) == [5, 4]


def test_lstrip_and_rstrip_take_the_whitespace_beside_the_token():
    vocab = load_vocab(_special_vocab())
    vocab.attrs[7] |= Attr.LSTRIP | Attr.RSTRIP
    tok = Tokenizer(vocab)
    assert tok.encode("a <m> b", add_bos=False) == [0, 7, 1]
    vocab2 = load_vocab(_special_vocab())  # without the attributes, the spaces stay ('\u0120' each)
    assert Tokenizer(vocab2).encode("a <m> b", add_bos=False) == [0, 2, 7, 2, 1]


# ---------------------------------------------------------------------------------- EOG and flags
def test_the_eog_set_holds_eos_and_the_turn_end_texts():
    tokens = ["a", "<|endoftext|>", "<|im_end|>", "<|im_start|>"]
    vocab = load_vocab(bpe(tokens, types=[NORMAL, CONTROL, CONTROL, CONTROL], **{"tokenizer.ggml.eos_token_id": 1}))
    assert vocab.eog == {1, 2}
    assert vocab.eot in (1, 2)  # found by its text (llama.cpp: whichever its hash map yields first)


def test_gpt_oss_end_leaves_the_eog_set_beside_return_and_call():
    tokens = ["a", "<|end|>", "<|return|>", "<|call|>"]
    vocab = load_vocab(bpe(tokens, types=[NORMAL, CONTROL, CONTROL, CONTROL]))
    assert vocab.eog == {2, 3}
    assert vocab.attrs[1] == Attr.USER_DEFINED


def test_framing_flags_follow_the_model_the_pre_name_and_the_file():
    assert load_vocab(bpe(["a"], pre="llama-bpe")).add_bos is True
    assert load_vocab(bpe(["a"])).add_bos is False
    # BPE's default ids (11) lie past this vocabulary: llama.cpp disables them, the file's ids count
    meta = bpe(
        ["a", "<s>"], types=[NORMAL, CONTROL], **{"tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 1}
    )
    tok = Tokenizer(load_vocab({**meta, "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": True}))
    assert tok.encode("a") == [1, 0, 1]  # bos and eos are both <s> here
    assert tok.encode("a", add_bos=False) == [0]
    assert Tokenizer(load_vocab(meta)).encode("a", add_bos=True) == [1, 0]


def test_a_flag_of_the_wrong_type_is_refused_naming_the_key():
    with pytest.raises(onnx_struct.ValidationError, match="not a boolean") as caught:
        load_vocab(bpe(["a"], **{"tokenizer.ggml.add_eos_token": "yes"}))
    assert caught.value.path == "gguf.kv['tokenizer.ggml.add_eos_token']"


@pytest.mark.parametrize("model", ["no_vocab", "none", "test", "nope"])
def test_tokenizer_models_without_a_tokenizer_are_refused(model):
    with pytest.raises(onnx_struct.ValidationError) as caught:
        load_vocab({**bpe(["a"]), "tokenizer.ggml.model": model})
    assert caught.value.path == "gguf.kv['tokenizer.ggml.model']"


# ---------------------------------------------------------------------------------- decoding
def test_clean_spaces_passes():
    # pass 1 " ," -> ","; pass 2 " ' " -> "'"; pass 3 " 's" -> "'s" (" 't" keeps its space)
    assert clean_spaces(b"hello , world ' s it 's don 't") == b"hello, world's it's don 't"


def test_streamer_emits_a_split_character_once_whole():
    # é is c3 a9: GPT-2's characters for those bytes are Ã (c3) and © (a9)
    tok = Tokenizer(load_vocab(bpe(["\u00c3", "\u00a9", "a"])))
    assert tok.decode([0, 1, 2]) == "éa"
    stream = tok.streamer()
    assert [stream.push(0), stream.push(1), stream.push(2)] == ["", "é", "a"]
    assert stream.push(0) == "" and stream.flush() == "\ufffd"


def test_control_tokens_are_hidden_unless_special():
    tok = Tokenizer(load_vocab(_special_vocab()))
    assert tok.decode([0, 3, 1]) == "ab"
    assert tok.decode([0, 3, 1], special=True) == "a<s>b"


def test_load_tokenizer_takes_metadata_and_returns_a_tokenizer_as_is():
    tok = load_tokenizer(bpe(["a"]))
    assert load_tokenizer(tok) is tok
    assert onnx_struct.load_tokenizer is load_tokenizer


def test_the_linefeed_id_is_found_as_llama_cpp_finds_it():
    # BPE: the first id of "\n" tokenized; "\n" byte-encoded is GPT-2's character U+010A
    assert Tokenizer(load_vocab(bpe(["a", "\u010a"]))).vocab.nl == 1
