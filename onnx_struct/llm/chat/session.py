"""A chat with a decoder model that keeps its KV cache across turns: ``Chat(generator)``.

Each turn renders the whole conversation with the chat template (and a generation prompt),
tokenizes it as llama.cpp's chat does, keeps the longest common prefix with the tokens the cache
already holds and runs only the tokens after it: a reply's own tokens stay in the cache, and the
next turn prefills only what the template puts after them (its end-of-turn text and the new user
message). The cache grows as the conversation does, up to ``ctx_size`` positions; a turn that
does not fit is refused (``context_full``), a reply that reaches the end is cut there
(``stop_reason`` ``"context_full"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from onnx_struct.errors import ValidationError
from onnx_struct.llm.generation import Generation, Generator, Sampler, check_sampling
from onnx_struct.llm.kv_cache import KVCache


class Chat:
    """A conversation with one model: ``send(text)`` adds a user message and returns the reply.

    Args:
        generator: the loaded model.
        system: a system message starting the conversation (None: none).
        chat_template: a built-in template name, a .jinja file or the template text instead of
            the model's ``tokenizer.chat_template``.
        ctx_size: the most positions the conversation may take (llama.cpp's ``-c``; None: the
            model's context length). The cache is allocated as it fills, not up front.
        temperature, top_k, top_p, seed: sampling, as :func:`~onnx_struct.generate`'s.
        stop_ids: the ids that end a reply (None: the tokenizer's end-of-generation ids).

    Raises:
        ValidationError: (``bad_argument``) ``ctx_size`` is not an integer from 1 to the model's
            context length, ``system`` not a string, a sampling argument out of range.
    """

    def __init__(
        self,
        generator: Generator,
        *,
        system: str | None = None,
        chat_template: str | None = None,
        ctx_size: int | None = None,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_ids: Iterable[int] | None = None,
    ) -> None:
        if ctx_size is None:
            ctx_size = generator.context_length
        if (
            isinstance(ctx_size, bool)
            or not isinstance(ctx_size, (int, np.integer))
            or not 1 <= int(ctx_size) <= generator.context_length  # the graph's RoPE tables end there
        ):
            raise ValidationError(
                "chat(ctx_size)",
                f"{ctx_size!r} is not an integer from 1 to the model's context length {generator.context_length}",
                code="bad_argument",
            )
        if system is not None and not isinstance(system, str):
            raise ValidationError("chat(system)", f"{type(system).__name__} is not a string", code="bad_argument")
        self.generator = generator
        self.chat_template = chat_template
        self.sampler = Sampler(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        self.stops = generator.stop_ids(stop_ids)
        self.messages: list[dict[str, object]] = [] if system is None else [{"role": "system", "content": system}]
        self.cache = KVCache(generator, int(ctx_size))

    @property
    def ctx_size(self) -> int:
        """The most positions the conversation may take."""
        return self.cache.limit

    def send(
        self,
        text: str,
        *,
        max_new_tokens: int = 256,
        stream: Callable[[str], None] | None = None,
        interruptible: bool = True,
    ) -> Generation:
        """Add the user message ``text``, generate the reply and add it to the conversation.

        With ``interruptible``, Ctrl-C (KeyboardInterrupt) during the reply ends it (``stop_reason``
        ``"interrupted"``); what was generated stays in the conversation as the reply (a turn
        interrupted before any token is dropped, user message included).

        Args:
            text: the user's message.
            max_new_tokens: at most this many tokens in the reply.
            stream: called with each new piece of the reply as soon as its characters are whole.
            interruptible: Ctrl-C ends the reply (False: the KeyboardInterrupt propagates).

        Returns:
            The reply as a :class:`~onnx_struct.llm.generation.Generation`; its ``prefilled``
            is how many prompt tokens ran (the rest were in the cache).

        Raises:
            ValidationError: ``text`` is not a string (``bad_argument``); the conversation no
                longer fits the context (``context_full``: the conversation is left as it was);
                the template fails.
        """
        if not isinstance(text, str):
            raise ValidationError("chat.send(text)", f"{type(text).__name__} is not a string", code="bad_argument")
        max_new_tokens = check_sampling(max_new_tokens=max_new_tokens, temperature=0, top_k=0, top_p=1, seed=None)
        messages = [*self.messages, {"role": "user", "content": text}]
        rendered = self.generator.render(messages, chat_template=self.chat_template, add_generation_prompt=True)
        prompt = self.generator.tokenize_rendered(rendered)
        if len(prompt) >= self.ctx_size:  # room for the prompt and at least one new token
            raise ValidationError(
                "chat(context)",
                f"the context is full: the conversation takes {len(prompt)} tokens of {self.ctx_size} "
                "(start a new chat, or give a larger ctx_size / --ctx-size)",
                code="context_full",
            )
        reply = self.generator.continue_cache(
            self.cache, prompt, self.sampler, max_new_tokens, self.stops, stream, interruptible=interruptible
        )
        if reply.stop_reason != "interrupted" or reply.tokens:
            self.messages = [*messages, {"role": "assistant", "content": reply.text}]
        return reply
