"""Neighbouring tools that drop unknown fields, adapted to keep struct parts (docs/ecosystem.md).

:mod:`onnx_struct.ecosystem.ir` (onnx-ir and the onnxscript optimizer), :mod:`onnx_struct.ecosystem.compose`
(``onnx.compose``'s add_prefix and merge_models, renaming struct values too) and
:mod:`onnx_struct.ecosystem.carried` (the carried form any tool that keeps graph inputs and
``metadata_props`` can rewrite).
"""
