"""The tokenizer sessions other than BPE (spm, wpm, ugm, rwkv, plamo2), each on tiny vocabularies
with ids worked out by hand from the algorithm's definition in llama.cpp's llama-vocab.cpp; and,
in the slow tier, every case of llama.cpp's own test vocabularies of these models
(``models/ggml-vocab-*.gguf`` with ``.inp`` / ``.out``: llama-spm, phi-3, bert-bge) through the
sessions with llama.cpp's framing (tests/test-tokenizer-0: add_special and parse_special false).
"""

from __future__ import annotations

import pytest
from support.tiny_vocabs import (
    encode_raw,
    gguf_metadata,
    plamo2_metadata,
    precompiled_charsmap,
    rwkv_escape,
    rwkv_metadata,
    spm_metadata,
    ugm_metadata,
    vocab_from_metadata,
    wpm_metadata,
)

from onnx_struct.errors import ValidationError
from onnx_struct.llm.tokenizer.plamo2 import Plamo2Session
from onnx_struct.llm.tokenizer.rwkv import RwkvSession, token_bytes
from onnx_struct.llm.tokenizer.spm import SpmSession
from onnx_struct.llm.tokenizer.ugm import UgmSession
from onnx_struct.llm.tokenizer.wpm import WpmSession, preprocess

SESSIONS = {"spm": SpmSession, "wpm": WpmSession, "ugm": UgmSession, "rwkv": RwkvSession, "plamo2": Plamo2Session}


def _session(metadata):
    vocab = vocab_from_metadata(metadata)
    return vocab, SESSIONS[vocab.model](vocab)


def _ids(vocab, *pieces):
    return [vocab.token_to_id[p] for p in pieces]


# ---------------------------------------------------------------------------------------- spm


def test_spm_equal_scores_merge_the_leftmost_pair_first():
    # "ab" and "ba" score alike: in "aba" the leftmost pair merges, leaving "a" alone; in "bab" too
    vocab, spm = _session(spm_metadata({"a": -1.0, "b": -1.0, "ab": -2.0, "ba": -2.0}))
    assert spm.tokenize("aba") == _ids(vocab, "ab", "a")
    assert spm.tokenize("bab") == _ids(vocab, "ba", "b")


def test_spm_the_higher_score_merges_first_wherever_it_is():
    vocab, spm = _session(spm_metadata({"a": -1.0, "b": -1.0, "ab": -2.0, "ba": -1.5}))
    assert spm.tokenize("aba") == _ids(vocab, "a", "ba")


def test_spm_runs_of_spaces_merge_pairwise_into_multi_space_pieces():
    # "▁▁▁▁▁": the pairs (0,1) then (2,3) become "▁▁"; then "▁▁"+"▁▁" is "▁▁▁▁"; "▁▁▁" is no piece
    vocab, spm = _session(spm_metadata({"▁": -1.0, "▁▁": -2.0, "▁▁▁▁": -3.0}))
    assert spm.tokenize("▁" * 5) == _ids(vocab, "▁▁▁▁", "▁")
    assert spm.tokenize("▁" * 3) == _ids(vocab, "▁▁", "▁")


def test_spm_a_character_without_a_piece_is_its_utf8_byte_pieces():
    vocab, spm = _session(spm_metadata({"a": -1.0}))
    assert spm.tokenize("aé") == _ids(vocab, "a", "<0xC3>", "<0xA9>")
    assert spm.tokenize("😀") == _ids(vocab, "<0xF0>", "<0x9F>", "<0x98>", "<0x80>")


def test_spm_without_byte_pieces_an_unknown_character_is_the_unknown_id_not_dropped():
    vocab, spm = _session(spm_metadata({"a": -1.0}, byte_pieces=False))
    assert spm.tokenize("aéa") == [vocab.token_to_id["a"], 0, vocab.token_to_id["a"]]


def test_spm_without_byte_pieces_or_unknown_token_refuses():
    vocab = vocab_from_metadata(spm_metadata({"a": -1.0}, byte_pieces=False, unk=False))
    vocab.unk = None
    spm = SpmSession(vocab)
    with pytest.raises(ValidationError) as caught:
        spm.tokenize("aé")
    assert caught.value.code == "untokenizable" and caught.value.path == "tokenize(text)[1]"


def test_spm_one_byte_piece_serves_where_no_0xNN_piece_exists():
    # llama.cpp's byte_to_token falls back to the one-character piece
    metadata = spm_metadata({"x": -1.0, "\n": -9.0}, byte_pieces=False)
    vocab, spm = _session(metadata)
    assert spm.tokenize("x\n") == _ids(vocab, "x", "\n")


def test_spm_empty_text_is_no_tokens():
    assert _session(spm_metadata({"a": -1.0}))[1].tokenize("") == []


# ---------------------------------------------------------------------------------------- wpm


def test_wpm_preprocess_lowercases_strips_accents_and_splits_punctuation_and_cjk():
    words = preprocess("Héllo,  WORLD!日本 a\u0301b\tc\x00d", lowercase=True, strip_accents=True)
    assert words == ["hello", ",", "world", "!", "日", "本", "ab", "cd"]
    assert preprocess("Héllo", lowercase=False, strip_accents=False) == ["Héllo"]


def test_wpm_longest_pieces_from_the_left_with_continuations():
    vocab, wpm = _session(wpm_metadata(["▁hello", "▁hell", "▁wor", "ld", "l", "d", "▁,", "▁日"]))
    assert wpm.tokenize("Hello, world 日") == _ids(vocab, "▁hello", "▁,", "▁wor", "ld", "▁日")


def test_wpm_a_word_with_an_uncovered_position_is_one_unknown():
    # "▁worx": "▁wor" matches, then nothing starts at "x": the whole word is [UNK], once
    vocab, wpm = _session(wpm_metadata(["▁wor", "ld", "▁hello"]))
    assert wpm.tokenize("worx hello") == [vocab.token_to_id["[UNK]"], vocab.token_to_id["▁hello"]]


# ---------------------------------------------------------------------------------------- ugm


UGM = {"▁": -2.0, "▁a": -3.5, "b": -3.2, "ab": -4.0, "▁ab": -4.4, "c": -3.0, "fi": -1.0}


def test_ugm_viterbi_takes_the_highest_total_score():
    # "▁ab": "▁ab" -4.4 beats "▁a"+"b" -6.7 and "▁"+"ab" -6.0
    vocab, ugm = _session(ugm_metadata(UGM))
    assert ugm.tokenize("ab") == _ids(vocab, "▁ab")
    # "▁abc" = "▁ab" + "c": -7.4
    assert ugm.tokenize("abc") == _ids(vocab, "▁ab", "c")


def test_ugm_consecutive_unknown_characters_are_one_unknown_token():
    # "▁zzc": each "z" is unknown (min score -4.4 - 10); the two merge into one <unk>
    vocab, ugm = _session(ugm_metadata(UGM))
    assert ugm.tokenize("zzc") == [vocab.token_to_id["▁"], vocab.unk, vocab.token_to_id["c"]]


def test_ugm_normalizer_maps_through_the_charsmap_and_merges_spaces():
    charsmap = precompiled_charsmap({"ﬁ": "fi", "\t": " "})
    vocab, ugm = _session(ugm_metadata(UGM, charsmap=charsmap))
    assert ugm.normalize("  ﬁ\t\tab ") == "▁fi▁ab".encode()
    assert ugm.tokenize("ﬁ") == _ids(vocab, "▁", "fi")
    plain = _session(ugm_metadata(UGM, charsmap=charsmap, remove_extra_whitespaces=False))[1]
    assert plain.normalize(" ﬁ\tab ") == "▁▁fi▁ab▁".encode()


def test_ugm_user_defined_pieces_pass_the_normalizer_and_score_zero():
    vocab, ugm = _session(ugm_metadata(UGM, user_defined=("<x>",), charsmap=precompiled_charsmap({"<": "["})))
    assert ugm.tokenize("<x>ab") == _ids(vocab, "▁", "<x>", "ab")


def test_ugm_malformed_charsmap_is_refused():
    for blob in (b"\x01\x00", b"\x08\x00\x00\x00" + bytes(8)):
        with pytest.raises(ValidationError, match="precompiled_charsmap"):
            _session(ugm_metadata(UGM, charsmap=blob))


# --------------------------------------------------------------------------------------- rwkv


def test_rwkv_token_bytes_unescapes_as_llama_cpp():
    assert token_bytes("a\\tb\\n\\r\\x41\\\\\\q") == b"a\tb\n\rA\\q"
    for raw in (b"\x00\xff\\ \n", bytes(range(256))):
        assert token_bytes(rwkv_escape(raw)) == raw


def test_rwkv_greedy_longest_match_over_bytes():
    metadata = rwkv_metadata([b"he", b"hell", b"hello", b"lo"])
    vocab, rwkv = _session(metadata)
    t = {token_bytes(text): i for i, text in enumerate(vocab.tokens)}
    assert rwkv.tokenize("hellolo") == [t[b"hello"], t[b"lo"]]
    assert rwkv.tokenize("helo") == [t[b"he"], t[b"lo"]]
    assert rwkv.tokenize("é") == [t[b"\xc3"], t[b"\xa9"]]


def test_rwkv_a_byte_no_token_covers_is_unknown_or_refused():
    vocab, rwkv = _session(rwkv_metadata([b"a"], all_bytes=False))
    vocab.unk = 0
    assert RwkvSession(vocab).tokenize("ab") == [1, 0]
    with pytest.raises(ValidationError) as caught:
        rwkv.tokenize("ab")
    assert caught.value.code == "untokenizable"


# ------------------------------------------------------------------------------------- plamo2


def test_plamo2_viterbi_and_byte_fallback():
    # costs are -score * 1e4: "ab" (1e4) beats "a" + "b" (2e4); "z" is unknown: its byte piece
    vocab, plamo = _session(plamo2_metadata({"a": -1.0, "b": -1.0, "ab": -1.0, "abc": -5.0, "c": -1.0}))
    assert plamo.tokenize("abz") == _ids(vocab, "ab", "<0x7A>")
    # "abc" alone costs 5e4, "ab" + "c" 2e4
    assert plamo.tokenize("abc") == _ids(vocab, "ab", "c")
    assert plamo.tokenize("\ufeffab") == _ids(vocab, "ab")


def test_plamo2_missing_byte_piece_is_refused():
    metadata = plamo2_metadata({"a": -1.0})
    metadata["tokenizer.ggml.token_type"] = [3] * 4 + [1] * (len(metadata["tokenizer.ggml.tokens"]) - 4)
    with pytest.raises(ValidationError, match="byte piece"):
        _session(metadata)


# ---------------------------------------------------------------- llama.cpp's test vocabularies


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama-spm", "phi-3", "bert-bge"])
def test_llama_cpp_test_vocabulary_cases(name):
    from support.llama_cpp_source import llama_cpp_source, vocab_cases  # noqa: PLC0415

    pytest.importorskip("gguf")
    source = llama_cpp_source(fetch=True)
    if source is None:
        pytest.skip("llama.cpp's source is not at hand")
    path = source / "models" / f"ggml-vocab-{name}.gguf"
    vocab, session = _session(gguf_metadata(path))
    failed = [(text, ids) for text, ids in vocab_cases(path) if encode_raw(vocab, session, text) != ids]
    assert not failed, failed[:3]
