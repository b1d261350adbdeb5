"""Chat with an instruct model built by `onnx-struct from-gguf IN.gguf OUT.onnx --graph`.

Each message is rendered with the file's chat template (or --chat-template NAME|FILE) with the
whole conversation, and the reply streams to stdout; the KV cache is kept across turns, so a turn
runs only its new tokens. On a terminal: a "> " prompt, Ctrl-C stops a reply and returns to the
prompt, Ctrl-C at the prompt exits 130, Ctrl-D (end of input) exits 0. From a pipe or file: one
user message per line (empty lines skipped), each reply on its own line, exit 0 at the end
(Ctrl-C: 130).

    onnx-struct chat model.onnx --system "You are brief."
    printf 'hi\\nwho are you?\\n' | onnx-struct chat model.onnx --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import sys

from onnx_struct import limits
from onnx_struct.cli import EXIT_OK, UsageError
from onnx_struct.cli.generate import (
    add_sampling_arguments,
    check_sampling_options,
    option_error,
    require_stdout,
    stdout_gone,
)
from onnx_struct.errors import ValidationError

INPUT = "model"
HELP = "chat with an instruct model from `from-gguf --graph` (exit 0 ok/EOF, 1 invalid model, 2 usage/I-O, 130 Ctrl-C)"
PROMPT = "> "
EXIT_INTERRUPTED = 130  # Ctrl-C at the prompt, as a shell reports a process ended by SIGINT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx model (from-gguf --graph) of an instruct GGUF file")
    parser.add_argument("--system", default=None, help="a system message starting the conversation")
    parser.add_argument("--max-new-tokens", type=int, default=512, help="at most this many tokens a reply (512)")
    parser.add_argument(
        "--chat-template",
        default=None,
        metavar="NAME|FILE",
        help="a built-in template (chatml, llama3, ...) or a .jinja file instead of the file's own",
    )
    parser.add_argument("--ctx-size", type=int, default=None, help="context positions (default: the model's)")
    add_sampling_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.threads is not None and not 1 <= args.threads <= limits.MAX_INTRA_OP_THREADS:
        raise UsageError(f"--threads must be from 1 to {limits.MAX_INTRA_OP_THREADS}")
    require_stdout()
    if sys.stdin is None:  # `<&-`: Python's sys.stdin is None
        raise UsageError("standard input is closed: nothing to read the messages from")
    if args.system is not None and not _is_unicode(args.system):
        raise UsageError("--system: not valid UTF-8 (a lone surrogate): give the message as text")
    replace_unencodable(sys.stdin)  # input its encoding cannot decode: U+FFFD, not a traceback
    try:
        chat = _open(args)
        terminal = sys.stdin.isatty()
        return _converse(chat, args, terminal)
    except BrokenPipeError:
        return stdout_gone()
    except ImportError as error:
        if error.name not in ("tokenizers", "jinja2"):
            raise
        raise UsageError(str(error)) from None
    except ValidationError as error:
        if error.code == "bad_argument" and error.path.startswith(("generate(", "chat(")):  # the option --name
            raise option_error(error, "--system") from None
        raise


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def replace_unencodable(stream) -> None:
    """Characters the stream's encoding lacks (PYTHONIOENCODING=ascii) print as '?' (read as U+FFFD),
    not a traceback."""
    if hasattr(stream, "reconfigure"):
        stream.reconfigure(errors="replace")


def _open(args: argparse.Namespace):
    from onnx_struct.llm.chat.session import Chat  # noqa: PLC0415
    from onnx_struct.llm.generate import load_generator  # noqa: PLC0415 - onnxruntime on use only

    check_sampling_options(args)
    generator = load_generator(
        args.model, threads=args.threads, accuracy_level=args.accuracy_level, cache_dir=args.cache_dir
    )
    chat = Chat(
        generator,
        system=args.system,
        chat_template=args.chat_template,
        ctx_size=args.ctx_size,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
    )
    # The template is tried before the first message: a file without one fails at start, not later.
    generator.render([{"role": "user", "content": "hi"}], chat_template=args.chat_template, add_generation_prompt=True)
    return chat


def _converse(chat, args: argparse.Namespace, terminal: bool) -> int:
    if terminal:
        try:
            import readline  # noqa: F401, PLC0415 - line editing for input()
        except ImportError:  # pragma: no cover - platforms without it
            pass
    while True:
        try:
            line = input(PROMPT) if terminal else sys.stdin.readline()
        except EOFError:  # Ctrl-D
            print()
            return EXIT_OK
        except KeyboardInterrupt:  # Ctrl-C at the prompt
            print()
            return EXIT_INTERRUPTED
        if not terminal and not line:  # end of the piped input
            return EXIT_OK
        text = line.rstrip("\r\n")
        if not text.strip():
            continue
        try:
            # Ctrl-C ends a reply on a terminal only; from a pipe it ends the command (exit 130).
            reply = chat.send(text, max_new_tokens=args.max_new_tokens, stream=_write, interruptible=terminal)
        except KeyboardInterrupt:
            if not terminal:
                raise
            reply = None  # before the reply began (rendering, tokenizing)
        sys.stdout.write("\n")
        sys.stdout.flush()
        if reply is not None and reply.stop_reason == "context_full":
            print(
                f"onnx-struct chat: the context is full ({chat.ctx_size} positions): the reply was cut; "
                "start a new chat or give a larger --ctx-size",
                file=sys.stderr,
            )


def _write(piece: str) -> None:
    sys.stdout.write(piece)
    sys.stdout.flush()
