"""Tokenizers for every vocabulary llama.cpp reads, token for token as llama.cpp tokenizes.

Stages, as data: a :class:`~onnx_struct.llm.tokenizer.vocab.Vocab` (``vocab.py``) read from the
GGUF metadata; the special-token partition (``special.py``); one session per model
(``spm.py``, ``bpe.py`` with the pre-tokenizer table ``pre_types.py``, ``wpm.py``, ``ugm.py``,
``rwkv.py``, ``plamo2.py``), each built from a Vocab with ``tokenize(text) -> list[int]`` for one
fragment of raw text; and the framing and decoding in ``tokenizer.py``.
"""
