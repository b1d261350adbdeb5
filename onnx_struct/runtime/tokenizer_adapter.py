"""The tokenizer contract generation codes against (docs/llm.md), over the current GGUFTokenizer.

Generation needs ``encode(text, *, add_bos=None, special=False)``, ``decode(ids, *, special=False)``,
``bos_id``, ``add_bos``, ``eos_ids`` and ``streamer()`` (onnx_struct.llm.tokenizer's Tokenizer). This
adapter gives them over :class:`~onnx_struct.runtime.tokenizer.GGUFTokenizer` until that tokenizer
replaces it: ``special=True`` splits the text on control-token texts (longest first), and
``eos_ids`` is llama.cpp's end-of-generation set as far as the metadata and token texts tell it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from onnx_struct.runtime.tokenizer import GGUFTokenizer

# llama.cpp (llama_vocab::impl::load) adds these texts to the end-of-generation ids when present
EOG_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<｜end▁of▁sentence｜>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
    }
)


class AdaptedTokenizer:
    """The contract's tokenizer over a GGUFTokenizer built from ``metadata``."""

    def __init__(self, metadata: Mapping[str, object]) -> None:
        self._inner = GGUFTokenizer(metadata)
        self.vocab_size = self._inner.vocab_size
        self.bos_id = self._inner.bos
        self.eos_id = self._inner.eos
        self.add_bos = self._inner.add_bos
        tokens = metadata["tokenizer.ggml.tokens"]
        self._controls = {tokens[i]: i for i in sorted(self._inner.controls)}
        eog = {self.eos_id} if self.eos_id is not None else set()
        for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
            if isinstance(metadata.get(key), int):
                eog.add(metadata[key])
        eog.update(i for text, i in self._controls.items() if text in EOG_TEXTS)
        self.eos_ids = frozenset(eog)
        texts = sorted(self._controls, key=len, reverse=True)
        self._special = re.compile("|".join(map(re.escape, texts))) if texts else None

    def encode(self, text: str, *, add_bos: bool | None = None, special: bool = False) -> list[int]:
        """Token ids of ``text``; with ``special``, control-token texts in it are those tokens."""
        bos = self.add_bos if add_bos is None else add_bos
        ids = [self.bos_id] if bos and self.bos_id is not None else []
        if not special or self._special is None:
            return ids + self._inner.encode(text, add_bos=False)
        start = 0
        for match in self._special.finditer(text):
            if match.start() > start:
                ids += self._inner.encode(text[start : match.start()], add_bos=False)
            ids.append(self._controls[match.group()])
            start = match.end()
        if start < len(text):
            ids += self._inner.encode(text[start:], add_bos=False)
        return ids

    def decode(self, ids: Sequence[int], *, special: bool = False) -> str:
        """The text of ``ids`` (control tokens shown only with ``special``)."""
        if not special:
            return self._inner.decode(ids)
        names = {i: text for text, i in self._controls.items()}
        out, run = [], []
        for i in ids:
            if i in names:
                out.append(self._inner.decode(run) + names[i])
                run = []
            else:
                run.append(i)
        return "".join(out) + self._inner.decode(run)

    def streamer(self, *, special: bool = False) -> _Streamer:
        """A streamer giving the text of each pushed token once its characters are whole."""
        return _Streamer(self)


class _Streamer:
    """Text completed per token: decoded after an anchor token so that a leading space is kept."""

    def __init__(self, tokenizer: AdaptedTokenizer) -> None:
        self._tokenizer = tokenizer
        self._anchor = [next(i for i in range(tokenizer.vocab_size) if i not in tokenizer._inner.controls)]
        self._skip = len(tokenizer.decode(self._anchor))
        self._ids: list[int] = []
        self._shown = 0

    def push(self, token: int) -> str:
        self._ids.append(token)
        text = self._tokenizer.decode(self._anchor + self._ids)[self._skip :]
        if text.endswith("\ufffd"):  # a character whose bytes are not all there yet
            return ""
        piece, self._shown = text[self._shown :], len(text)
        return piece

    def flush(self) -> str:
        text = self._tokenizer.decode(self._anchor + self._ids)[self._skip :]
        piece, self._shown = text[self._shown :], len(text)
        return piece
