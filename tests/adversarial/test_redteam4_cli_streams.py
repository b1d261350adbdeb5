"""Red team 4: `generate`, `chat` and `tokenize` on closed, broken, full and odd standard streams,
on model paths that are no regular file, and on command-line text that is not UTF-8.

Each was a traceback, a hang or a failure blamed on the model before:

- ``chat <&-`` (Python's ``sys.stdin`` is None): AttributeError traceback; ``>&-`` on any of the
  three: ``generate`` blamed the model ("generation failed: AttributeError", exit 1), ``tokenize``
  printed nothing and exited 0;
- ``generate > /dev/full``: "model.onnx: generate: generation failed: OSError" (exit 1, the
  model's); now the I/O error (exit 2), as every other command's;
- ``generate | head -c 1``: "generation failed: BrokenPipeError" (exit 1); now silent, exit 141;
- ``tokenize FIFO`` blocked forever in open(); ``tokenize /dev/zero`` read 6.5 GB before a limit;
  now refused unopened (exit 2);
- ``tokenize`` with ``PYTHONIOENCODING=ascii``: UnicodeEncodeError traceback;
- text that is not UTF-8 on the command line: ``generate`` said "--encode(text: ..." and
  ``tokenize`` / ``chat --system`` blamed the model (exit 1); now the option's usage error (exit 2).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("gguf")

from support.llm import TinyLlama, spm_vocab, write_gguf  # noqa: E402

from onnx_struct.cli import main  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
NOT_UTF8 = b"caf\xe9 \xff"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("redteam4_cli")
    write_gguf(directory / "model.gguf", TinyLlama(**spm_vocab(), seed=5))
    assert main(["from-gguf", str(directory / "model.gguf"), str(directory / "model.onnx"), "--graph"]) == 0
    (directory / "template.jinja").write_text(TEMPLATE)
    return directory


def _cli(*args, redirect: str = "", stdin: bytes | None = b"", env: dict | None = None, timeout: float = 120):
    """Run ``onnx-struct ARGS`` through sh (for ``<&-`` / ``>&-`` / ``> /dev/full``)."""
    quoted = " ".join("'" + os.fsdecode(a).replace("'", "'\\''") + "'" for a in args)
    command = f'exec "{sys.executable}" -c "import sys; from onnx_struct.cli import main; sys.exit(main())" '
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(
        ["sh", "-c", command + quoted + " " + redirect],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


def _no_traceback(done) -> str:
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    return err


def test_chat_with_stdin_closed_is_a_usage_error(tiny):
    done = _cli("chat", tiny / "model.onnx", "--chat-template", tiny / "template.jinja", redirect="<&-", stdin=None)
    assert done.returncode == 2
    assert "standard input is closed" in _no_traceback(done)


@pytest.mark.parametrize("command", ["generate", "chat", "tokenize"])
def test_a_closed_stdout_is_a_usage_error(tiny, command):
    args = {
        "generate": ("generate", tiny / "model.onnx", "--prompt", "hi", "--max-new-tokens", "3"),
        "chat": ("chat", tiny / "model.onnx", "--chat-template", tiny / "template.jinja"),
        "tokenize": ("tokenize", tiny / "model.gguf", "hi"),
    }[command]
    done = _cli(*args, redirect=">&-", stdin=b"hi\n")
    assert done.returncode == 2
    assert "standard output is closed" in _no_traceback(done)


def test_a_full_stdout_is_an_io_error_not_the_models(tiny):
    done = _cli("generate", tiny / "model.onnx", "--prompt", "hi", "--max-new-tokens", "8", redirect="> /dev/full")
    err = _no_traceback(done)
    assert done.returncode == 2, err
    assert "No space left on device" in err and "generation failed" not in err


def test_a_reader_that_goes_away_ends_generate_quietly(tiny):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    code = "import sys; from onnx_struct.cli import main; sys.exit(main())"
    args = ["generate", str(tiny / "model.onnx"), "--prompt", "hi", "--max-new-tokens", "100", "--quiet"]
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT
    )
    child.stdout.read(1)  # the first streamed byte, then the reader is gone (as `| head -c 1`)
    child.stdout.close()
    err = child.stderr.read().decode("utf-8", "replace")
    assert child.wait(timeout=120) == 141, err
    assert err == ""


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_tokenize_refuses_a_model_path_that_is_no_regular_file_unopened(tiny, tmp_path, special):
    path = tmp_path / "fifo"
    if special == "fifo":
        os.mkfifo(path)
    else:
        path = special
    done = _cli("tokenize", path, "hi", timeout=60)
    assert done.returncode == 2
    assert "not a regular file" in _no_traceback(done)


def test_tokenize_prints_on_an_ascii_stdout(tiny):
    done = _cli("tokenize", tiny / "model.gguf", "caf\u00e9 \u65e5", env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, _no_traceback(done)
    _no_traceback(done)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("generate", "{model}", "--prompt", NOT_UTF8, "--max-new-tokens", "2"), "--prompt: "),
        (("tokenize", "{gguf}", NOT_UTF8), "text: "),
        (("chat", "{model}", "--chat-template", "{template}", "--system", NOT_UTF8), "--system: "),
    ],
)
def test_text_that_is_not_utf8_is_the_options_usage_error(tiny, args, option):
    names = {"{model}": tiny / "model.onnx", "{gguf}": tiny / "model.gguf", "{template}": tiny / "template.jinja"}
    done = _cli(*(names.get(a, a) if isinstance(a, str) else a for a in args), stdin=b"hi\n")
    err = _no_traceback(done)
    assert done.returncode == 2, err
    assert f"onnx-struct {args[0]}: {option}" in err


def test_a_stream_callback_failure_is_the_callers_not_the_models(tiny):
    import onnx_struct  # noqa: PLC0415

    def stream(piece: str) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError) as caught:
        onnx_struct.generate(str(tiny / "model.onnx"), "hi", max_new_tokens=4, stream=stream)
    assert not isinstance(caught.value, onnx_struct.ValidationError)
    assert caught.value.errno == 28


@pytest.mark.parametrize(("kwargs", "path"), [({"prompt": 5}, "generate(prompt)"), ({"stream": 5}, "generate(stream)")])
def test_a_prompt_or_stream_of_the_wrong_type_is_refused_naming_it(tiny, kwargs, path):
    import onnx_struct  # noqa: PLC0415

    kwargs = {"prompt": "hi", **kwargs}
    with pytest.raises(onnx_struct.ValidationError) as caught:  # was TypeError: 'int' object is not ...
        onnx_struct.generate(str(tiny / "model.onnx"), max_new_tokens=2, **kwargs)
    assert (caught.value.path, caught.value.code) == (path, "bad_argument")
