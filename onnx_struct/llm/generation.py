"""Text generation with a decoder model built by ``from-gguf --graph``: ``onnx_struct.generate(...)``.

The model's GGUF metadata gives the tokenizer; the session is an :class:`onnx_struct.InferenceSession`
(quantized execution) and the KV cache a :class:`~onnx_struct.llm.kv_cache.KVCache`. The prompt
(text, token ids, or chat ``messages`` rendered with the file's chat template) runs as one batch
(prompt processing), then one token per step until ``max_new_tokens`` or an end-of-generation token
(llama.cpp's set: eos, eot, eom and the turn ends it recognises by their text). A chat session
(:mod:`onnx_struct.llm.chat.session`) keeps the cache across turns.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
from onnx import numpy_helper

from onnx_struct.errors import ValidationError
from onnx_struct.formats.gguf.metadata import checked_context_length, decode_metadata
from onnx_struct.llm.kv_cache import KVCache
from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer
from onnx_struct.runtime.session import InferenceSession
from onnx_struct.runtime.threads import checked_threads
from onnx_struct.schema.model import ModelLike, load_model

ROPE_LENGTH = "rope/length"  # the initializer from-gguf --graph gives the RoPE tables' length


STOP_REASONS = ("eog", "max_new_tokens", "context_full", "interrupted")
# apply_chat_template's shape: (metadata, messages, *, add_generation_prompt, chat_template) -> text
ChatRenderer = Callable[..., str]


@dataclasses.dataclass
class Generation:
    """What :func:`generate` produced: the new text and token ids (the end-of-generation token not
    included), the prompt's ids, whether an end-of-generation token stopped it (``stop_id``: which),
    and the seconds spent on the prompt and on the new tokens.

    ``prefilled`` is how many prompt tokens the model ran (fewer than the prompt's in a chat turn
    whose start was already in the KV cache); ``stop_reason`` one of ``"eog"``, ``"max_new_tokens"``,
    ``"context_full"`` (the context size was reached), ``"interrupted"`` (Ctrl-C in a chat turn).
    """

    text: str
    tokens: list[int]
    prompt_tokens: list[int]
    stopped_at_eos: bool
    prompt_seconds: float
    generation_seconds: float
    stop_id: int | None = None
    prefilled: int = 0
    stop_reason: str = "max_new_tokens"


def sample(
    logits: np.ndarray, rng: np.random.Generator, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0
) -> int:
    """The next token from one row of logits.

    ``temperature`` 0 is greedy (the first largest logit). Otherwise the logits are divided by
    ``temperature``, cut to the ``top_k`` largest (0: all), then to the smallest set of the most
    probable tokens whose probability reaches ``top_p`` (1: all), and one token is drawn from the
    renormalized softmax of what is left with ``rng``.

    Raises:
        ValidationError: (``non_finite_logits``) the logits hold NaN or +inf, or none is finite:
            no distribution can be drawn from them (a model whose weights overflow).
    """
    logits = np.asarray(logits)
    best = int(np.argmax(logits))  # the first NaN, where there is one
    top = float(logits[best])
    if not math.isfinite(top):
        bad = "NaN" if math.isnan(top) else "+inf" if top > 0 else "only -inf"
        raise ValidationError(
            "generate(logits)",
            f"the model's logits hold {bad}: no token can be sampled (the model's weights or activations "
            "overflow float32)",
            code="non_finite_logits",
        )
    if temperature <= 0:
        return best
    # Shifted by the largest logit before the division: a temperature as small as 1e-320 sends the
    # others to -inf (probability 0) instead of overflowing to inf - inf = NaN.
    shifted = np.asarray(logits, np.float64) - top
    if temperature < 1e-30:
        with np.errstate(over="ignore"):
            scaled = shifted / temperature
    else:
        scaled = shifted / temperature
    order = np.argsort(-scaled, kind="stable")
    if top_k > 0:
        order = order[:top_k]
    probs = np.exp(scaled[order])
    probs /= probs.sum()
    if top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(probs), top_p)) + 1  # the first prefix reaching top_p
        order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
    return int(order[rng.choice(len(order), p=probs)])


class StreamFailed(Exception):
    """The ``stream`` callback raised ``error``: carried past the loop's boundary, which turns the
    model's and the runtime's failures (not the caller's) into a ValidationError."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


def _call_stream(stream: Callable[[str], None], piece: str) -> None:
    try:
        stream(piece)
    except Exception as error:
        raise StreamFailed(error) from error


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


def _check_cache_layout(graph, inputs: Mapping[str, object], cache: Sequence[object]) -> None:
    """Every KV cache input is shaped as layer 0's (one buffer shape serves them all), and each
    GroupQueryAttention's ``kv_num_heads`` is the head count its past inputs declare: a model
    edited after conversion would otherwise fail inside onnxruntime's attention mid-generation.

    Raises:
        ValidationError: (``invalid``) the path names the input or node that disagrees.
    """
    for name, shape in inputs.items():
        if name.startswith("past_key_values.") and list(shape[1:]) != list(cache[1:]):
            raise ValidationError(
                f"graph.input ({name!r})",
                f"shape {list(shape)}, but past_key_values.0.key is {list(cache)}: every KV cache input must agree",
                code="invalid",
            )
    for index, node in enumerate(graph.node):
        if node.op_type != "GroupQueryAttention":
            continue
        heads = next((a.i for a in node.attribute if a.name == "kv_num_heads"), None)
        for past in node.input[3:5]:
            shape = inputs.get(past)
            if shape is not None and heads is not None and shape[1] != heads:
                raise ValidationError(
                    f"graph.node[{index}] ({node.name!r})",
                    f"kv_num_heads is {heads}, but its past input {past!r} declares {shape[1]} KV heads",
                    code="invalid",
                )


class Generator:
    """A decoder model loaded for generation: its session, tokenizer and KV cache layout.

    Args:
        model: a model built by ``from-gguf --graph`` (path or ModelProto); with a path, tensors
            referenced in a .gguf are read from the model's directory.
        threads: onnxruntime's intra-op thread count (None: its default).
        accuracy_level: MatMulNBits' (None: onnxruntime's, 4; 0: float32 activations).
        tokenizer: builds the tokenizer from the model's GGUF metadata (None:
            :func:`onnx_struct.load_tokenizer`); it gives ``encode``, ``decode``, ``bos_id``,
            ``eos_id``, ``add_bos``, ``eos_ids`` and ``streamer()``.
        chat_renderer: renders chat messages (``apply_chat_template``'s signature: metadata,
            messages, ``add_generation_prompt=``, ``chat_template=``; None:
            :func:`onnx_struct.apply_chat_template`, which needs jinja2).
        cache_dir: a session cache directory (None: none): the lowered model and its repacked
            weights are kept there, so that the next Generator over the same files starts
            without checking, lowering or repacking them (docs/llm.md, "Start-up and the session
            cache"; the model must be given as a path).

    Raises:
        ValidationError: the model has no decoder graph (no ``input_ids`` / ``past_key_values``
            inputs), no GGUF tokenizer metadata, a vocabulary of another size than its logits,
            a context length missing or above ``MAX_CONTEXT_LENGTH``; ``threads`` is not an
            integer >= 1, ``accuracy_level`` not None or an integer from 0 to 4 (``bad_argument``).
    """

    def __init__(
        self,
        model: ModelLike,
        *,
        threads: int | None = None,
        accuracy_level: int | None = None,
        tokenizer: Callable[[Mapping[str, object]], object] | None = None,
        chat_renderer: ChatRenderer | None = None,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        if accuracy_level is not None and (
            isinstance(accuracy_level, bool)
            or not isinstance(accuracy_level, (int, np.integer))
            or not 0 <= int(accuracy_level) <= 4  # MatMulNBits' levels
        ):
            raise ValidationError(
                "generate(accuracy_level)",
                f"{accuracy_level!r} is not None or an integer from 0 to 4",
                code="bad_argument",
            )
        threads = checked_threads(threads, "generate(threads)")
        try:
            self.session = InferenceSession(model, accuracy_level=accuracy_level, cache_dir=cache_dir, threads=threads)
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
        self.metadata = metadata
        # Built after the session, not while onnxruntime creates it (its initialization releases
        # the GIL): the vocabulary's memory would add to the session's transient peak (a
        # 262,144-token gemma3 file: 819 against 737 MiB) for about 0.05 s.
        self.tokenizer = (tokenizer or load_tokenizer)(metadata)
        self.chat_renderer = chat_renderer
        if self.tokenizer.vocab_size != self.n_vocab:  # an id the sampler picks must have a token
            raise ValidationError(
                "gguf.kv['tokenizer.ggml.tokens']",
                f"{self.tokenizer.vocab_size} tokens, but the model's logits have {self.n_vocab}",
                expected=self.n_vocab,
                actual=self.tokenizer.vocab_size,
            )
        self.n_layers = sum(1 for name in inputs if name.startswith("past_key_values.") and name.endswith(".key"))
        self.n_kv_heads, self.head_dim = cache[1], cache[3]
        _check_cache_layout(self.session.lowered.graph, inputs, cache)
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
        stop_at_eos: bool = True,
        stop_ids: Iterable[int] | None = None,
    ) -> Generation:
        """See :func:`generate`."""
        max_new_tokens = check_sampling(
            max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed
        )
        stops = self.stop_ids(stop_ids) if stop_at_eos else frozenset()
        if (prompt is None) == (messages is None):
            raise ValidationError("generate(prompt)", "give exactly one of prompt and messages", code="bad_argument")
        if messages is not None:
            prompt_ids = self.chat_prompt(messages, chat_template=chat_template)
        elif isinstance(prompt, str):
            prompt_ids = self.tokenizer.encode(prompt)
        else:
            prompt_ids = self._token_ids(prompt)
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
        sampler = Sampler(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        return self.continue_cache(KVCache(self, length), prompt_ids, sampler, max_new_tokens, stops, stream)

    def stop_ids(self, stop_ids: Iterable[int] | None = None) -> frozenset[int]:
        """The ids that end generation: ``stop_ids`` checked (None: the tokenizer's ``eos_ids``,
        llama.cpp's end-of-generation set; empty: never stop).

        Raises:
            ValidationError: (``bad_argument``) ``stop_ids`` is not an iterable of token ids.
        """
        if stop_ids is None:
            return frozenset(self.tokenizer.eos_ids)
        if isinstance(stop_ids, (str, bytes, bytearray)) or not isinstance(stop_ids, Iterable):
            raise ValidationError(
                "generate(stop_ids)", f"{stop_ids!r} is not None or a set of token ids", code="bad_argument"
            )
        return frozenset(self._token_ids(list(stop_ids), "generate(stop_ids)"))

    def chat_prompt(self, messages: Sequence[Mapping[str, object]], *, chat_template: str | None = None) -> list[int]:
        """The token ids of ``messages`` rendered with the chat template and a generation prompt, as
        llama.cpp's chat tokenizes them: the rendering loses a leading BOS text when the tokenizer
        adds BOS itself (and a trailing EOS text when it adds EOS), then is tokenized with BOS/EOS
        as the file says (add_special) and special-token texts as those tokens (parse_special).

        Raises:
            ValidationError: a message is malformed (path ``generate(messages)[i]``), the template
                is missing or fails (``no_chat_template``, ``bad_template``).
        """
        return self.tokenize_rendered(self.render(messages, chat_template=chat_template, add_generation_prompt=True))

    def render(
        self, messages: Sequence[Mapping[str, object]], *, chat_template: str | None, add_generation_prompt: bool
    ) -> str:
        """``messages`` (checked) rendered with the chat template (``apply_chat_template``)."""
        checked = check_messages(messages)
        renderer = self.chat_renderer
        if renderer is None:
            from onnx_struct.llm.chat.template import apply_chat_template as renderer  # noqa: PLC0415 - jinja2 on use
        return renderer(
            self.metadata, checked, chat_template=chat_template, add_generation_prompt=add_generation_prompt
        )

    def tokenize_rendered(self, text: str) -> list[int]:
        """A rendered chat prompt's ids: common_chat_templates_apply's BOS/EOS text trim, then
        llama_tokenize(add_special=true, parse_special=true)."""
        tokenizer = self.tokenizer
        if tokenizer.add_bos and tokenizer.bos_id is not None:
            bos = tokenizer.decode([tokenizer.bos_id], special=True)
            if bos and text.startswith(bos):  # the template wrote the BOS the tokenizer adds
                text = text[len(bos) :]
        vocab = getattr(tokenizer, "vocab", None)  # the llm Tokenizer's flags; the adapter adds no EOS
        if getattr(vocab, "add_eos", False) and tokenizer.eos_id is not None:
            eos = tokenizer.decode([tokenizer.eos_id], special=True)
            if eos and text.endswith(eos):
                text = text[: -len(eos)]
        return tokenizer.encode(text, add_bos=None, special=True)

    def continue_cache(
        self,
        cache: KVCache,
        prompt_ids: list[int],
        sampler: Sampler,
        max_new_tokens: int,
        stops: frozenset[int],
        stream: Callable[[str], None] | None,
        *,
        interruptible: bool = False,
    ) -> Generation:
        """Generate after ``prompt_ids``, keeping the longest prefix of them ``cache`` already holds.

        Exceptions of numpy, onnxruntime or the tokenizer inside the loop become a ValidationError
        (``runtime_failure``) naming the cause; an exception of ``stream`` (the caller's: a closed
        or full stdout) propagates as it was raised; with ``interruptible``, Ctrl-C (KeyboardInterrupt)
        ends the reply (``stop_reason`` ``"interrupted"``) instead of propagating.
        """
        if stream is not None and not callable(stream):
            raise ValidationError(
                "generate(stream)",
                f"a {type(stream).__name__}: not None or a callable taking a str",
                code="bad_argument",
            )
        try:
            return self._loop(cache, prompt_ids, sampler, max_new_tokens, stops, stream, interruptible)
        except StreamFailed as failed:
            # the caller's own failure (stdout closed, a full disk, a broken pipe): not the model's
            raise failed.error from None
        except ValidationError:
            raise
        except Exception as error:  # onnxruntime's, numpy's or the tokenizer's: a failure of this run
            raise ValidationError(
                "generate", f"generation failed: {type(error).__name__}: {error}", code="runtime_failure"
            ) from error

    def _loop(self, cache, prompt_ids, sampler, max_new_tokens, stops, stream, interruptible) -> Generation:
        keep = 0
        held = cache.tokens
        limit = min(len(held), len(prompt_ids) - 1)  # the prompt's last token runs: its logits are needed
        while keep < limit and held[keep] == prompt_ids[keep]:
            keep += 1
        cache.keep(keep)
        streamer = self.tokenizer.streamer()
        # Primed with the prompt's last token: the streamer drops a SentencePiece space from its
        # first piece only, and a continuation keeps its own ("▁café" after "world" is " café").
        streamer.push(prompt_ids[-1])
        tokens: list[int] = []
        pieces: list[str] = []
        reason, stop_id = "max_new_tokens", None
        prompt_seconds = generation_seconds = 0.0
        start = time.perf_counter()
        try:
            logits = cache.run(prompt_ids[keep:])
            prompt_seconds = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(max_new_tokens):
                token = sampler(logits)
                if token in stops:
                    reason, stop_id = "eog", token
                    break
                tokens.append(token)
                piece = streamer.push(token)
                pieces.append(piece)
                if stream is not None and piece:
                    _call_stream(stream, piece)
                if len(tokens) == max_new_tokens:
                    break
                if len(cache.tokens) >= cache.limit:
                    reason = "context_full"
                    break
                logits = cache.run([token])
        except KeyboardInterrupt:
            if not interruptible:
                raise
            reason = "interrupted"
        if not prompt_seconds:
            prompt_seconds = time.perf_counter() - start
        else:
            generation_seconds = time.perf_counter() - start
        rest = streamer.flush()
        if stream is not None and rest:
            _call_stream(stream, rest)
        text = "".join(pieces) + rest
        return Generation(
            text,
            tokens,
            list(prompt_ids),
            reason == "eog",
            prompt_seconds,
            generation_seconds,
            stop_id=stop_id,
            prefilled=len(prompt_ids) - keep,
            stop_reason=reason,
        )

    def _token_ids(self, prompt: Sequence[int], where: str = "generate(prompt)") -> list[int]:
        # Gather would wrap a negative id to the end of the vocabulary and fail on a large one.
        if isinstance(prompt, (bytes, bytearray)):  # its bytes would read as token ids
            raise ValidationError(where, "bytes: give the text as str or token ids", code="bad_argument")
        if not isinstance(prompt, Iterable):
            raise ValidationError(
                where, f"a {type(prompt).__name__}: not a str or a sequence of token ids", code="bad_argument"
            )
        ids = []
        for i, token in enumerate(prompt):
            if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= token < self.n_vocab:
                raise ValidationError(
                    f"{where}[{i}]",
                    f"{token!r} is not a token id in [0, {self.n_vocab})",
                    code="bad_argument",
                )
            ids.append(int(token))
        return ids


def check_sampling(*, max_new_tokens: object, temperature: object, top_k: object, top_p: object, seed: object) -> int:
    """Refuse generation arguments out of their ranges before anything runs.

    Returns:
        ``max_new_tokens`` as a Python int (a numpy integer would overflow in the arithmetic after).

    Raises:
        ValidationError: (code ``bad_argument``, path ``generate(name)``) ``max_new_tokens`` or
            ``top_k`` is not an integer >= 0, ``temperature`` not a finite number >= 0, ``top_p``
            not in (0, 1], ``seed`` neither None nor an integer >= 0.
    """

    def refuse(name: str, value: object, wanted: str) -> ValidationError:
        return ValidationError(f"generate({name})", f"{value!r} is not {wanted}", code="bad_argument")

    def integer(value: object) -> bool:
        # compared as a Python int: np.uint64(2**64 - 1) + 1 wraps, np.int64(2**63 - 1) + 1 overflows
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and int(value) >= 0

    def number(value: object) -> bool:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)

    for name, value in (("max_new_tokens", max_new_tokens), ("top_k", top_k)):
        if not integer(value):
            raise refuse(name, value, "an integer >= 0")
    if not number(temperature) or not 0 <= float(temperature) < math.inf:
        raise refuse("temperature", temperature, "a finite number >= 0")
    if not number(top_p) or not 0 < float(top_p) <= 1:
        raise refuse("top_p", top_p, "a number in (0, 1]")
    if seed is not None and not integer(seed):
        raise refuse("seed", seed, "None or an integer >= 0")
    return int(max_new_tokens)


class Sampler:
    """:func:`sample` with fixed arguments and its own seeded random generator (checked first)."""

    def __init__(self, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None):
        check_sampling(max_new_tokens=0, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        self.temperature, self.top_k, self.top_p = float(temperature), int(top_k), float(top_p)
        self.rng = np.random.default_rng(None if seed is None else int(seed))

    def __call__(self, logits: np.ndarray) -> int:
        return sample(logits, self.rng, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)


def check_messages(messages: object) -> list[dict[str, object]]:
    """Chat messages as the templates read them: a list of mappings, each with a ``role`` string
    and a ``content`` string (or None, as tool-call turns have).

    Returns:
        The messages as a list of plain dicts.

    Raises:
        ValidationError: (``bad_argument``) the path names the message or key that is not so.
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise ValidationError(
            "generate(messages)", "must be a list of {'role': ..., 'content': ...}", code="bad_argument"
        )
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValidationError(
                f"generate(messages)[{i}]", f"{type(message).__name__} is not a mapping", code="bad_argument"
            )
        if not isinstance(message.get("role"), str):
            raise ValidationError(f"generate(messages)[{i}]['role']", "missing or not a string", code="bad_argument")
        if not isinstance(message.get("content"), (str, type(None))):
            raise ValidationError(f"generate(messages)[{i}]['content']", "not a string", code="bad_argument")
        out.append(dict(message))
    return out
