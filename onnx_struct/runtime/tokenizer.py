"""The GGUF tokenizer as generate.py knew it: a thin shim over
:class:`onnx_struct.llm.tokenizer.Tokenizer` (every tokenizer llama.cpp reads, as it reads it),
kept until every caller uses ``onnx_struct.load_tokenizer``.

Notes: docs/modules.md, docs/tokenizers.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence


def _llm_tokenizer():
    """The llm layer's tokenizer module. The llm layer sits above runtime (tests/test_layers.py),
    so this shim reaches it by name at call time, not by an import: it goes when generate.py
    takes a Tokenizer from its caller."""
    return importlib.import_module("onnx_struct.llm.tokenizer.tokenizer")


class GGUFTokenizer:
    """Text <-> token ids for a GGUF vocabulary: ``encode(text)``, ``decode(ids)``, ``bos``/``eos``."""

    def __init__(self, metadata: Mapping[str, object]) -> None:
        """Build the tokenizer from decoded GGUF metadata (``decode_metadata(model)``).

        Raises:
            ValidationError: metadata llama.cpp would refuse (the path names the key).
        """
        self.tokenizer = _llm_tokenizer().load_tokenizer(dict(metadata))
        vocab = self.tokenizer.vocab
        self.bos = vocab.bos
        self.eos = vocab.eos
        self.eos_ids = vocab.eog
        self.add_bos = self.tokenizer.add_bos
        self.controls = frozenset(i for i, a in enumerate(vocab.attrs) if a & 8)  # Attr.CONTROL
        self.vocab_size = self.tokenizer.vocab_size

    def encode(self, text: str, *, add_bos: bool | None = None, special: bool = False) -> list[int]:
        """Token ids of ``text`` (``Tokenizer.encode``: BOS/EOS as the file says where ``add_bos``
        is None, none where False, BOS forced where True)."""
        return self.tokenizer.encode(text, add_bos=add_bos, special=special)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, control tokens (BOS, EOS, ...) left out; bytes that are not UTF-8
        become U+FFFD, one per invalid sequence (as Python's ``errors="replace"``)."""
        return self.tokenizer.decode(ids)
