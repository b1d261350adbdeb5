"""gguf-py, the optional dependency that parses GGUF files, imported only where a file is read."""

from __future__ import annotations


def load_gguf_py():
    """The ``gguf`` module.

    Returns:
        gguf-py's top-level module.

    Raises:
        ImportError: gguf-py is not installed (``name="gguf"``: the CLI tells this missing extra,
            one line and exit 2, from a broken install).
    """
    try:
        import gguf  # noqa: PLC0415 - optional dependency, imported only when a file is read
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("reading GGUF files needs gguf-py: pip install 'onnx-struct[gguf]'", name="gguf") from error
    return gguf


def quant_sizes(gguf) -> dict[int, tuple[int, int]]:
    """GGML type number -> (block size in elements, block size in bytes), from gguf-py's table."""
    return {int(t): sizes for t, sizes in gguf.GGML_QUANT_SIZES.items()}
