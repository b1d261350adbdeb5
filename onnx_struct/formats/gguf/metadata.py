"""GGUF key-value metadata in an ONNX model's ``metadata_props``: how a converted model keeps it.

:func:`metadata_props` writes a GGUF file's metadata (as gguf-py's reader gives it) as entries;
:func:`decode_metadata` reads them back. The encoding is in docs/formats.md, "GGUF files and
quantizing".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import numpy as np
import onnx

from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.limits import MAX_CONTEXT_LENGTH

# metadata_props keys added besides the GGUF keys themselves.
VALUE_TYPES_KEY = "onnx_struct.gguf.value_types"  # JSON object: GGUF key -> value type, e.g. "ARRAY[STRING]"
VERSION_KEY = "onnx_struct.gguf.version"
RESERVED_PREFIX = "onnx_struct."  # GGUF keys may not collide with the entries above


def metadata_props(reader, gguf, *, where: str = "gguf.kv") -> dict[str, str]:
    """GGUF key-value metadata as ``metadata_props`` entries.

    A STRING value is stored verbatim; every other value as JSON (integers in decimal, booleans
    ``true``/``false``, floats as the shortest decimal that reads back to the same float32/64,
    arrays as JSON arrays). The GGUF value type of every key goes into one extra entry,
    ``onnx_struct.gguf.value_types`` (a JSON object such as ``{"llama.block_count": "UINT32",
    "tokenizer.ggml.tokens": "ARRAY[STRING]"}``), so the file's metadata can be rebuilt exactly.
    A string that is not UTF-8, or a key in the ``onnx_struct.`` namespace of the entries added
    here, is a ValidationError at ``where[<index>] ('<key>')``.
    """
    props: dict[str, str] = {}
    types: dict[str, str] = {}
    pairs = [(key, field) for key, field in reader.fields.items() if not key.startswith("GGUF.")]
    props[VERSION_KEY] = str(int(reader.fields["GGUF.version"].parts[-1][0]))
    for index, (key, field) in enumerate(pairs):  # GGUF.*: the reader's pseudo-fields for the header
        if key.startswith(RESERVED_PREFIX):
            raise ValidationError(f"{where}[{index}] ({key!r})", f"keys starting with {RESERVED_PREFIX!r} are reserved")
        value_types = _element_types(field, gguf)
        types[key] = _type_label(value_types)
        try:
            props[key] = _encode_value(field, value_types, gguf)
        except UnicodeDecodeError as error:  # gguf-py decodes string values only here, on request
            raise ValidationError(
                f"{where}[{index}] ({key!r})", f"a {types[key]} value is not valid UTF-8: {error}"
            ) from None
    props[VALUE_TYPES_KEY] = json.dumps(types, separators=(",", ":"))
    return props


def _element_types(field, gguf) -> list:
    """The value's type, and an array's element types down to the innermost. gguf-py records an
    array's element type from its first element, so an empty array's (``[]`` of UINT8, or the
    first inner array of an array of arrays) is read from the array's own header: parts 3, 5, ...
    are the element types of the outer array and of each first inner array, so an empty array's type
    is its declared element type, never ``ARRAY``."""
    types = [gguf.GGUFValueType(t) for t in field.types]
    while types[-1] == gguf.GGUFValueType.ARRAY and 3 + 2 * (len(types) - 1) < len(field.parts):
        types.append(gguf.GGUFValueType(int(field.parts[3 + 2 * (len(types) - 1)][0])))
    return types


def _type_label(value_types) -> str:
    label = value_types[-1].name
    for _ in value_types[:-1]:
        label = f"ARRAY[{label}]"
    return label


def _encode_value(field, value_types, gguf) -> str:
    main = value_types[0]
    if main == gguf.GGUFValueType.STRING:
        return field.contents()
    if main != gguf.GGUFValueType.ARRAY:
        return _json_numbers(field.parts[-1][:1])[1:-1]
    if value_types[-1] == gguf.GGUFValueType.STRING:
        return json.dumps(field.contents(), ensure_ascii=False, separators=(",", ":"))
    # Numeric arrays (tokenizer scores and types run to 10^5 entries): one vectorized conversion of
    # the reader's parts instead of its per-element Python list; nested arrays come out flattened,
    # as gguf-py reads them.
    parts = [field.parts[i] for i in field.data]
    return _json_numbers(np.concatenate(parts) if parts else np.zeros(0, np.int64))


def _json_numbers(items: np.ndarray) -> str:
    """A JSON array of ``items``: booleans as true/false, integers in decimal, floats as the
    shortest decimal that reads back to the same float32/float64 (numpy's ``str``), non-finite
    floats as Python's json writes them (NaN, Infinity)."""
    if items.dtype.kind == "b":
        texts = np.where(items, "true", "false")
    elif items.dtype.kind == "f":
        texts = items.astype(str)
        texts = np.select([texts == "nan", texts == "inf", texts == "-inf"], ["NaN", "Infinity", "-Infinity"], texts)
    else:
        texts = items.astype(str)
    return "[" + ",".join(texts.tolist()) + "]"


def decode_metadata(
    props: onnx.ModelProto | Mapping[str, str] | Iterable[onnx.StringStringEntryProto],
) -> dict[str, object]:
    """The inverse of :func:`metadata_props`: GGUF key -> Python value (str, int, float, bool, list).

    ``props`` is a converted model, its ``metadata_props`` as they are (``model.metadata_props``),
    or a ``{key: value}`` mapping. Entries that did not come from the GGUF file (no value type
    recorded for them) are left out; a model that was not converted from GGUF gives ``{}``.

    Args:
        props: a converted model, its ``metadata_props``, or a ``{key: value}`` mapping.

    Returns:
        The GGUF metadata by key.

    Raises:
        ValidationError: a recorded entry that is not valid JSON of its value type (or holds a
            string with a lone surrogate, which UTF-8 cannot encode), naming it.

    Example::

        model = onnx.load("tiny.onnx")
        decode_metadata(model)["llama.block_count"]  # 2, an int
    """
    if isinstance(props, onnx.ModelProto):
        props = props.metadata_props
    if not isinstance(props, Mapping):
        props = {entry.key: entry.value for entry in props}
    try:
        types = json.loads(props.get(VALUE_TYPES_KEY, "{}"))
    except (ValueError, RecursionError) as error:  # json recurses once per nested array or object
        raise ValidationError(f"metadata_props[{VALUE_TYPES_KEY!r}]", f"not JSON: {error}") from None
    if not isinstance(types, dict):
        raise ValidationError(f"metadata_props[{VALUE_TYPES_KEY!r}]", "not a JSON object of key -> value type")
    out: dict[str, object] = {}
    for key, label in types.items():
        if key not in props:  # a recorded type without its entry: the key is missing, as if never written
            continue
        text = props[key]
        try:
            out[key] = text if label == "STRING" else json.loads(text)
            if label != "STRING" and "\\u" in text:
                # JSON escapes a lone surrogate (\ud800), which no UTF-8 GGUF string holds and
                # nothing downstream can encode: checked by encoding what was read.
                _encode_strings(out[key])
        except (ValueError, RecursionError) as error:  # UnicodeEncodeError is a ValueError
            raise ValidationError(f"metadata_props[{key!r}]", f"not the JSON of a {label} value: {error}") from None
    return out


def _encode_strings(value: object) -> None:
    """Encode every string in ``value`` as UTF-8 (a UnicodeEncodeError at a lone surrogate): an
    array of strings joined, in C, anything else through its JSON."""
    if isinstance(value, list) and set(map(type, value)) <= {str}:
        "".join(value).encode()
    else:
        json.dumps(value, ensure_ascii=False).encode()


def checked_context_length(metadata: Mapping[str, object], arch: object) -> int:
    """``{arch}.context_length``: a positive integer up to ``MAX_CONTEXT_LENGTH``.

    Raises:
        ValidationError: it is missing (``missing_metadata``), not a positive integer, or above
            the limit (``limit_exceeded``); the path names the key.
    """
    full = f"{arch}.context_length"
    value = metadata.get(full)
    if value is None:
        raise ValidationError(f"gguf.kv[{full!r}]", "missing: the decoder graph needs it", code="missing_metadata")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValidationError(f"gguf.kv[{full!r}]", f"must be a positive integer, not {value!r} ({value_kind(value)})")
    if value > MAX_CONTEXT_LENGTH:  # the graph's cos/sin tables hold context_length positions
        raise limit_exceeded(
            f"gguf.kv[{full!r}]",
            f"{value} positions exceed the limit of {MAX_CONTEXT_LENGTH} (the rotary tables hold every position)",
            value,
            MAX_CONTEXT_LENGTH,
        )
    return value


def value_kind(value: object) -> str:
    """The GGUF-facing name of a decoded metadata value's type, for messages."""
    return {bool: "a bool", int: "an integer", float: "a float", str: "a string", list: "an array"}.get(
        type(value), type(value).__name__
    )
