"""A stand-in SentencePiece session until ``spm.py`` lands: llama.cpp's merge by piece score as
HF ``tokenizers``' byte-fallback BPE (the tokenizer runtime/tokenizer.py built before), over text
the framing has already prefixed and escaped. Equal scores of two different pieces merge by
lower id here where llama.cpp merges the leftmost pair: the real session fixes that.
"""

from __future__ import annotations

from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.limits import MAX_SPM_MERGE_WORK
from onnx_struct.llm.tokenizer.vocab import Vocab


class SpmSession:
    """``tokenize(text)``: the ids of one escaped raw-text fragment."""

    def __init__(self, vocab: Vocab) -> None:
        try:
            import tokenizers as tk  # noqa: PLC0415 - optional dependency
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError("tokenizing needs the tokenizers package: pip install 'onnx-struct[llm]'") from error
        pieces = vocab.token_to_id
        merges = [(-vocab.scores[i], i, cut, piece[:cut], piece[cut:]) for piece, i, cut in _splits(pieces)]
        merges.sort()
        unk = vocab.tokens[vocab.unk] if vocab.unk is not None else None
        model = tk.models.BPE(
            vocab=dict(pieces),
            merges=[(left, right) for *_, left, right in merges],
            unk_token=unk,
            byte_fallback=True,
            fuse_unk=True,
        )
        self._tokenizer = tk.Tokenizer(model)

    def tokenize(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids


def _splits(vocab: dict[str, int]) -> list[tuple[str, int, int]]:
    """(piece, id, cut) for every split of a piece into two pieces (only cuts whose two lengths
    are piece lengths are tried).

    Raises:
        ValidationError: (``limit_exceeded``) the work exceeds ``MAX_SPM_MERGE_WORK``.
    """
    lengths = sorted({len(piece) for piece in vocab})
    present = set(lengths)
    out, work = [], 0
    for piece, i in vocab.items():
        size = len(piece)
        for cut in lengths:
            if cut >= size:
                break
            work += 1
            if size - cut not in present:
                continue
            work += size
            if work > MAX_SPM_MERGE_WORK:
                raise limit_exceeded(
                    "gguf.kv['tokenizer.ggml.tokens']",
                    f"splitting the pieces into pairs of pieces takes more than {MAX_SPM_MERGE_WORK} steps",
                    work,
                    MAX_SPM_MERGE_WORK,
                )
            if piece[:cut] in vocab and piece[cut:] in vocab:
                out.append((piece, i, cut))
    return out


__all__ = ["SpmSession", "ValidationError"]
