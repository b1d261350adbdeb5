"""``apply_chat_template``: a GGUF file's chat template rendered as transformers renders it.

The template (the file's ``tokenizer.chat_template``, a built-in name, a ``.jinja`` file or the text
itself) is compiled in :class:`~onnx_struct.llm.chat.sandbox.BoundedEnvironment` and rendered with
what transformers' ``apply_chat_template`` passes: ``messages`` (as plain data, keys whose value is
None dropped, reasoning aliased under ``reasoning_content`` and ``thinking``), ``tools``,
``documents`` (None), ``add_generation_prompt``, ``bos_token`` / ``eos_token`` (the texts of the
file's ``tokenizer.ggml.bos_token_id`` / ``eos_token_id``, "" where the file has none) and the
caller's extra variables. docs/chat.md lists where llama-cpp-python's ``Jinja2ChatFormatter``
differs.
"""

from __future__ import annotations

import functools
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.limits import MAX_TEMPLATE_CHARS, MAX_TEMPLATE_DATA_DEPTH, MAX_TEMPLATE_OUTPUT_CHARS
from onnx_struct.llm.chat.builtin import builtin_templates

TEMPLATE_KEY = "tokenizer.chat_template"
_KEYS = (TEMPLATE_KEY, "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id")
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # transformers' names for a message's reasoning


def _metadata(model: Any) -> Mapping[str, object]:
    """The GGUF metadata of ``model``, read as :func:`~onnx_struct.load_tokenizer` reads it (a
    Tokenizer: its vocabulary's metadata)."""
    from onnx_struct.llm.tokenizer.tokenizer import model_metadata  # noqa: PLC0415

    return model_metadata(model, "apply_chat_template(model)")


def _template_text(text: object, where: str) -> str:
    if not isinstance(text, str):
        raise ValidationError(
            where, f"a chat template must be a string, not {type(text).__name__}", code="bad_template"
        )
    if len(text) > MAX_TEMPLATE_CHARS:
        raise limit_exceeded(where, "chat template is too long (MAX_TEMPLATE_CHARS)", len(text), MAX_TEMPLATE_CHARS)
    return text


def _resolve(metadata: Mapping[str, object], chat_template: str | None) -> tuple[str, str]:
    """(template text, where it came from) for the messages of errors."""
    if chat_template is None:
        if TEMPLATE_KEY not in metadata:
            raise ValidationError(
                f"gguf.kv[{TEMPLATE_KEY!r}]",
                "the file has no chat template; name one with chat_template= (--chat-template NAME|FILE), "
                f"e.g. one of the built-ins: {', '.join(sorted(builtin_templates()))}",
                code="no_chat_template",
            )
        where = f"gguf.kv[{TEMPLATE_KEY!r}]"
        return _template_text(metadata[TEMPLATE_KEY], where), where
    if not isinstance(chat_template, (str, os.PathLike)):
        raise ValidationError(
            "chat_template",
            f"must be a name, a path or template text, not {type(chat_template).__name__}",
            code="bad_template",
        )
    text = os.fspath(chat_template)
    builtins = builtin_templates()
    if text in builtins:
        return builtins[text], f"chat_template {text!r} (built-in)"
    named = f"{TEMPLATE_KEY}.{text}"
    if named in metadata:  # a named template the file carries (tokenizer.chat_template.<name>)
        return _template_text(metadata[named], f"gguf.kv[{named!r}]"), f"gguf.kv[{named!r}]"
    if "{" not in text and ("\n" not in text and len(text) < 4096):
        path = pathlib.Path(text)
        if path.suffix == ".jinja" or path.is_file():
            try:
                with open(path, encoding="utf-8") as handle:
                    body = handle.read(MAX_TEMPLATE_CHARS + 1)
            except (OSError, UnicodeDecodeError) as error:
                raise ValidationError(
                    f"chat_template {text!r}", f"cannot read the template file: {error}", code="bad_template"
                ) from None
            return _template_text(body, f"chat_template {text!r}"), f"chat_template {text!r}"
        raise ValidationError(
            f"chat_template {text!r}",
            f"neither a built-in template ({', '.join(sorted(builtins))}) nor a template file nor template text",
            code="no_chat_template",
        )
    return _template_text(text, "chat_template"), "chat_template"


def resolve_chat_template(metadata_or_model: Any, chat_template: str | os.PathLike | None = None) -> str:
    """The template text ``apply_chat_template`` renders.

    Args:
        metadata_or_model: GGUF metadata (a mapping) or a model as :func:`apply_chat_template` takes it.
        chat_template: None for the file's ``tokenizer.chat_template``; a built-in name, the name of a
            template the file carries (``tokenizer.chat_template.<name>``), a ``.jinja`` path, or the
            template text.

    Returns:
        The Jinja text of the template.

    Raises:
        ValidationError: code ``no_chat_template`` (the file has none and none is given, or the name
            is unknown), ``bad_template`` (unreadable), ``limit_exceeded`` (past MAX_TEMPLATE_CHARS).
    """
    return _resolve(_metadata(metadata_or_model), chat_template)[0]


def _token_text(metadata: Mapping[str, object], key: str) -> str:
    tokens = metadata.get("tokenizer.ggml.tokens")
    index = metadata.get(key)
    if isinstance(index, bool) or not isinstance(index, int) or not isinstance(tokens, Sequence):
        return ""
    if not 0 <= index < len(tokens) or not isinstance(tokens[index], str):
        raise ValidationError(f"gguf.kv[{key!r}]", f"{index} is not a token id below {len(tokens)}")
    return tokens[index]


def _plain(value: Any, where: str, depth: int = 0) -> Any:
    """transformers' ``_plain_template_data``: the template sees only JSON-like data, never objects.
    Containers nest at most MAX_TEMPLATE_DATA_DEPTH deep (a list holding itself would recurse forever)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if depth > MAX_TEMPLATE_DATA_DEPTH and isinstance(value, (Mapping, list, tuple)):
        raise limit_exceeded(
            where,
            "the data nests too deeply, or holds itself (MAX_TEMPLATE_DATA_DEPTH)",
            depth,
            MAX_TEMPLATE_DATA_DEPTH,
        )
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {
            _plain(key, where, depth + 1): _plain(item, f"{where}[{key!r}]", depth + 1) for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        plain = [_plain(item, f"{where}[{index}]", depth + 1) for index, item in enumerate(value)]
        return tuple(plain) if isinstance(value, tuple) else plain
    return f"<{type(value).__name__}>"


def _messages(messages: Any) -> list[dict]:
    where = "apply_chat_template(messages)"
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValidationError(where, "must be a list of {'role': ..., 'content': ...} dicts", code="bad_argument")
    chat = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValidationError(
                f"{where}[{index}]", f"a message must be a dict, not {type(message).__name__}", code="bad_argument"
            )
        if not isinstance(message.get("role"), str):
            raise ValidationError(
                f"{where}[{index}]['role']", "every message needs a string 'role'", code="bad_argument"
            )
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list, tuple)):
            raise ValidationError(
                f"{where}[{index}]['content']",
                f"must be a string or a list of content parts, not {type(content).__name__}",
                code="bad_argument",
            )
        # transformers drops the keys whose value is None, then aliases the reasoning fields.
        plain = {key: value for key, value in _plain(dict(message), f"{where}[{index}]").items() if value is not None}
        reasoning = next((plain[key] for key in _REASONING_FIELDS if plain.get(key) is not None), None)
        if reasoning is not None:
            plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
        chat.append(plain)
    return chat


@functools.lru_cache(maxsize=32)
def _compiled(text: str):
    from onnx_struct.llm.chat.sandbox import BoundedEnvironment

    return BoundedEnvironment().from_string(text)


def render_template(text: str, where: str, variables: dict[str, Any]) -> str:
    """Render ``text`` in the bounded sandbox; every failure is a ValidationError at ``where``."""
    import jinja2

    from onnx_struct.llm.chat.sandbox import Budget, TemplateBoundExceeded, current_budget

    def refuse(reason: str) -> ValidationError:
        return ValidationError(where, reason, code="bad_template")

    try:
        template = _compiled(text)
    except jinja2.TemplateSyntaxError as error:
        raise refuse(f"does not compile: {error.message} (line {error.lineno})") from None
    except (RecursionError, MemoryError):
        raise refuse("does not compile: nested too deeply") from None
    except Exception as error:  # Jinja's compiler and Python's compile() raise several kinds
        raise refuse(f"does not compile: {type(error).__name__}: {error}") from None
    token = current_budget.set(Budget())
    pieces, total = [], 0
    try:
        for piece in template.generate(**variables):
            total += len(piece)
            if total > MAX_TEMPLATE_OUTPUT_CHARS:
                raise limit_exceeded(
                    where, "the rendered chat is too long (MAX_TEMPLATE_OUTPUT_CHARS)", total, MAX_TEMPLATE_OUTPUT_CHARS
                )
            pieces.append(piece)
    except ValidationError as error:
        if error.code == "limit_exceeded":
            raise
        raise refuse(str(error)) from None
    except TemplateBoundExceeded as error:
        raise refuse(f"refused: {error}") from None
    except jinja2.exceptions.SecurityError as error:
        raise refuse(f"refused by the sandbox: {error}") from None
    except jinja2.TemplateError as error:
        raise refuse(f"the template raised: {error}") from None
    except RecursionError:
        raise refuse("refused: recursion too deep") from None
    except MemoryError:
        raise refuse("refused: out of memory") from None
    except Exception as error:  # a template's own fault (a None + str, a bad index, ...)
        raise refuse(f"rendering failed: {type(error).__name__}: {error}") from None
    finally:
        current_budget.reset(token)
    return "".join(pieces)


def apply_chat_template(
    model: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    chat_template: str | os.PathLike | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    **extra: Any,
) -> str:
    """Render a conversation with the model's chat template, as transformers' ``apply_chat_template``.

    Args:
        model: a converted .onnx path, a ModelProto, a .gguf path, or a GGUF metadata mapping.
        messages: the conversation: dicts with a string ``role`` and a ``content``.
        add_generation_prompt: end with the header of the assistant's turn.
        chat_template: None for the file's own; a built-in name (:func:`builtin_templates`), the name
            of a template the file carries, a ``.jinja`` path, or template text.
        tools: JSON-schema tool descriptions passed to the template as ``tools``.
        **extra: further template variables (e.g. ``enable_thinking=False``).

    Returns:
        The rendered prompt text (special tokens as text, to tokenize with ``special=True``).

    Raises:
        ValidationError: ``no_chat_template`` (none in the file, none given), ``bad_template`` (the
            template does not compile, raises, or goes past a bound: MAX_TEMPLATE_STEPS, ...),
            ``bad_argument`` (messages not a list of role/content dicts), ``limit_exceeded``.
    """
    metadata = _metadata(model)
    text, where = _resolve(metadata, chat_template)
    variables = {
        "bos_token": _token_text(metadata, "tokenizer.ggml.bos_token_id"),
        "eos_token": _token_text(metadata, "tokenizer.ggml.eos_token_id"),
        **_plain(extra, "apply_chat_template(extra)"),
        "messages": _messages(messages),
        "tools": _plain(tools, "apply_chat_template(tools)"),
        "documents": None,
        "add_generation_prompt": bool(add_generation_prompt),
    }
    return render_template(text, where, variables)
