"""`onnx-struct chat` (onnx_struct/cli/chat.py): one message per line from a pipe, replies as the
float64 numpy forward of the whole conversation gives them, options refused as usage errors; on a
pseudo-terminal (slow: a child process): the "> " prompt, Ctrl-C mid-reply back to the prompt,
Ctrl-C at the prompt exits 130, Ctrl-D exits 0; an ASCII-only stdout prints without a traceback.

The chat template is tests/test_chat_session.py's TEMPLATE given as --chat-template FILE; the
replies' oracle renders the conversation with its Python twin.
"""

from __future__ import annotations

import io
import os
import select
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from support.llm import TinyLlama, greedy, read_weights, spm_vocab, write_gguf  # noqa: E402
from test_chat_session import TEMPLATE, _ids, stand_in_template  # noqa: E402

from onnx_struct.cli import main  # noqa: E402

# The child: each model run slowed (so that Ctrl-C lands mid-reply), then main.
CHILD = """
import sys, time
from onnx_struct.llm import kv_cache
run = kv_cache.KVCache._run
def slow(self, ids):
    time.sleep({delay})
    return run(self, ids)
kv_cache.KVCache._run = slow
from onnx_struct.cli import main
sys.exit(main(sys.argv[1:]))
"""
TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    config = TinyLlama(**spm_vocab(), seed=5)
    directory = tmp_path_factory.mktemp("cli_chat")
    write_gguf(directory / "model.gguf", config)
    assert main(["from-gguf", str(directory / "model.gguf"), str(directory / "model.onnx"), "--graph"]) == 0
    (directory / "template.jinja").write_text(TEMPLATE)
    return config, directory / "model.onnx", read_weights(directory / "model.gguf")


def _chat(tiny, *args: str) -> list[str]:
    """``onnx-struct chat``'s arguments for the tiny model and the template."""
    return ["chat", str(tiny[1]), "--chat-template", str(tiny[1].parent / "template.jinja"), *args]


def _tokenizer(model):
    import onnx  # noqa: PLC0415

    from onnx_struct.convert import decode_metadata  # noqa: PLC0415
    from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer  # noqa: PLC0415

    return load_tokenizer(decode_metadata(onnx.load(model)))


def _text(tokenizer, tokens: list[int]) -> str:
    streamer = tokenizer.streamer()
    return "".join(streamer.push(t) for t in tokens) + streamer.flush()


def _replies(tiny, lines: list[str], n: int) -> list[str]:
    """The oracle's greedy replies for each turn (the conversation rendered from scratch each
    time, greedy up to EOS in the float64 numpy forward)."""
    config, model, weights = tiny
    tokenizer = _tokenizer(model)
    conversation, out = [], []
    for line in lines:
        conversation.append({"role": "user", "content": line})
        prompt = _ids(config, stand_in_template(None, conversation, chat_template=None, add_generation_prompt=True))
        tokens = greedy(weights, config, prompt, n)
        if config.eos in tokens:
            tokens = tokens[: tokens.index(config.eos)]
        out.append(_text(tokenizer, tokens))
        conversation.append({"role": "assistant", "content": out[-1]})
    return out


def test_piped_lines_are_one_message_each(tiny, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello world\n\nand the café\n"))
    assert main(_chat(tiny, "--max-new-tokens", "6", "--accuracy-level", "0")) == 0
    out, _ = capsys.readouterr()
    assert "> " not in out  # no prompt when stdin is not a terminal
    assert out == "".join(reply + "\n" for reply in _replies(tiny, ["hello world", "and the café"], 6))


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (["--temperature", "nan"], "--temperature: nan is not a finite number"),
        (["--max-new-tokens", "-1"], "--max-new-tokens: -1 is not an integer >= 0"),
        (["--threads", "0"], "--threads must be from 1 to 1024"),
    ],
)
def test_options_out_of_range_are_usage_errors(tmp_path, capsys, option, words):
    assert main(["chat", str(tmp_path / "absent.onnx"), *option]) == 2
    assert words in capsys.readouterr().err


def test_a_ctx_size_past_the_model_is_a_usage_error(tiny, capsys):
    assert main(_chat(tiny, "--ctx-size", "100000")) == 2
    err = capsys.readouterr().err
    assert err.startswith("onnx-struct chat: --ctx-size: 100000 is not an integer from 1") and err.count("\n") == 1


def test_a_file_without_a_chat_template_fails_at_the_start_in_one_line(tiny, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert main(["chat", str(tiny[1])]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"onnx-struct chat: {tiny[1]}: gguf.kv['tokenizer.chat_template']")


def test_a_full_context_is_one_line_on_stderr(tiny, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\nworld and the café and more\n"))
    argv = _chat(tiny, "--ctx-size", "24", "--max-new-tokens", "100", "--accuracy-level", "0")
    code = main(argv)
    err = capsys.readouterr().err
    first, second = err.splitlines()
    assert first == (
        "onnx-struct chat: the context is full (24 positions): the reply was cut; start a new chat or give a "
        "larger --ctx-size"
    )
    assert code == 1  # the second message no longer fits: one line, as every subcommand's errors
    assert second.startswith(f"onnx-struct chat: {tiny[1]}: chat(context): the context is full: the conversation takes")


# ------------------------------------------------------------------------ a child process, a pty
def _child(tiny, *args: str, delay: float = 0.0) -> list[str]:
    code = CHILD.format(delay=delay)
    return [sys.executable, "-c", code, *_chat(tiny, "--accuracy-level", "0", *args)]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": ROOT, **extra}


@pytest.mark.slow
def test_an_ascii_only_stdout_prints_replies_without_a_traceback(tiny):
    (expected,) = _replies(tiny, ["hello world"], 8)
    assert not expected.isascii()  # the reply has a character ASCII lacks
    done = subprocess.run(
        _child(tiny, "--max-new-tokens", "8"),
        input=b"hello world\n",
        capture_output=True,
        env=_env(PYTHONIOENCODING="ascii"),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr
    assert done.stdout.decode("ascii") == expected.encode("ascii", "replace").decode() + "\n"


class Terminal:
    """The child on a pseudo-terminal it controls: Ctrl-C typed there is its SIGINT."""

    def __init__(self, argv: list[str]) -> None:
        import fcntl  # noqa: PLC0415
        import termios  # noqa: PLC0415

        self.master, slave = os.openpty()

        def controlling_terminal() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            # A shell starts a foreground job with SIGINT at its default and unblocked; a test
            # worker may hold it otherwise (a slow-tier run once sent Ctrl-C to children that
            # ignored it: the reply ran on and the prompt never exited), and exec keeps both.
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            signal.signal(signal.SIGINT, signal.SIG_DFL)

        self.process = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=_env(),
            start_new_session=True,
            preexec_fn=controlling_terminal,  # noqa: PLW1509 - the child's own terminal
        )
        os.close(slave)
        self.output = b""

    def read_until(self, marker: bytes, timeout: float = 60.0) -> bytes:
        deadline = time.monotonic() + timeout
        while marker not in self.output:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} in {self.output!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # the child closed the terminal
                    chunk = b""
                assert chunk, f"the child ended before {marker!r}: {self.output!r}"
                self.output += chunk
        return self.output

    def read_more(self, n: int, timeout: float = 60.0) -> None:
        """Wait for at least ``n`` more bytes of output."""
        start = len(self.output)
        deadline = time.monotonic() + timeout
        while len(self.output) < start + n:
            ready, _, _ = select.select([self.master], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no output after {self.output!r}"
            self.output += os.read(self.master, 4096)

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=60)
        finally:
            os.close(self.master)


@pytest.mark.slow
def test_on_a_terminal_ctrl_c_stops_a_reply_and_ctrl_d_exits_0(tiny):
    terminal = Terminal(_child(tiny, "--max-new-tokens", "100", delay=0.1))
    try:
        terminal.read_until(b"> ")
        terminal.type(b"hello world\r")
        terminal.read_until(b"hello world\r\n")  # the echo
        terminal.output = b""
        terminal.read_more(2)  # the reply has begun (0.1 s per token)
        terminal.type(b"\x03")  # Ctrl-C mid-reply
        begun = terminal.output
        terminal.output = b""
        terminal.read_until(b"> ")  # back at the prompt, alive
        # The reply stopped there: after the tty's "^C" echo comes at most the text the streamer
        # still held (an incomplete character, flushed as U+FFFD) and the token under way when the
        # signal came, never the rest of the 100 tokens.
        after = terminal.output
        assert after.startswith(b"^C") and after.endswith(b"\r\n> "), after
        (full,) = _replies(tiny, ["hello world"], 100)
        printed = begun + after[len(b"^C") : -len(b"\r\n> ")]
        assert len(full.encode()) > 100 and len(printed) < len(full.encode()) // 2, (printed, full)
        assert terminal.process.poll() is None
        terminal.type(b"and\r")
        terminal.output = b""
        terminal.read_until(b"> ", timeout=120)  # the next reply came, and the prompt again
        terminal.type(b"\x04")  # Ctrl-D at the prompt
        assert terminal.wait() == 0
    finally:
        if terminal.process.poll() is None:
            terminal.process.kill()


@pytest.mark.slow
def test_on_a_terminal_ctrl_c_at_the_prompt_exits_130(tiny):
    terminal = Terminal(_child(tiny))
    try:
        terminal.read_until(b"> ")
        # readline writes the prompt before it takes the terminal over: a Ctrl-C in between can be
        # lost under load (a person would press it again), so it is typed again until the child ends
        for _ in range(20):
            terminal.type(b"\x03")
            try:
                terminal.process.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                continue
        assert terminal.wait() == 130
        assert b"Traceback" not in terminal.output
    finally:
        if terminal.process.poll() is None:
            terminal.process.kill()
