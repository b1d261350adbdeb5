"""BlockFormat: one quantized block format as data (a block Structure) plus ONNX functions.

A tensor of logical ``shape`` is the root declaration ``Array(block Structure, n_blocks)``,
blocks along the last dimension; its decoder maps the leaves (leading ``n_blocks`` dimension) to
a float32 tensor of ``shape``, and the encoder, where there is one, is the inverse. Family modules
register their formats as a table of :class:`FormatSpec` rows (:func:`register_formats`).

Rule: a row's ``bytes_per_block`` is checked against its declared block when the format is
built, so a wrong table entry fails at import.

Notes: docs/modules.md.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable, Sequence

import onnx

from onnx_struct.errors import ValidationError
from onnx_struct.layout.table import size_in_bits
from onnx_struct.schema.builders import make_array, make_struct_value, make_structure, make_type_reference
from onnx_struct.schema.model import StructProto, StructTypeProto, add_struct_types, load

FORMAT_DOMAIN = "onnx_struct.formats"

#: ``build(n_blocks, shape)`` -> the decoder or encoder FunctionProto for a tensor of numpy ``shape``.
FunctionFor = Callable[[int, tuple[int, ...]], onnx.FunctionProto]


@dataclasses.dataclass(frozen=True)
class BlockFormat:
    name: str  # registry key, e.g. "Q4_0"; the block declaration is named f"{name}_block"
    family: str  # "gguf", "mx", "nf4", "linear"
    block_size: int  # logical elements per block
    bytes_per_block: int
    block_fields: Callable[[], list]  # -> [StructTypeProto.Field], named as the reference names them
    decoder: Callable[[tuple[int, ...]], onnx.FunctionProto]  # logical shape -> decoder
    encoder: Callable[[tuple[int, ...]], onnx.FunctionProto] | None = None
    description: str = ""
    # True when the decoder is block-wise (rows [a, b) of blocks decode alone to the same values as
    # with the rest), so the runtime may decode a big value in block ranges (runtime/parallel.py).
    block_ranges: bool = True

    def dims(self, shape: Sequence[int]) -> tuple[int, ...]:
        """``shape`` as a tuple of int dimensions: a non-integer one is a TypeError (32.5 was taken for
        32), a negative one or a product past 2^63 - 1 a ValidationError naming the format."""
        dims = tuple(operator.index(d) for d in shape)
        if any(d < 0 for d in dims) or math.prod(dims) >= 1 << 63:
            raise ValidationError(
                self.name, f"shape {list(dims)} has a negative dimension or more than 2^63 - 1 elements"
            )
        return dims

    def num_blocks(self, shape: Sequence[int]) -> int:
        shape = self.dims(shape)
        if not shape or shape[-1] % self.block_size:
            raise ValidationError(
                self.name, f"the last dimension of {list(shape)} is not a multiple of the block size {self.block_size}"
            )
        return math.prod(shape) // self.block_size

    def block_declaration(self) -> StructTypeProto:
        return make_structure(self.block_fields(), name=f"{self.name}_block", doc_string=self.description)

    def root_declaration(self, shape: Sequence[int], block_index: int, *, functions: bool = True) -> StructTypeProto:
        """``Array(block, n_blocks)`` with the decoder (and encoder) for ``shape``; without them
        (``functions=False``) where only the layout is read."""
        shape = self.dims(shape)
        n = self.num_blocks(shape)
        return make_array(
            make_type_reference(block_index),
            n,
            name=f"{self.name}[{','.join(map(str, shape))}]",
            decoder=self.decoder(shape) if functions else None,
            encoder=self.encoder(shape) if self.encoder and functions else None,
        )

    def add_to_model(self, model, shape: Sequence[int]) -> int:
        """Add the block declaration (once per model, found by name) and a root; returns its index."""
        existing = load(model).struct_types if not hasattr(model, "struct_types") else model.struct_types
        block_name = f"{self.name}_block"
        block_index = next((i for i, d in enumerate(existing) if d.name == block_name), None)
        if block_index is None:
            (block_index,) = add_struct_types(model, self.block_declaration())
        (root_index,) = add_struct_types(model, self.root_declaration(shape, block_index))
        return root_index

    def make_value(self, model, name: str, shape: Sequence[int], payload: bytes) -> StructProto:
        """Declare ``shape`` in ``model`` and return the StructProto holding ``payload`` verbatim."""
        return make_struct_value(name, self.add_to_model(model, shape), raw_data=payload)


@dataclasses.dataclass(frozen=True)
class FormatSpec:
    """One row of a family's table of formats (see the module docstring)."""

    name: str
    block_size: int
    bytes_per_block: int
    fields: Callable[[], list]  # -> [StructTypeProto.Field]
    decoder: FunctionFor
    encoder: FunctionFor | None = None
    description: str = ""
    block_ranges: bool = True


def build_format(family: str, spec: FormatSpec) -> BlockFormat:
    """The (unregistered) :class:`BlockFormat` of ``spec``: its function builders receive the block
    count, checked by :meth:`BlockFormat.num_blocks` (a ValidationError naming the format) first.
    Raises ValueError when ``bytes_per_block`` is not the size of the declared block."""
    fmt: BlockFormat | None = None

    def with_count(build: FunctionFor) -> Callable[[Sequence[int]], onnx.FunctionProto]:
        def for_shape(shape: Sequence[int]) -> onnx.FunctionProto:
            shape = tuple(int(d) for d in shape)
            return build(fmt.num_blocks(shape), shape)

        return for_shape

    fmt = BlockFormat(
        name=spec.name,
        family=family,
        block_size=spec.block_size,
        bytes_per_block=spec.bytes_per_block,
        block_fields=spec.fields,
        decoder=with_count(spec.decoder),
        encoder=with_count(spec.encoder) if spec.encoder else None,
        description=spec.description,
        block_ranges=spec.block_ranges,
    )
    bits = size_in_bits(fmt.block_declaration())
    if bits != 8 * spec.bytes_per_block:
        raise ValueError(
            f"format {spec.name!r} states {spec.bytes_per_block} bytes per block but its fields declare {bits} bits"
        )
    return fmt


def register_formats(family: str, specs: Sequence[FormatSpec]) -> dict[str, BlockFormat]:
    """Build and register every format of ``family``'s table.

    Args:
        family: the family's name (``"linear"``, ``"gguf"``, ...), which picks its builders.
        specs: the table's rows, one per format.

    Returns:
        The registered formats by name.

    Raises:
        ValueError: a format of that name is registered already.
    """
    return {spec.name: register(build_format(family, spec)) for spec in specs}


_REGISTRY: dict[str, BlockFormat] = {}
# (decoder domain, decoder name) -> format, built on first use (see format_of_decoder).
_BY_DECODER: dict[tuple[str, str], BlockFormat] = {}


def register(fmt: BlockFormat) -> BlockFormat:
    """Add ``fmt`` to the registry (family modules use :func:`register_formats`).

    Args:
        fmt: the format to register under ``fmt.name``.

    Returns:
        ``fmt`` itself.

    Raises:
        ValueError: a format of that name is registered already.
    """
    if fmt.name in _REGISTRY:
        raise ValueError(f"format {fmt.name!r} is already registered")
    _REGISTRY[fmt.name] = fmt
    _BY_DECODER.clear()
    return fmt


def format_of_decoder(domain: str, name: str) -> BlockFormat | None:
    """The registered format whose decoders are the FunctionProto ``domain``/``name`` (a decoder's
    identity does not depend on the shape it was built for), or None. Every registered format's
    decoder identity is unique; the index is built from one small decoder per format on first use.

    Args:
        domain: the decoder FunctionProto's domain.
        name: its name.

    Returns:
        The format, or None when no registered format has that decoder.

    Raises:
        ValueError: two registered formats share one decoder identity.
    """
    if not _BY_DECODER and _REGISTRY:
        index: dict[tuple[str, str], BlockFormat] = {}
        for fmt in _REGISTRY.values():
            sample = fmt.decoder((fmt.block_size,))
            key = (sample.domain, sample.name)
            if key in index:
                raise ValueError(f"formats {index[key].name!r} and {fmt.name!r} share the decoder {key}")
            index[key] = fmt
        _BY_DECODER.update(index)
    return _BY_DECODER.get((domain, name))
