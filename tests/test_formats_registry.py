"""The format registry's lazy loading of its family modules."""

from __future__ import annotations

import sys

import pytest

from onnx_struct import formats


def test_a_family_module_that_fails_to_import_is_an_error(monkeypatch):
    # Every family module exists, so a failing import (here: one blocked in sys.modules, which
    # raises ModuleNotFoundError naming that very module) must surface instead of silently
    # leaving its formats unregistered.
    formats.names()  # every family imported and registered once, so nothing below re-registers
    monkeypatch.setattr(formats, "_loaded", False)
    monkeypatch.setitem(sys.modules, "onnx_struct.formats.nf4", None)
    with pytest.raises(ImportError, match="onnx_struct.formats.nf4"):
        formats.names()
    assert not formats._loaded


def test_every_family_registers_formats():
    families = {formats.get(name).family for name in formats.names()}
    assert families == {"gguf", "mx", "nf4", "linear"}


def test_bytes_per_block_is_what_the_block_declaration_occupies():
    # bytes_per_block is stated next to the block's fields; the size function must agree for every
    # registered format, so the two can never drift apart.
    from onnx_struct import size_in_bits

    for name in formats.names():
        fmt = formats.get(name)
        assert size_in_bits(fmt.block_declaration()) == 8 * fmt.bytes_per_block, name
