"""Plain models go to stock onnx: one cheap test, then onnx's own function on the same argument.

A model without struct parts (schema/plain.py) is checked and inferred by
``onnx.checker.check_model`` and ``onnx.shape_inference.infer_shapes`` themselves, so that it is
accepted, refused and inferred exactly as stock onnx does it (docs/semantics.md, "Plain
models"). What stock onnx raises is raised as a ValidationError that is also every class stock
raised (errors.from_stock). The stock functions are captured at import, before install() can
replace them.
"""

from __future__ import annotations

import os

import onnx
import onnx.checker
import onnx.shape_inference
from google.protobuf.message import DecodeError
from onnx.onnx_cpp2py_export import checker as onnx_cpp_checker
from onnx.onnx_cpp2py_export import shape_inference as onnx_cpp_inference

from onnx_struct import originals
from onnx_struct.errors import InferenceError, from_stock
from onnx_struct.payload.external import open_model_file
from onnx_struct.schema.plain import CUT_MIN_BYTES, FileBytes, has_struct_parts, without_initializers
from onnx_struct.schema.walk import walk_scoped
from onnx_struct.schema.wire_format import Malformed

# onnx's check_model and infer_shapes given bytes under onnx's 2 GiB limit make one C call each
# (and infer_shapes parses its result): a plain model is handed on as bytes, so that call is made
# here directly, without the Python frames around it, when the function is onnx's own. The limit
# is read where onnx reads it, at each call (a caller may change it).
_ONNX_FUNCTIONS = (vars(onnx.checker), vars(onnx.shape_inference))

# What stock onnx raises for a model it refuses (a C++ file system error is a RuntimeError).
STOCK_ERRORS = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError, RuntimeError)


PLAIN, STRUCT, UNPARSABLE = "plain", "struct", "unparsable"


def classify(model: object, *, paths: bool = True) -> tuple[str, object]:
    """(PLAIN, what to hand stock onnx) for a model without struct parts: the serialized bytes of
    an ``onnx.ModelProto`` (stock would serialize it the same way), the bytes themselves, or the
    path of a file (tested here, reading only the headers of a large file's initializer records,
    then read by onnx itself, which resolves external data beside it; ``paths=False``: its bytes,
    for infer_shapes, which takes no path). (STRUCT, None) for a model with struct parts (or bytes
    protobuf reads as onnx's but the test cannot: a broken one), an empty file, or a form stock
    onnx does not take (LoadedModel, overlay objects, bytearray). (UNPARSABLE, the form as for
    PLAIN) for bytes Python's protobuf cannot parse: onnx's own parser may decide.

    Raises:
        ModelFileNotFoundError, NotRegularFileError: a path names no regular file.
    """
    if type(model) is onnx.ModelProto:
        data = model.SerializeToString()
    elif type(model) is bytes:
        data = model
    elif isinstance(model, (str, os.PathLike)):
        fd, size = open_model_file(model)
        try:
            if not size:
                return STRUCT, None  # an empty file: the struct path's message names it
            data = FileBytes(lambda offset, count: os.pread(fd, count, offset), size)
            if size < CUT_MIN_BYTES or not paths:
                data = data[:]  # read whole: small, or handed on as bytes
            found = has_struct_parts(data)
            if found is None:
                found = UNPARSABLE if not _stock_parses(data[:]) else True
        finally:
            os.close(fd)
        form = model if paths else data
        return (STRUCT, None) if found is True else (UNPARSABLE if found else PLAIN, form)
    else:
        return STRUCT, None
    return _classified(data, has_struct_parts(data))


def _classified(data: bytes, found: bool | None) -> tuple[str, object]:
    """:func:`classify` of serialized bytes, given what :func:`has_struct_parts` found in them."""
    if found is None:
        # The mask's parse failed: a broken struct part if protobuf reads the bytes as onnx's;
        # if it does not, no reader of this package can find a struct part in them, and onnx's
        # C++ parser, more lenient than Python's, decides as stock onnx decides.
        found = UNPARSABLE if not _stock_parses(data) else True
    return (STRUCT, None) if found is True else (UNPARSABLE if found else PLAIN, data)


def _stock_parses(data: bytes) -> bool:
    try:
        onnx.ModelProto.FromString(data)
    except DecodeError:
        return False
    return True


def plain_form(model: object, *, paths: bool = True, unparsable: bool = True) -> object | None:
    """What to hand stock onnx for a model without struct parts (see :func:`classify`; with
    ``unparsable``, also for bytes Python's protobuf cannot parse), else None: the struct-aware
    path decides."""
    # The common forms straight to the test: on a small model onnx's own check is a few Python calls long.
    if type(model) is onnx.ModelProto or type(model) is bytes:
        data = model if type(model) is bytes else model.SerializeToString()
        found = has_struct_parts(data)
        if found is False:
            return data
        kind, form = _classified(data, found)
    else:
        kind, form = classify(model, paths=paths)
    return form if kind == PLAIN or (unparsable and kind == UNPARSABLE) else None


def check_model(
    model: object, full_check: bool, skip_opset_compatibility_check: bool, check_custom_domain: bool
) -> None:
    """``onnx.checker.check_model`` on ``model`` (a :func:`plain_form`), its errors as ours."""
    try:
        if _ONNX_CHECK_MODEL is not None and type(model) is bytes and len(model) <= onnx.checker.MAXIMUM_PROTOBUF:
            onnx_cpp_checker.check_model(model, full_check, skip_opset_compatibility_check, check_custom_domain)
        else:  # call_check_model's test, one frame fewer
            originals.check_model(model, full_check, skip_opset_compatibility_check, check_custom_domain)
    except STOCK_ERRORS as error:
        raise from_stock(error, prefix(error)) from None


def call_check_model(
    function, model: object, full_check: bool, skip_opset_compatibility_check: bool, check_custom_domain: bool
) -> None:
    """``function`` (``onnx.checker.check_model``, or what stood in its place) on ``model``, onnx's
    own errors raised as they are."""
    if type(model) is bytes and len(model) <= onnx.checker.MAXIMUM_PROTOBUF and _is_onnxs(function):
        onnx_cpp_checker.check_model(model, full_check, skip_opset_compatibility_check, check_custom_domain)
    else:
        function(model, full_check, skip_opset_compatibility_check, check_custom_domain)


def _is_onnxs(function) -> bool:
    """Whether ``function`` is onnx's own (defined in its module, not a wrapper from elsewhere)."""
    found = getattr(function, "__globals__", None)
    return found is _ONNX_FUNCTIONS[0] or found is _ONNX_FUNCTIONS[1]  # by identity: no dict comparison


_ONNX_CHECK_MODEL = originals.check_model if _is_onnxs(originals.check_model) else None
_ONNX_INFER_SHAPES = originals.infer_shapes if _is_onnxs(originals.infer_shapes) else None


def infer_shapes(
    model: object, check_type: bool, strict_mode: bool, data_prop: bool, parsed: onnx.ModelProto | None = None
) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes`` on ``model`` (a :func:`plain_form`), its errors as ours.

    A model using an operator whose inference is known to kill the process on a node input that
    names no value (:data:`CRASHING_OPERATORS`) is walked first, and such an input refused
    (docs/semantics.md). ``parsed``: the ``onnx.ModelProto`` whose bytes ``model`` is, if the
    caller has it.
    """
    if isinstance(model, bytes) and _names_crashing_operator(model):
        if parsed is None:
            try:
                parsed = onnx.ModelProto.FromString(model)
            except DecodeError:
                pass  # stock's parse raises its ValueError below
        undefined = first_undefined_input(parsed.graph, frozenset(), "graph") if parsed is not None else None
        if undefined is not None:
            raise InferenceError(undefined, "names no value defined before the node", code="undefined_input")
    try:
        if _ONNX_INFER_SHAPES is not None and type(model) is bytes:
            inferred = onnx.ModelProto()
            inferred.ParseFromString(onnx_cpp_inference.infer_shapes(model, check_type, strict_mode, data_prop))
            return inferred
        return originals.infer_shapes(model, check_type, strict_mode, data_prop)
    except STOCK_ERRORS as error:
        raise from_stock(error, "onnx.shape_inference: ") from None


def prefix(error: Exception) -> str:
    """How a message of stock onnx's starts in ours: which of onnx's parts refused the model."""
    return "onnx.shape_inference: " if isinstance(error, onnx.shape_inference.InferenceError) else "onnx.checker: "


# Operators whose inference in onnx 1.23 dereferences the missing type of a node input that names
# no value and kills the process (the survey that found them: docs/semantics.md). A byte search for
# their names (C speed) spares every other model the walk over its nodes.
CRASHING_OPERATORS = (b"EyeLike", b"LabelEncoder", b"TreeEnsemble", b"RegexFullMatch")


def _names_crashing_operator(data: bytes) -> bool:
    """Whether a :data:`CRASHING_OPERATORS` name is in ``data``, the main graph's initializer
    records left out of a large model's bytes (they hold no node; searching them would cost as
    much as onnx's inference of such a model)."""
    if len(data) >= CUT_MIN_BYTES:
        try:
            data = without_initializers(data)
        except Malformed:
            pass  # not protobuf: searched whole, stock's parse then refuses it
    for letter, names in _BY_LETTER:
        pos, seen = data.find(letter), 0
        while pos >= 0:
            if seen == _LETTER_TRIES:  # bytes full of the letter (tensor data): a search per name
                if any(name in data for name, _ in names):
                    return True
                break
            for name, at in names:
                if pos >= at and data.startswith(name, pos - at):
                    return True
            pos, seen = data.find(letter, pos + 1), seen + 1
    return False


# Each name by an uppercase letter it holds, and where: a letter is found at C speed (memchr),
# and a model's bytes seldom hold it, where a search for a name reads every byte at Python's
# substring speed.
_BY_LETTER = (
    (b"E", ((b"EyeLike", 0), (b"LabelEncoder", 5), (b"TreeEnsemble", 4))),
    (b"F", ((b"RegexFullMatch", 5),)),
)
_LETTER_TRIES = 32  # occurrences tried one by one before a plain search per name (a speed cut, not a bound)


def first_undefined_input(graph: onnx.GraphProto, outer: frozenset, path: str) -> str | None:
    """The path of the first node input of ``graph`` or its subgraphs (in node order, each
    subgraph seeing the names defined around its node) that names no value defined before it."""
    for where, k, node, defined in walk_scoped(graph, path, outer, label=_subgraph_path):
        for j, name in enumerate(node.input):
            if name and name not in defined:
                return f"{where}.node[{k}].input[{j}] ({name!r})"
    return None


def _subgraph_path(where: str, i: int, node, k: int, attribute, j: int | None) -> str:
    """``graph.node[3].attribute.body[0]``: an attribute's ``g`` is its graph 0."""
    return f"{where}.node[{i}].attribute.{attribute.name}[{j or 0}]"
