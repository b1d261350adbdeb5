"""The tokenizer sessions stay bounded on a 1M-character fragment (the session work is linear or
n log n in the text: SPM's merge queue, WPM's and RWKV's longest matches, UGM's Viterbi,
PLaMo-2's suffix table), each in a child under a CPU limit, with llama.cpp-sized vocabularies'
shapes: multi-space and long pieces."""

from __future__ import annotations

import pytest

from adversarial.bounded import run_bounded

pytestmark = pytest.mark.slow

BUILD = """
import pathlib, sys
sys.path.insert(0, str(pathlib.Path(S.__file__).resolve().parents[1] / "tests"))
from support.session_cases import tiny_metadata
from support.tiny_vocabs import vocab_from_metadata
from onnx_struct.llm.tokenizer import plamo2, rwkv, spm, ugm, wpm
SESSIONS = {"spm": spm.SpmSession, "wpm": wpm.WpmSession, "ugm": ugm.UgmSession, "rwkv": rwkv.RwkvSession,
            "plamo2": plamo2.Plamo2Session}
metadata = tiny_metadata()[ARG]
vocab = vocab_from_metadata(metadata)
session = SESSIONS[vocab.model](vocab)
text = ("    return x+1  # hello world, the 日本 😀 e\\u0301 abc 123\\n\\t" * 20000)[:1_000_000]
if vocab.model == "spm":
    text = text.replace(" ", "\\u2581")
ids = session.tokenize(text)
assert 50_000 < len(ids) <= 4_000_000, len(ids)
ids = session.tokenize("a" * 1_000_000)
raise S.ValidationError("done", "tokenized")
"""


@pytest.mark.parametrize("name", ["spm", "wpm", "ugm", "rwkv", "plamo2"])
def test_a_million_characters_tokenize_within_seconds(name):
    run_bounded(BUILD, name, cpu_seconds=40, memory_mib=1500).assert_validation_error("done")
