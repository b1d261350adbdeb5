"""decode / encode: which function runs on which value (the root declaration's decoder on its
leaves, the encoder on an array), big block-format values in block ranges (:mod:`onnx_struct.runtime.parallel`).

The functions run in :mod:`onnx_struct.runtime.runners` (sessions, cache, fallback); its thread
setting (:data:`runners.INTRA_OP_THREADS`) is read at call time, by the runners and by parallel.py,
so setting it on that module reaches decode as well.
"""

from __future__ import annotations

import os

import numpy as np
from onnx import helper

from onnx_struct import limits
from onnx_struct.errors import ValidationError
from onnx_struct.functions import bindings
from onnx_struct.functions import policy as decoder_policy
from onnx_struct.functions.models import tensor_type
from onnx_struct.layout.table import type_table
from onnx_struct.payload import external
from onnx_struct.payload.pack import check_zero_fill, pack
from onnx_struct.payload.values import ResolvedValue, declaration_or_index, resolve_value
from onnx_struct.payload.view import StructView, view_of
from onnx_struct.runtime import parallel
from onnx_struct.runtime.feeds import Feed, leaf_feeds
from onnx_struct.runtime.runners import cached_runner
from onnx_struct.schema.builders import make_struct_value
from onnx_struct.schema.model import StructProto, StructTypeProto

RUNTIMES = ("onnxruntime", "reference")


def _check_runtime(runtime: str) -> None:
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")


# ---------------------------------------------------------------------- decode / encode
def open_value(
    value: StructProto | str, model=None, base_dir: str | os.PathLike | None = None
) -> tuple[StructView, StructTypeProto, str]:
    """(view, root declaration, the declaration's path) of a StructProto or a named struct value.

    ``model`` is any model form, a list of declarations (resolving ``type`` and ``type_index``),
    or None. Resolved by :func:`onnx_struct.payload.values.resolve_value`, as check and view do.
    """
    resolved = resolve_value(value, model, base_dir)
    return view_of(resolved), resolved.declaration, resolved.declaration_path


def decode(
    value: StructProto | str,
    model=None,
    *,
    base_dir: str | os.PathLike | None = None,
    runtime: str = "onnxruntime",
) -> np.ndarray:
    """The logical value of a struct value: its root declaration's decoder run on its leaves.

    ``value`` is a StructProto or the name of a struct value in ``model`` (any model form).
    The decoder runs in onnxruntime with the leaves as run-time inputs (``runtime="reference"``
    forces onnx's reference evaluator); a session is reused across calls with the same decoder
    and leaf types. A root without a decoder is a ValidationError.

    Args:
        value: the StructProto, or the name of a struct value of ``model``.
        model (ModelLike | list[StructTypeProto] | None): the model (any form) or a list
            of declarations.
        base_dir: the directory external payloads are read from (default: the model file's).
        runtime: "onnxruntime" (falling back to onnx's reference evaluator for what it cannot
            run) or "reference".

    Returns:
        The logical value, as the decoder's output gives it.

    Raises:
        ValidationError: no value of that name, a root without a decoder, an invalid
            declaration or payload, or a decoder the safety policy or the runtime refuses.
        ValueError: ``runtime`` is not one of the two names.

    >>> from onnx import helper
    >>> from onnx_struct import add_struct_values, formats
    >>> model = helper.make_model(helper.make_graph([], "g", [], []))
    >>> block = bytes([0x00, 0x3C]) + bytes([0x9A]) * 16  # Q4_0: d = 1.0, codes 10 (low), 9 (high)
    >>> add_struct_values(model, formats.get("Q4_0").make_value(model, "weight", (32,), block))
    >>> decode("weight", model)
    array([2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2.,
           1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1.], dtype=float32)
    """
    _check_runtime(runtime)
    return decode_resolved(resolve_value(value, model, base_dir), runtime)


def decode_resolved(resolved: ResolvedValue, runtime: str = "onnxruntime") -> np.ndarray:
    """:func:`decode` of a value resolved already (on its model's TypeTable).

    Args:
        resolved: the value (:func:`onnx_struct.payload.values.resolve_value`).
        runtime: as :func:`decode`'s.

    Returns:
        The logical value.

    Raises:
        ValidationError: as :func:`decode`.
    """
    struct_view, declaration, where = view_of(resolved), resolved.declaration, resolved.declaration_path
    if not declaration.HasField("decoder"):
        raise ValidationError(
            where, "the root declaration has no decoder, so the value has no logical value", code="no_decoder"
        )
    decoder = declaration.decoder
    decoder_path = bindings.function_label(f"{where}.decoder", decoder)
    bound = bindings.bind_decoder(decoder, struct_view.layout, f"{where}.decoder")
    external.refuse_external_tensors(decoder, decoder_path, bound.values())  # never resolved against the cwd
    feeds, constants = leaf_feeds(struct_view, bound)
    inputs = [(name, tensor_type(feed.elem_type, feed.shape)) for name, feed in feeds.items()]
    # What check_model applies to this declaration, before any session is built or range split.
    decoder_policy.check_sizes(decoder, inputs, constants, decoder_path)
    if runtime == "onnxruntime":
        result = parallel.decode_block_ranges(
            declaration,
            decoder,
            decoder_path,
            feeds,
            constants,
        )
        if result is not None:
            return result
    runner = cached_runner(decoder, decoder_path, inputs, constants, runtime)
    return runner.run(feeds)[0]


def encode(
    array,
    struct_type: StructTypeProto | int,
    model=None,
    *,
    name: str = "",
    runtime: str = "onnxruntime",
) -> StructProto:
    """A StructProto holding ``array`` encoded by the declaration's encoder.

    ``struct_type`` is a declaration (the value gets it inline, type -1) or an index into
    ``model``'s struct_types (any model form, a list of declarations or their TypeTable). The encoder's outputs are packed into their leaves; non-constant
    leaves it does not produce are zero bits. ``decode(encode(x))`` is whatever the format's
    decoder makes of the encoded leaves (exactly x only for lossless formats).

    Args:
        array (numpy.typing.ArrayLike): the logical value (array-like), of the encoder's input type and shape.
        struct_type: the declaration, or its index in ``model.struct_types``.
        model (ModelLike | list[StructTypeProto] | None): what resolves indices and
            references.
        name: the StructProto's name.
        runtime: "onnxruntime" or "reference", as for :func:`decode`.

    Returns:
        The StructProto, its payload in ``raw_data``.

    Raises:
        ValidationError: a root without an encoder, an input of another type or shape than the
            encoder's, or an encoder the safety policy or the runtime refuses.
        ValueError: ``runtime`` is not one of the two names.
    """
    _check_runtime(runtime)
    table = type_table(model)
    declaration, where = declaration_or_index(struct_type, table)
    if not declaration.HasField("encoder"):
        raise ValidationError(where, "the declaration has no encoder", code="no_encoder")
    encoder = declaration.encoder
    encoder_path = bindings.function_label(f"{where}.encoder", encoder)
    layout = table.leaves(declaration, where)
    bound = bindings.bind_encoder(encoder, layout, f"{where}.encoder")
    external.refuse_external_tensors(encoder, encoder_path)  # never resolved against the cwd
    x = np.asarray(array)
    try:
        elem_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    except (KeyError, ValueError, TypeError):
        raise ValidationError(
            encoder_path, f"input dtype {x.dtype} has no ONNX element type", code="unknown_element_type"
        ) from None
    if x.dtype.hasobject:
        raise ValidationError(
            encoder_path, f"input dtype {x.dtype} has no ONNX element type", code="unknown_element_type"
        )
    feed = Feed(elem_type, x.shape, array=x)
    # The policy's budget also counts the leaves the encoder writes, and the payload they leave to
    # zero-fill is checked before the encoder runs: the declared size alone proves nothing.
    nbytes = table.size(declaration, where) // 8
    check_zero_fill(nbytes, [(leaf, None) for leaf in bound.values()], encoder_path)
    written = sum(leaf.count * leaf.bit_width for leaf in bound.values()) // 8
    runner = cached_runner(
        encoder,
        encoder_path,
        [(encoder.input[0], tensor_type(elem_type, x.shape))],
        [],
        runtime,
        allowance_bytes=written,
        expansion=limits.ENCODER_EXPANSION,
    )
    outputs = runner.run({encoder.input[0]: feed})
    leaves = {}
    for (output_name, leaf), result in zip(bound.items(), outputs, strict=True):
        if result.shape != leaf.shape:
            raise ValidationError(
                encoder_path,
                f"output {output_name!r} has shape {result.shape}; leaf {leaf.path!r} is {leaf.shape}",
                code="shape_mismatch",
            )
        leaves[leaf.path] = result
    try:
        payload = pack(leaves, declaration, table, fill_missing=True)  # leaves it does not produce are zero
    except ValidationError as error:
        raise ValidationError(encoder_path, f"output does not fit its leaf: {error}", code="leaf_value") from None
    return make_struct_value(name, struct_type if isinstance(struct_type, int) else declaration, payload)
