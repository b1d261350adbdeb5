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


def test_a_table_row_whose_size_disagrees_with_its_fields_fails_when_built():
    from onnx import TensorProto

    from onnx_struct.formats.function_builder import field

    def fields():
        return [field("d", TensorProto.FLOAT16), field("qs", TensorProto.UINT8, (16,))]  # 18 bytes

    def decoder(n, shape):
        raise AssertionError("not built")

    row = formats.FormatSpec("TEST_WRONG_SIZE", 32, 17, fields, decoder)
    with pytest.raises(
        ValueError, match=r"'TEST_WRONG_SIZE' states 17 bytes per block but its fields declare 144 bits"
    ):
        formats.register_formats("test", [row])
    assert "TEST_WRONG_SIZE" not in formats.names()
    built = formats.base.build_format("test", formats.FormatSpec("TEST_RIGHT_SIZE", 32, 18, fields, decoder))
    assert (built.bytes_per_block, built.block_ranges) == (18, True)


def test_every_registered_decoder_has_its_own_identity():
    # (domain, name) of a format's decoder is what block-range decoding looks formats up by; the
    # index refuses two formats sharing one, so building it for every format checks uniqueness.
    for name in formats.names():
        fmt = formats.get(name)
        decoder = fmt.decoder((fmt.block_size,))
        assert formats.format_of_decoder(decoder.domain, decoder.name) is fmt, name
    assert formats.format_of_decoder(formats.FORMAT_DOMAIN, "decode_NO_SUCH_FORMAT") is None


def test_format_names_match_case_insensitively():
    from onnx_struct import formats

    names = formats.names()
    assert len({n.casefold() for n in names}) == len(names)  # no two differ only in case
    assert formats.get("q4_k") is formats.get("Q4_K")
    assert formats.get("ocp_mxfp4") is formats.get("OCP_MXFP4")
    with pytest.raises(KeyError, match="unknown format 'q4_z'"):
        formats.get("q4_z")
