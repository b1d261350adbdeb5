"""``onnx_struct.generate`` and the Generator the CLI's ``generate`` and ``chat`` run: the decoding
machinery (session, KV cache, sampling, end of generation) is :mod:`onnx_struct.llm.generation`,
with the file's own tokenizer and chat template."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence

from onnx_struct.llm.generation import Generation, Generator
from onnx_struct.schema.model import ModelLike


def load_generator(
    model: ModelLike | Generator,
    *,
    threads: int | None = None,
    accuracy_level: int | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Generator:
    """A :class:`~onnx_struct.llm.generation.Generator` for ``model`` with the llm layer's
    tokenizer (:func:`onnx_struct.llm.tokenizer.tokenizer.load_tokenizer`: every vocabulary llama.cpp reads) and chat
    templates (``model`` itself when it is already a Generator).

    Args:
        model: a model built by ``from-gguf --graph`` (path or ModelProto), or a Generator.
        threads: onnxruntime's intra-op thread count (None: its default).
        accuracy_level: MatMulNBits' (None: onnxruntime's, 4; 0: float32 activations).
        cache_dir: the Generator's session cache directory (None: none).

    Returns:
        The Generator.

    Raises:
        ValidationError: as the Generator's (no decoder graph, tokenizer metadata, arguments).
    """
    if isinstance(model, Generator):
        return model
    if isinstance(model, (str, os.PathLike)):
        model = os.fspath(model)
    return Generator(model, threads=threads, accuracy_level=accuracy_level, cache_dir=cache_dir)


def generate(
    model: ModelLike | Generator,
    prompt: str | Sequence[int] | None = None,
    *,
    messages: Sequence[Mapping[str, object]] | None = None,
    chat_template: str | None = None,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    stream: Callable[[str], None] | None = None,
    stop_ids: Iterable[int] | None = None,
    threads: int | None = None,
    accuracy_level: int | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Generation:
    """Generate text after ``prompt`` (or a chat reply to ``messages``) with a model built by
    ``from-gguf --graph``.

    Args:
        model: the model (path or ModelProto), or a Generator to reuse its session.
        prompt: the text, tokenized with the GGUF file's tokenizer (BOS first where it says
            so), or its token ids as they are.
        messages: instead of ``prompt``, a conversation (``[{"role": "user", "content": "..."}]``)
            rendered with the file's chat template and a generation prompt, tokenized as
            llama.cpp's chat does (special-token texts are tokens; no double BOS).
        chat_template: with ``messages``: a built-in template name, a .jinja file or the
            template text instead of the file's ``tokenizer.chat_template``.
        max_new_tokens: at most this many new tokens.
        temperature: 0 (default) is greedy; above 0 samples (with ``top_k``, ``top_p``).
        top_k: sample among the k most probable tokens only (0: all).
        top_p: sample among the most probable tokens whose probability reaches p (1: all).
        seed: the sampling's random seed (None: fresh entropy).
        stream: called with each new piece of text as soon as its characters are whole.
        stop_ids: the ids that end generation (None: the tokenizer's end-of-generation ids, as
            llama.cpp's: eos, eot, eom, ``<|im_end|>``, ...; an empty set: never stop).
        threads: onnxruntime's intra-op thread count (ignored when ``model`` is a Generator).
        accuracy_level: MatMulNBits' (ignored when ``model`` is a Generator).
        cache_dir: a session cache directory, as the Generator's (ignored when ``model`` is a
            Generator).

    Returns:
        A :class:`~onnx_struct.llm.generation.Generation`: the new text and tokens (stopped at
        an end-of-generation id, which is not included).

    Raises:
        ValidationError: the model has no decoder graph or no tokenizer metadata, its vocabulary
            and logits differ in size; an argument is out of range (code ``bad_argument``: a
            prompt id outside the vocabulary, a negative ``max_new_tokens``, a temperature that
            is not finite, an empty prompt, both or neither of prompt and messages, the prompt
            and ``max_new_tokens`` past the model's context length, ...); no chat template
            (``no_chat_template``) or a failing one (``bad_template``); the model's logits are
            not finite (``non_finite_logits``); onnxruntime fails mid-run (``runtime_failure``).

    Example::

        onnx_struct.generate("model.onnx", "Once upon a time", max_new_tokens=20, stream=print).text
    """
    generator = load_generator(model, threads=threads, accuracy_level=accuracy_level, cache_dir=cache_dir)
    return generator.generate(
        prompt,
        messages=messages,
        chat_template=chat_template,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        stream=stream,
        stop_ids=stop_ids,
    )
