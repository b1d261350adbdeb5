"""The names a lowered model gives what it adds: ``<value>::<leaf path>`` for leaves and the
shortening of declaration-level names it repeats once per value (shared by lower() and the
quantized rewrite, which must not take those names)."""

from __future__ import annotations

import functools
import hashlib

SEPARATOR = "::"


def leaf_tensor_name(value_name: str, leaf_path: str) -> str:
    """The lowered name of a leaf: ``"<value or input name>::<leaf path>"`` (``"w::"`` for a root
    whose single leaf has the empty path; a leaf path over MAX_LOWERED_NAME_CHARS shortened)."""
    return f"{value_name}{SEPARATOR}{short_name(leaf_path)}"


# Declaration-level names the lowered model repeats once per value (a leaf path in each value's
# leaf names, a decoder's name in each call node) are shortened past this many characters, so the
# lowered model's size does not multiply a name's length by the number of values.
MAX_LOWERED_NAME_CHARS = 256


@functools.lru_cache(maxsize=256)  # a leaf path is shortened once, not once per value
def short_name(name: str) -> str:
    """``name``, or when longer than MAX_LOWERED_NAME_CHARS its first 64 characters, ``~`` and 16
    hex digits of its hash."""
    if len(name) <= MAX_LOWERED_NAME_CHARS:
        return name
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{name[:64]}~{digest}"
