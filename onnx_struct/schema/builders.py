"""Builders in the style of ``onnx.helper``: declarations, fields, struct values, struct types.

values = make_field("values", make_tensor_type(TensorProto.INT4, [128]))
scale = make_constant_field("scale", np.float32(0.125))
decl = make_structure([values, scale], name="LINEAR_INT4_128")
(index,) = add_struct_types(model, decl)
add_struct_values(model, make_struct_value("weight", index, raw_data=payload))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from onnx_struct._proto import pb  # noqa: TID251 - the serde layer

StructTypeProto = pb.StructTypeProto
StructProto = pb.StructProto
TypeProto = pb.TypeProto
ValueInfoProto = pb.ValueInfoProto

ElementType = int | pb.TypeProto  # an ONNX element type (a scalar) or a physical TypeProto


def make_tensor_type(elem_type: int, shape: Sequence[int] = ()) -> pb.TypeProto:
    """A static tensor TypeProto (a physical leaf); ``shape=()`` is a scalar.

    Args:
        elem_type: the ONNX element type (``TensorProto.INT4``, ...).
        shape: the static dimensions, outermost first.

    Returns:
        ``TypeProto{tensor_type}`` of the overlay schema.

    Raises:
        ValueError: a dimension that is neither an int nor a str (onnx's helper refuses it; a str or
            None makes a symbolic dimension, which no leaf accepts).
    """
    tensor = onnx.helper.make_tensor_type_proto(elem_type, list(shape)).tensor_type
    return pb.TypeProto(tensor_type=tensor)


def make_struct_type_proto(type_index: int | None = None, denotation: str = "") -> pb.TypeProto:
    """A struct-typed TypeProto: the exact reference ``type_index``, or (None) the unconstrained
    category accepting any concrete declaration, for graph inputs, outputs and value_info.

    Args:
        type_index: the index of a model-level declaration, or None for any struct.
        denotation: the TypeProto's ``denotation`` ("" leaves it unset).

    Returns:
        ``TypeProto{struct_type}``.

    Raises:
        TypeError: an argument of the wrong type (protobuf refuses it).
    """
    struct_type = pb.StructTypeProto() if type_index is None else pb.StructTypeProto(type_index=type_index)
    type_proto = pb.TypeProto(struct_type=struct_type)
    if denotation:
        type_proto.denotation = denotation
    return type_proto


def make_type_reference(type_index: int) -> pb.TypeProto:
    """``TypeProto{struct_type{type_index}}``: a nested reference to a model-level declaration.

    Args:
        type_index: the index of the referenced declaration in ``model.struct_types``.

    Returns:
        The reference, usable as a field's or array element's type.

    Raises:
        TypeError: ``type_index`` is not an int (protobuf refuses it).
    """
    return make_struct_type_proto(type_index)


def make_sequence_type_proto(elem_type: pb.TypeProto) -> pb.TypeProto:
    """``TypeProto{sequence_type}`` whose element type may be (or contain) a struct type.

    Args:
        elem_type: the element TypeProto.

    Returns:
        The sequence TypeProto.

    Raises:
        TypeError: ``elem_type`` is not an overlay TypeProto (protobuf refuses it).
    """
    return pb.TypeProto(sequence_type=pb.TypeProto.Sequence(elem_type=elem_type))


def make_map_type_proto(key_type: int, value_type: pb.TypeProto) -> pb.TypeProto:
    """``TypeProto{map_type}`` whose value type may be (or contain) a struct type.

    Args:
        key_type: the ONNX element type of the keys.
        value_type: the TypeProto of the values.

    Returns:
        The map TypeProto.

    Raises:
        TypeError: an argument of the wrong type (protobuf refuses it).
    """
    return pb.TypeProto(map_type=pb.TypeProto.Map(key_type=key_type, value_type=value_type))


def make_optional_type_proto(elem_type: pb.TypeProto) -> pb.TypeProto:
    """``TypeProto{optional_type}`` whose element type may be (or contain) a struct type.

    Args:
        elem_type: the element TypeProto.

    Returns:
        The optional TypeProto.

    Raises:
        TypeError: ``elem_type`` is not an overlay TypeProto (protobuf refuses it).
    """
    return pb.TypeProto(optional_type=pb.TypeProto.Optional(elem_type=elem_type))


def make_value_info(name: str, type_proto: pb.TypeProto, doc_string: str = "") -> pb.ValueInfoProto:
    """A ValueInfoProto whose type may be (or contain) a struct type.

    Args:
        name: the value's name.
        type_proto: its TypeProto (from the ``make_*_type_proto`` builders).
        doc_string: the ValueInfoProto's ``doc_string`` ("" leaves it unset).

    Returns:
        The ValueInfoProto of the overlay schema.

    Raises:
        TypeError: an argument of the wrong type (protobuf refuses it).
    """
    info = pb.ValueInfoProto(name=name, type=type_proto)
    if doc_string:
        info.doc_string = doc_string
    return info


def make_struct_value_info(name: str, type_index: int | None = None, doc_string: str = "") -> pb.ValueInfoProto:
    """A graph input/output/value_info of struct type (exact reference, or None: any struct).

    Args:
        name: the value's name.
        type_index: the index of a model-level declaration, or None for any struct.
        doc_string: the ValueInfoProto's ``doc_string``.

    Returns:
        The ValueInfoProto.

    Raises:
        TypeError: an argument of the wrong type (protobuf refuses it).
    """
    return make_value_info(name, make_struct_type_proto(type_index), doc_string)


class NestedDeclarationError(TypeError):
    """A declaration (StructTypeProto) passed where a field or element type is expected: nested
    declarations are references to model-level ones, never inline (docs/semantics.md)."""


def _element(element: ElementType) -> pb.TypeProto:
    if isinstance(element, pb.StructTypeProto):
        kind = element.WhichOneof("kind") or "declaration"
        raise NestedDeclarationError(
            f"a {kind} declaration cannot be nested inline as a field or element type: add it to the "
            "model with add_struct_types(model, declaration), which returns its index, and reference "
            "it with make_type_reference(index)"
        )
    if isinstance(element, (bool, np.bool_)) or not isinstance(element, (int, np.integer, pb.TypeProto)):
        raise TypeError(
            f"expected an ONNX element type (an int such as TensorProto.FLOAT), a TypeProto from "
            f"make_tensor_type or make_type_reference, got {type(element).__name__}"
        )
    return make_tensor_type(int(element)) if isinstance(element, (int, np.integer)) else element


def _root(
    declaration: pb.StructTypeProto,
    name: str,
    decoder: onnx.FunctionProto | None,
    encoder: onnx.FunctionProto | None,
    doc_string: str,
    metadata_props: Mapping[str, str] | None,
) -> pb.StructTypeProto:
    if name:
        declaration.name = name
    if doc_string:
        declaration.doc_string = doc_string
    if decoder is not None:
        declaration.decoder.CopyFrom(decoder)
    if encoder is not None:
        declaration.encoder.CopyFrom(encoder)
    for key, value in (metadata_props or {}).items():
        declaration.metadata_props.add(key=key, value=value)
    return declaration


def make_array(
    element: ElementType,
    dimension: int,
    *,
    name: str = "",
    decoder: onnx.FunctionProto | None = None,
    encoder: onnx.FunctionProto | None = None,
    doc_string: str = "",
    metadata_props: Mapping[str, str] | None = None,
) -> pb.StructTypeProto:
    """``Array(element, dimension)``: ``element`` is an ONNX element type (scalar), a static tensor
    TypeProto, or a :func:`make_type_reference`.

    Args:
        element: the element type.
        dimension: the number of elements.
        name: the declaration's name.
        decoder: the FunctionProto giving a root value's logical value.
        encoder: the FunctionProto writing a root value's leaves from a logical value.
        doc_string: the declaration's ``doc_string``.
        metadata_props: key-value pairs attached to the declaration.

    Returns:
        The StructTypeProto, to add to a model with :func:`add_struct_types`.

    Raises:
        NestedDeclarationError: ``element`` is a StructTypeProto (declarations nest by reference).
        TypeError: ``element`` is not an element type or a TypeProto.
    """
    declaration = pb.StructTypeProto(
        array=pb.StructTypeProto.Array(element_type=_element(element), dimension=dimension)
    )
    return _root(declaration, name, decoder, encoder, doc_string, metadata_props)


def make_field(name: str, type: ElementType, doc_string: str = "") -> pb.StructTypeProto.Field:
    """A payload field: an ONNX element type (scalar), a static tensor TypeProto or a reference.

    Args:
        name: the field's name (a component of its leaves' paths).
        type: the field's type.
        doc_string: the field's ``doc_string``.

    Returns:
        The Field, for :func:`make_structure`.

    Raises:
        NestedDeclarationError: ``type`` is a StructTypeProto (declarations nest by reference).
        TypeError: ``type`` is not an element type or a TypeProto.
    """
    field = pb.StructTypeProto.Field(name=name, type=_element(type))
    if doc_string:
        field.doc_string = doc_string
    return field


def make_constant_field(
    name: str, value: onnx.TensorProto | np.ndarray | np.generic, doc_string: str = ""
) -> pb.StructTypeProto.Field:
    """A zero-size field holding a tensor constant (a TensorProto, or an array to convert).

    Args:
        name: the field's name (a leaf path).
        value: the constant.
        doc_string: the field's ``doc_string``.

    Returns:
        The Field, for :func:`make_structure`; it takes no payload bytes.

    Raises:
        NotImplementedError: ``value`` is an object array of other objects than strings (onnx's
            ``numpy_helper.from_array`` refuses it).
    """
    tensor = value if isinstance(value, onnx.TensorProto) else numpy_helper.from_array(np.asarray(value), name)
    field = pb.StructTypeProto.Field(name=name, constant=tensor)
    if doc_string:
        field.doc_string = doc_string
    return field


def make_structure(
    fields: Iterable[pb.StructTypeProto.Field],
    *,
    name: str = "",
    decoder: onnx.FunctionProto | None = None,
    encoder: onnx.FunctionProto | None = None,
    doc_string: str = "",
    metadata_props: Mapping[str, str] | None = None,
) -> pb.StructTypeProto:
    """``Structure(fields...)``: fields serialized in declaration order, constants take no bytes.

    Args:
        fields: the fields, from :func:`make_field` and :func:`make_constant_field`.
        name: as for :func:`make_array`.
        decoder: as for :func:`make_array`.
        encoder: as for :func:`make_array`.
        doc_string: as for :func:`make_array`.
        metadata_props: as for :func:`make_array`.

    Returns:
        The StructTypeProto, to add to a model with :func:`add_struct_types`.

    Raises:
        TypeError: a field that is not a Field (protobuf refuses it).
    """
    declaration = pb.StructTypeProto(structure=pb.StructTypeProto.Structure(field=list(fields)))
    return _root(declaration, name, decoder, encoder, doc_string, metadata_props)


def make_component(name: str, bit_width: int) -> pb.StructTypeProto.BitPacking.Component:
    """One named bit field of a :func:`make_bit_packing` record.

    Args:
        name: the component's name (a leaf path).
        bit_width: its width in bits (1 to 64).

    Returns:
        The Component.

    Raises:
        TypeError: an argument of the wrong type (protobuf refuses it).
    """
    return pb.StructTypeProto.BitPacking.Component(name=name, bit_width=bit_width)


def make_bit_packing(
    components: Iterable[pb.StructTypeProto.BitPacking.Component | tuple[str, int]],
    dimension: int,
    *,
    name: str = "",
    decoder: onnx.FunctionProto | None = None,
    encoder: onnx.FunctionProto | None = None,
    doc_string: str = "",
    metadata_props: Mapping[str, str] | None = None,
) -> pb.StructTypeProto:
    """``BitPacking(components..., dimension)``: records of named bit fields, LSB first.

    Args:
        components: Components, or (name, bit width) pairs, in record order from the LSB.
        dimension: the number of records.
        name: as for :func:`make_array`.
        decoder: as for :func:`make_array`.
        encoder: as for :func:`make_array`.
        doc_string: as for :func:`make_array`.
        metadata_props: as for :func:`make_array`.

    Returns:
        The StructTypeProto, to add to a model with :func:`add_struct_types`.

    Raises:
        TypeError: a component that is neither a Component nor a (name, bit width) pair.
    """
    parts = [c if isinstance(c, pb.StructTypeProto.BitPacking.Component) else make_component(*c) for c in components]
    declaration = pb.StructTypeProto(bit_packing=pb.StructTypeProto.BitPacking(component=parts, dimension=dimension))
    return _root(declaration, name, decoder, encoder, doc_string, metadata_props)


def make_struct_value(
    name: str,
    struct_type: int | pb.StructTypeProto,
    raw_data: bytes | None = None,
    *,
    external_data: Mapping[str, str | int] | None = None,
    doc_string: str = "",
) -> pb.StructProto:
    """A StructProto: ``struct_type`` is a model-level index or an inline declaration (type -1);
    the payload is ``raw_data`` or ``external_data`` (``location``, ``offset``, ``length``).

    Args:
        name: the value's name.
        struct_type: the index of its declaration in ``model.struct_types``, or an inline one.
        raw_data: the payload bytes, stored verbatim.
        external_data: where the payload is instead (keys ``location``, ``offset``, ``length``).
        doc_string: the value's ``doc_string``.

    Returns:
        The StructProto, to add to a model with :func:`add_struct_values`.

    Raises:
        TypeError: an argument of the wrong type (protobuf refuses it).
    """
    value = pb.StructProto(name=name)
    if isinstance(struct_type, pb.StructTypeProto):
        value.type = -1
        value.struct_type.CopyFrom(struct_type)
    else:
        value.type = struct_type
    if raw_data is not None:
        value.raw_data = bytes(raw_data)
    for key, entry in (external_data or {}).items():
        value.external_data.add(key=key, value=str(entry))
    if doc_string:
        value.doc_string = doc_string
    return value
