"""Typed reads of one architecture's GGUF metadata keys (``{arch}.<name>``), each failure a
ValidationError whose path names the key: ``gguf.kv['gemma3.attention.sliding_window']``."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from onnx_struct.errors import ValidationError
from onnx_struct.formats.gguf.metadata import value_kind

FLOAT32_MAX = float(np.finfo(np.float32).max)
# An attribute or shape the graph holds as a 32-bit signed integer.
INT32_MAX = 2**31 - 1
MISSING = object()


class Keys:
    """The ``{arch}.*`` keys of a GGUF file's metadata."""

    def __init__(self, metadata: Mapping[str, object], arch: str) -> None:
        self.metadata = metadata
        self.arch = arch

    def path(self, name: str) -> str:
        return f"gguf.kv[{f'{self.arch}.{name}'!r}]"

    def has(self, name: str) -> bool:
        return f"{self.arch}.{name}" in self.metadata

    def raw(self, name: str, default: object = MISSING) -> object:
        value = self.metadata.get(f"{self.arch}.{name}", default)
        if value is MISSING:
            raise ValidationError(self.path(name), "missing: the decoder graph needs it", code="missing_metadata")
        return value

    def positive_int(self, name: str, default: object = MISSING, maximum: int = INT32_MAX) -> int:
        """A positive integer up to ``maximum`` (every count and size the graph holds is int32)."""
        value = self.raw(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValidationError(self.path(name), f"must be a positive integer, not {value!r} ({value_kind(value)})")
        if value > maximum:
            raise ValidationError(self.path(name), f"{value} is over {maximum}, the most the graph holds")
        return value

    def non_negative_int(self, name: str, default: object = MISSING) -> int:
        value = self.raw(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX:
            raise ValidationError(
                self.path(name), f"must be a non-negative integer, not {value!r} ({value_kind(value)})"
            )
        return value

    def positive_float(self, name: str, default: object = MISSING) -> float:
        """A positive, finite number that float32 holds (the graph keeps it as a float32 constant:
        a larger one would become inf, zero or NaN would poison every logit). A FLOAT64 key below
        float32's smallest subnormal rounds to 0, which GroupQueryAttention reads as "no softcap" and
        "the default scale": refused too."""
        value = self.raw(name, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 < value <= FLOAT32_MAX  # NaN compares false, inf is above the maximum
            or np.float32(value) == 0
        ):
            raise ValidationError(
                self.path(name), f"must be a positive, finite float32 number, not {value!r} ({value_kind(value)})"
            )
        return float(value)

    def optional_positive_float(self, name: str) -> float | None:
        """The key's positive value; absent or 0 (llama.cpp's "not set") is None."""
        value = self.raw(name, None)
        if value is None or (not isinstance(value, bool) and isinstance(value, (int, float)) and value == 0):
            return None
        return self.positive_float(name)

    def string(self, name: str, default: object = MISSING) -> str:
        value = self.raw(name, default)
        if not isinstance(value, str):
            raise ValidationError(self.path(name), f"must be a string, not {value!r} ({value_kind(value)})")
        return value

    def boolean(self, name: str, default: object = MISSING) -> bool:
        value = self.raw(name, default)
        if not isinstance(value, bool):
            raise ValidationError(self.path(name), f"must be a bool, not {value!r} ({value_kind(value)})")
        return value
