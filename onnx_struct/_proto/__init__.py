"""Generated protobuf bindings (``schemas/onnx_struct.proto``) and the field-number guard.

Only :mod:`onnx_struct.schema` imports this package (ruff's banned-api rule, TID251); the rest
of the code works on the message classes it hands out.
"""

from __future__ import annotations

import onnx

from onnx_struct._proto import onnx_struct_pb2 as pb

# The proposal's integration fields with their provisional numbers: (message, field name, number).
# A future onnx that assigns one of these numbers must fail loudly here, never misread files.
INTEGRATION_FIELDS = (
    ("ModelProto", "struct_types", 27),
    ("GraphProto", "struct_initializer", 17),
    ("TypeProto", "struct_type", 10),
)


def _check_field_numbers() -> None:
    for message, field, number in INTEGRATION_FIELDS:
        overlay = getattr(pb, message).DESCRIPTOR.fields_by_name[field]
        assert overlay.number == number, (message, field, overlay.number)
        taken = getattr(onnx, message).DESCRIPTOR.fields_by_number.get(number)
        if taken is not None:
            raise ImportError(
                f"onnx {onnx.__version__} defines {message}.{taken.name} = {number}, the number "
                f"onnx_struct uses for {message}.{field}; this onnx_struct cannot safely read its files"
            )


_check_field_numbers()

__all__ = ["pb", "INTEGRATION_FIELDS"]
