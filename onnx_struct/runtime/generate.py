"""Text generation with a decoder model built by ``from-gguf --graph``: ``onnx_struct.generate(...)``.

The model's GGUF metadata gives the tokenizer (:mod:`onnx_struct.runtime.tokenizer`); the
session is an :class:`onnx_struct.InferenceSession` (quantized execution). The KV cache is one
float32 buffer per layer and kind, ``[1, n_kv_heads, max_length, head_dim]``, bound with
io_binding as both ``past_key_values.{i}.*`` and ``present.{i}.*``: GroupQueryAttention then
writes the new positions into it in place (its shared-buffer mode) and nothing is copied per
token; ``attention_mask`` is ``[1, positions so far]``. The prompt runs as one batch (prompt
processing), then one token per step until ``max_new_tokens`` or the EOS token.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence

import numpy as np
from onnx import numpy_helper

from onnx_struct import limits
from onnx_struct.errors import ValidationError
from onnx_struct.formats.gguf.metadata import checked_context_length, decode_metadata
from onnx_struct.runtime.ort import load_onnxruntime
from onnx_struct.runtime.session import InferenceSession
from onnx_struct.runtime.tokenizer import GGUFTokenizer
from onnx_struct.schema.model import ModelLike, load_model

ROPE_LENGTH = "rope/length"  # the initializer from-gguf --graph gives the RoPE tables' length


@dataclasses.dataclass
class Generation:
    """What :func:`generate` produced: the new text and token ids (EOS not included), the prompt's
    ids, whether it stopped at EOS, and the seconds spent on the prompt and on the new tokens."""

    text: str
    tokens: list[int]
    prompt_tokens: list[int]
    stopped_at_eos: bool
    prompt_seconds: float
    generation_seconds: float


def sample(
    logits: np.ndarray, rng: np.random.Generator, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0
) -> int:
    """The next token from one row of logits.

    ``temperature`` 0 is greedy (the first largest logit). Otherwise the logits are divided by
    ``temperature``, cut to the ``top_k`` largest (0: all), then to the smallest set of the most
    probable tokens whose probability reaches ``top_p`` (1: all), and one token is drawn from the
    renormalized softmax of what is left with ``rng``.
    """
    if temperature <= 0:
        return int(np.argmax(logits))
    scaled = np.asarray(logits, np.float64) / temperature
    order = np.argsort(-scaled, kind="stable")
    if top_k > 0:
        order = order[:top_k]
    probs = np.exp(scaled[order] - scaled[order[0]])
    probs /= probs.sum()
    if top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(probs), top_p)) + 1  # the first prefix reaching top_p
        order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
    return int(order[rng.choice(len(order), p=probs)])


def _not_a_decoder() -> ValidationError:
    return ValidationError(
        "graph.input",
        "the model has no decoder graph (input_ids, past_key_values.* [batch, n_kv_heads, past, "
        "head_dim]): convert with from-gguf --graph",
        code="not_a_decoder",
    )


def _graph_input_names(model: ModelLike) -> set[str]:
    """The main graph's input names (a model the session has already parsed once)."""
    return {i.name for i in load_model(model).proto.graph.input}


class Generator:
    """A decoder model loaded for generation: its session, tokenizer and KV cache layout.

    Args:
        model: a model built by ``from-gguf --graph`` (path or ModelProto); with a path, tensors
            referenced in a .gguf are read from the model's directory.
        threads: onnxruntime's intra-op thread count (None: its default).
        accuracy_level: MatMulNBits' (None: onnxruntime's, 4; 0: float32 activations).

    Raises:
        ValidationError: the model has no decoder graph (no ``input_ids`` / ``past_key_values``
            inputs), no GGUF tokenizer metadata, a vocabulary of another size than its logits,
            a context length missing or above ``MAX_CONTEXT_LENGTH``; ``threads`` is not an
            integer >= 1 (``bad_argument``).
    """

    def __init__(self, model: ModelLike, *, threads: int | None = None, accuracy_level: int | None = None) -> None:
        options = None
        if threads is not None and (
            isinstance(threads, bool)
            or not isinstance(threads, (int, np.integer))
            or not 1 <= threads <= limits.MAX_INTRA_OP_THREADS  # onnxruntime starts the whole pool at once
        ):
            raise ValidationError(
                "generate(threads)",
                f"{threads!r} is not None or an integer from 1 to {limits.MAX_INTRA_OP_THREADS}",
                code="bad_argument",
            )
        if threads is not None:
            # onnxruntime takes a thread count only through SessionOptions, which InferenceSession
            # leaves as given and runs on the same low-memory route (docs/llm.md, "Threads").
            options = load_onnxruntime().SessionOptions()
            options.intra_op_num_threads = int(threads)
            options.log_severity_level = 3
        try:
            self.session = InferenceSession(model, options, accuracy_level=accuracy_level)
        except ValidationError as error:
            # onnxruntime refuses a graph without nodes (from-gguf without --graph) as it refuses
            # any empty graph: name what is missing instead of its initialization failure.
            if error.code == "runtime_failure" and "input_ids" not in _graph_input_names(model):
                raise _not_a_decoder() from error
            raise
        inputs = {i.name: i.shape for i in self.session.get_inputs()}
        cache = inputs.get("past_key_values.0.key")
        if "input_ids" not in inputs or cache is None or not all(isinstance(d, int) for d in cache[1::2]):
            raise _not_a_decoder()
        logits = next((o.shape for o in self.session.get_outputs() if o.name == "logits"), None)
        if not logits or not isinstance(logits[-1], int):
            raise _not_a_decoder()
        self.n_vocab = logits[-1]
        metadata = decode_metadata(self.session.lowered)
        self.tokenizer = GGUFTokenizer(metadata)
        if self.tokenizer.vocab_size != self.n_vocab:  # an id the sampler picks must have a token
            raise ValidationError(
                "gguf.kv['tokenizer.ggml.tokens']",
                f"{self.tokenizer.vocab_size} tokens, but the model's logits have {self.n_vocab}",
                expected=self.n_vocab,
                actual=self.tokenizer.vocab_size,
            )
        self.n_layers = sum(1 for name in inputs if name.startswith("past_key_values.") and name.endswith(".key"))
        self.n_kv_heads, self.head_dim = cache[1], cache[3]
        context = checked_context_length(metadata, metadata.get("general.architecture"))
        # The graph's RoPE tables (from-gguf --graph's rope/length) cover the positions it was built
        # for; metadata claiming more would fail in onnxruntime's attention mid-generation.
        table = next((t for t in self.session.lowered.graph.initializer if t.name == ROPE_LENGTH), None)
        covered = float(numpy_helper.to_array(table)) if table is not None else float("inf")
        if context > covered:
            raise ValidationError(
                f"gguf.kv['{metadata.get('general.architecture')}.context_length']",
                f"{context} positions, but the graph's RoPE tables cover {covered:.0f}",
                code="invalid",
            )
        self.context_length = context

    def generate(
        self,
        prompt: str | Sequence[int],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        stream: Callable[[str], None] | None = None,
        stop_at_eos: bool = True,
    ) -> Generation:
        """See :func:`generate`."""
        check_sampling(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        prompt_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else self._token_ids(prompt)
        if not prompt_ids:
            raise ValidationError(
                "generate(prompt)",
                "the prompt has no tokens (an empty prompt without a BOS token)",
                code="bad_argument",
            )
        length = len(prompt_ids) + max_new_tokens
        if length > self.context_length:
            raise ValidationError(
                "generate(max_new_tokens)",
                f"{len(prompt_ids)} prompt tokens + {max_new_tokens} new ones exceed the context length "
                f"{self.context_length}",
                code="bad_argument",
            )
        rng = np.random.default_rng(seed)
        step = _Steps(self, length)
        start = time.perf_counter()
        logits = step(prompt_ids)
        prompt_seconds = time.perf_counter() - start
        tokens: list[int] = []
        # Decoded after the prompt's last token, so that a new token keeps the space SentencePiece
        # strips from the start of a text ("▁café" continues "world" as " café").
        context = prompt_ids[-1:]
        skip = len(self.tokenizer.decode(context))
        shown = ""
        stopped = False
        start = time.perf_counter()
        for _ in range(max_new_tokens):
            token = sample(logits, rng, temperature=temperature, top_k=top_k, top_p=top_p)
            if stop_at_eos and token == self.tokenizer.eos:
                stopped = True
                break
            tokens.append(token)
            if stream is not None:
                text = self.tokenizer.decode(context + tokens)[skip:]
                if not text.endswith("\ufffd"):  # a character whose bytes are not all generated yet
                    stream(text[len(shown) :])
                    shown = text
            if len(tokens) < max_new_tokens:
                logits = step([token])
        generation_seconds = time.perf_counter() - start
        text = self.tokenizer.decode(context + tokens)[skip:]
        if stream is not None and text != shown:
            stream(text[len(shown) :])
        return Generation(text, tokens, prompt_ids, stopped, prompt_seconds, generation_seconds)

    def _token_ids(self, prompt: Sequence[int]) -> list[int]:
        # Gather would wrap a negative id to the end of the vocabulary and fail on a large one.
        if isinstance(prompt, (bytes, bytearray)):  # its bytes would read as token ids
            raise ValidationError("generate(prompt)", "bytes: give the text as str or token ids", code="bad_argument")
        ids = []
        for i, token in enumerate(prompt):
            if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= token < self.n_vocab:
                raise ValidationError(
                    f"generate(prompt)[{i}]",
                    f"{token!r} is not a token id in [0, {self.n_vocab})",
                    code="bad_argument",
                )
            ids.append(int(token))
        return ids


def check_sampling(*, max_new_tokens: object, temperature: object, top_k: object, top_p: object, seed: object) -> None:
    """Refuse generation arguments out of their ranges before anything runs.

    Raises:
        ValidationError: (code ``bad_argument``, path ``generate(name)``) ``max_new_tokens`` or
            ``top_k`` is not an integer >= 0, ``temperature`` not a finite number >= 0, ``top_p``
            not in (0, 1], ``seed`` neither None nor an integer >= 0.
    """

    def refuse(name: str, value: object, wanted: str) -> ValidationError:
        return ValidationError(f"generate({name})", f"{value!r} is not {wanted}", code="bad_argument")

    def integer(value: object) -> bool:
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0

    def number(value: object) -> bool:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)

    for name, value in (("max_new_tokens", max_new_tokens), ("top_k", top_k)):
        if not integer(value):
            raise refuse(name, value, "an integer >= 0")
    if not number(temperature) or not 0 <= temperature < math.inf:
        raise refuse("temperature", temperature, "a finite number >= 0")
    if not number(top_p) or not 0 < top_p <= 1:
        raise refuse("top_p", top_p, "a number in (0, 1]")
    if seed is not None and not integer(seed):
        raise refuse("seed", seed, "None or an integer >= 0")


class _Steps:
    """Runs the model on the next tokens; the KV cache buffers are bound as past and present."""

    def __init__(self, generator: Generator, length: int) -> None:
        ort = load_onnxruntime()
        self.session = generator.session
        self.binding = self.session.io_binding()
        shape = (1, generator.n_kv_heads, length, generator.head_dim)
        self.position = 0
        self.binding.bind_output("logits")  # first: get_outputs() lists the outputs in binding order
        for i in range(generator.n_layers):
            for kind in ("key", "value"):
                cache = ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32)
                self.binding.bind_ortvalue_input(f"past_key_values.{i}.{kind}", cache)
                self.binding.bind_ortvalue_output(f"present.{i}.{kind}", cache)

    def __call__(self, ids: list[int]) -> np.ndarray:
        """The last position's logits after ``ids``."""
        self.position += len(ids)
        self.binding.bind_cpu_input("input_ids", np.asarray([ids], np.int64))
        self.binding.bind_cpu_input("attention_mask", np.ones((1, self.position), np.int64))
        self.binding.bind_output("logits")
        self.session.run_with_iobinding(self.binding)
        return self.binding.get_outputs()[0].numpy()[0, -1]


def generate(
    model: ModelLike | Generator,
    prompt: str | Sequence[int],
    *,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    stream: Callable[[str], None] | None = None,
    threads: int | None = None,
    accuracy_level: int | None = None,
) -> Generation:
    """Generate text after ``prompt`` with a model built by ``from-gguf --graph``.

    Args:
        model: the model (path or ModelProto), or a :class:`Generator` to reuse its session.
        prompt: the text, tokenized with the GGUF file's tokenizer (BOS first where it says
            so), or its token ids as they are.
        max_new_tokens: at most this many new tokens.
        temperature: 0 (default) is greedy; above 0 samples (with ``top_k``, ``top_p``).
        top_k: sample among the k most probable tokens only (0: all).
        top_p: sample among the most probable tokens whose probability reaches p (1: all).
        seed: the sampling's random seed (None: fresh entropy).
        stream: called with each new piece of text as soon as it is complete.
        threads: onnxruntime's intra-op thread count (ignored when ``model`` is a Generator).
        accuracy_level: MatMulNBits' (ignored when ``model`` is a Generator).

    Returns:
        A :class:`Generation`: the new text and tokens (stopped at EOS, which is not included).

    Raises:
        ValidationError: the model has no decoder graph or no tokenizer metadata, its vocabulary
            and logits differ in size; an argument is out of range (code ``bad_argument``: a
            prompt id outside the vocabulary, a negative ``max_new_tokens``, a temperature that
            is not finite, an empty prompt, the prompt and ``max_new_tokens`` past the model's
            context length, ...).

    Example::

        onnx_struct.generate("model.onnx", "Once upon a time", max_new_tokens=20, stream=print).text
    """
    if not isinstance(model, Generator):
        if isinstance(model, (str, os.PathLike)):
            model = os.fspath(model)
        model = Generator(model, threads=threads, accuracy_level=accuracy_level)
    return model.generate(
        prompt,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        stream=stream,
    )
