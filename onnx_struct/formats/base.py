"""BlockFormat: one quantized block format as data (a block Structure) plus ONNX functions.

A tensor of logical shape ``shape`` in a block format is stored as the root declaration
``Array(type_index -> block Structure, n_blocks)`` whose decoder maps the leaves (each with a
leading ``n_blocks`` dimension, e.g. ``d: [n]``, ``qs: [n, 16]``) to a float32 tensor of
``shape`` (numpy order; blocks run along the last dimension, which must be a multiple of
``block_size``). The encoder, where the format has one, is the inverse.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import onnx

from onnx_struct.errors import ValidationError
from onnx_struct.schema.builders import make_array, make_struct_value, make_structure, make_type_reference
from onnx_struct.schema.model import StructProto, StructTypeProto, add_struct_types, load

FORMAT_DOMAIN = "onnx_struct.formats"


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

    def num_blocks(self, shape: Sequence[int]) -> int:
        shape = tuple(int(d) for d in shape)
        if not shape or shape[-1] % self.block_size:
            raise ValidationError(
                self.name, f"the last dimension of {list(shape)} is not a multiple of the block size {self.block_size}"
            )
        return math.prod(shape) // self.block_size

    def block_declaration(self) -> StructTypeProto:
        return make_structure(self.block_fields(), name=f"{self.name}_block", doc_string=self.description)

    def root_declaration(self, shape: Sequence[int], block_index: int) -> StructTypeProto:
        """``Array(block, n_blocks)`` with the decoder (and encoder) for ``shape``."""
        shape = tuple(int(d) for d in shape)
        n = self.num_blocks(shape)
        return make_array(
            make_type_reference(block_index),
            n,
            name=f"{self.name}[{','.join(map(str, shape))}]",
            decoder=self.decoder(shape),
            encoder=self.encoder(shape) if self.encoder else None,
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


_REGISTRY: dict[str, BlockFormat] = {}


def register(fmt: BlockFormat) -> BlockFormat:
    if fmt.name in _REGISTRY:
        raise ValueError(f"format {fmt.name!r} is already registered")
    _REGISTRY[fmt.name] = fmt
    return fmt
