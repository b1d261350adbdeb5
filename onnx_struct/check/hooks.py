"""install()/uninstall(): make onnx's own entry points struct-aware, reversibly.

Importing onnx_struct changes nothing; install() swaps ``onnx.checker.check_model`` (and
``onnx.shape_inference.infer_shapes``) for struct-aware wrappers, and uninstall()
puts the original function objects back. Models without struct parts go to the originals
unchanged.
"""

from __future__ import annotations

import functools

import onnx
import onnx.checker
import onnx.shape_inference

from onnx_struct.check.checker import check_model as struct_check
from onnx_struct.check.inference import infer_shapes as struct_infer
from onnx_struct.errors import ValidationError
from onnx_struct.payload.external import read_model_file
from onnx_struct.schema import wire
from onnx_struct.schema.model import load
from onnx_struct.schema.walk import graph_parts

_originals: dict[str, object] = {}


def _struct_model(model):
    """What to check as a struct model: the model parsed once (a LoadedModel) if it has struct
    parts anywhere (model-level declarations, struct values or struct types in any graph,
    subgraphs and training graphs included), the model itself if stock onnx reads it but one of
    the proposal's fields is broken (onnx_struct then refuses it: stock onnx would skip it as an
    unknown field), else None: a stock model, or one neither reads, which goes to the original
    function so that it fails exactly as stock onnx fails on it."""
    try:
        loaded = load(model)
        proto = loaded.proto
    except ValidationError:
        return model if _stock_parses(model) else None
    except Exception:  # noqa: BLE001 - unreadable here: stock onnx decides, with its own exception
        return None
    if len(proto.struct_types):
        return loaded
    graphs, struct_type_protos = graph_parts(proto)
    if struct_type_protos or any(len(graph.struct_initializer) for _, graph in graphs):
        return loaded
    error = wire.scan_model(loaded.serialized).error  # a proposal field of the wrong wire type
    return loaded if error is not None and "field_number" in error.details else None


def _stock_parses(model) -> bool:
    if isinstance(model, onnx.ModelProto):
        return True
    try:
        data = model if isinstance(model, bytes) else read_model_file(model)
        onnx.ModelProto.FromString(data)
    except Exception:  # noqa: BLE001 - neither reads it: stock onnx decides
        return False
    return True


def _wrap_check_model(original):
    @functools.wraps(original)
    def check_model(model, full_check=False, skip_opset_compatibility_check=False, check_custom_domain=False):
        if isinstance(model, onnx.ModelProto | bytes | str) or hasattr(model, "__fspath__"):
            loaded = _struct_model(model)  # parsed once, then checked as is (base_dir included)
            if loaded is not None:
                return struct_check(
                    loaded,
                    full_check=full_check,
                    skip_opset_compatibility_check=skip_opset_compatibility_check,
                    check_custom_domain=check_custom_domain,
                )
        return original(model, full_check, skip_opset_compatibility_check, check_custom_domain)

    return check_model


def _wrap_infer_shapes(original):
    @functools.wraps(original)
    def infer_shapes(model, *args, **kwargs):
        loaded = _struct_model(model) if isinstance(model, onnx.ModelProto | bytes) else None
        if loaded is not None:
            result = struct_infer(loaded, *args, **kwargs)  # onnx's check_type, strict_mode, data_prop
            return result.SerializeToString() if isinstance(model, bytes) else result
        return original(model, *args, **kwargs)

    return infer_shapes


def install() -> None:
    """Make ``onnx.checker.check_model`` (and ``onnx.shape_inference.infer_shapes``) struct-aware."""
    if _originals:
        return
    _originals["check_model"] = onnx.checker.check_model
    onnx.checker.check_model = _wrap_check_model(onnx.checker.check_model)
    _originals["infer_shapes"] = onnx.shape_inference.infer_shapes
    onnx.shape_inference.infer_shapes = _wrap_infer_shapes(onnx.shape_inference.infer_shapes)


def uninstall() -> None:
    """Restore the exact original function objects replaced by :func:`install`."""
    if "check_model" in _originals:
        onnx.checker.check_model = _originals.pop("check_model")
    if "infer_shapes" in _originals:
        onnx.shape_inference.infer_shapes = _originals.pop("infer_shapes")


def installed() -> bool:
    return bool(_originals)
