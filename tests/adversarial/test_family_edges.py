"""Edges of the decoder families' metadata and tensors that test_family_metadata.py does not reach:
values a float32 attribute rounds to 0 (onnxruntime's GroupQueryAttention then takes softcap 0 as
"no cap" and scale 0 as the default), the 27B attention scale of a file with more heads than
embedding width, keys of the wrong type that read as "absent", llama.cpp's refusal of a window
with no windowed layer, tensors a family of llama.cpp does not read, the rotary tables of several
RoPEs together, and a file's broken ``context_length`` under ``convert(context_length=...)``.
Each is a ValidationError naming the key or the tensor."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gguf")

from support.family_cases import CASES  # noqa: E402

import onnx_struct  # noqa: E402
from onnx_struct.limits import MAX_ROPE_TABLE_BYTES  # noqa: E402
from onnx_struct.llm.graph import plan_decoder  # noqa: E402
from onnx_struct.llm.tokenizer.gguf_metadata import read_gguf_metadata  # noqa: E402

NAMES = ("gemma3-swa", "gemma2-defaults", "granite-f32", "olmo2-swa", "phi3-longrope-long-f32", "qwen3-gqa")


def _tensors(path) -> dict[str, tuple[str, tuple[int, ...]]]:
    from gguf import GGUFReader

    return {
        t.name: (t.tensor_type.name, tuple(int(d) for d in reversed(t.shape.tolist())))
        for t in GGUFReader(str(path)).tensors
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = {}
    for name in NAMES:
        module, config = CASES[name]
        path = tmp_path_factory.mktemp("edges") / f"{name}.gguf"
        module.write_gguf(path, config)
        out[name] = (read_gguf_metadata(path), _tensors(path))
    return out


def refused(metadata, tensors, path: str, words: str) -> None:
    with pytest.raises(onnx_struct.ValidationError) as caught:
        plan_decoder(metadata, tensors)
    assert caught.value.path == path, str(caught.value)
    assert words in str(caught.value), str(caught.value)


# A GGUF FLOAT64 key holds what float32 cannot: 1e-46 is positive, float32(1e-46) is 0.0, and the
# graph stores every scale and cap as float32 (an attribute or a constant).
UNDERFLOW = [
    ("gemma2-defaults", "gemma2.attn_logit_softcapping"),  # GQA softcap 0: no cap at all
    ("gemma2-defaults", "gemma2.final_logit_softcapping"),  # x / 0 then * 0
    ("gemma3-swa", "gemma3.final_logit_softcapping"),
    ("granite-f32", "granite.attention.scale"),  # GQA scale 0: the default 1/sqrt(head size)
    ("granite-f32", "granite.logit_scale"),  # logits / 0
    ("granite-f32", "granite.embedding_scale"),
    ("qwen3-gqa", "qwen3.attention.layer_norm_rms_epsilon"),
]


@pytest.mark.parametrize(("name", "key"), UNDERFLOW)
@pytest.mark.parametrize("value", [1e-46, 1e-300, 5e-324])
def test_a_float_that_float32_rounds_to_zero_is_refused(files, name, key, value):
    assert np.float32(value) == 0.0
    metadata, tensors = files[name]
    refused(metadata | {key: value}, tensors, f"gguf.kv[{key!r}]", "float32")


def test_the_smallest_float32_is_still_a_positive_softcap(files):
    """float32's smallest subnormal (1.4e-45) stays positive: onnxruntime caps with it, as llama.cpp."""
    metadata, tensors = files["gemma2-defaults"]
    plan = plan_decoder(metadata | {"gemma2.attn_logit_softcapping": 1.5e-45}, tensors)
    assert np.float32(plan.block.attn_softcap) > 0


def _padded(tensors, n: int):
    # more tensors than layers, so the layer count passes its first check and the family's block is read
    return tensors | {f"pad.{i}": ("F32", (1,)) for i in range(n)}


@pytest.mark.parametrize(("name", "layers"), [("gemma2-defaults", 46), ("gemma3-swa", 62)])
def test_the_27b_scale_with_more_heads_than_embedding_width_is_refused(files, name, layers):
    """gemma2 at 46 layers / gemma3 at 62 scale q by 1/sqrt(n_embd / n_head) (integer division):
    512 heads of 16 over an embedding of 256 make it 1/sqrt(0) (a ZeroDivisionError before)."""
    metadata, tensors = files[name]
    arch = metadata["general.architecture"]
    hostile = metadata | {
        f"{arch}.block_count": layers,
        f"{arch}.attention.head_count": 512,
        f"{arch}.attention.head_count_kv": 512,
        f"{arch}.attention.key_length": 16,
        f"{arch}.attention.value_length": 16,
    }
    refused(hostile, _padded(tensors, 1000), f"gguf.kv['{arch}.attention.head_count']", "n_embd / n_head")


@pytest.mark.parametrize("name", ["gemma3-swa", "olmo2-swa"])
@pytest.mark.parametrize("value", [False, 0.0, True, 4.0])
def test_a_window_of_the_wrong_type_is_refused_not_read_as_absent(files, name, value):
    """llama.cpp reads attention.sliding_window as a uint32 and refuses a bool or a float; False and
    0.0 compared equal to 0 and built a graph without windows before."""
    metadata, tensors = files[name]
    key = f"{metadata['general.architecture']}.attention.sliding_window"
    refused(metadata | {key: value}, tensors, f"gguf.kv[{key!r}]", "integer")


@pytest.mark.parametrize("name", ["gemma2-defaults", "olmo2-swa"])
@pytest.mark.parametrize("pattern", [1, [], [False]])
def test_a_window_on_no_layer_is_refused_in_every_family_with_windows(files, name, pattern):
    """llama.cpp: GGML_ASSERT(hparams.is_swa_any()) whenever swa_type is not NONE (llama-model.cpp,
    create_memory): gemma2 always, olmo2 with a window; gemma3 was already refused."""
    metadata, tensors = files[name]
    key = f"{metadata['general.architecture']}.attention.sliding_window_pattern"
    refused(metadata | {key: pattern}, tensors, f"gguf.kv[{key!r}]", "marks no layer")


def test_qwen2_does_not_read_rope_freqs(tmp_path):
    """qwen2.cpp ropes with no frequency factors and creates no rope_freqs tensor (llama.cpp refuses
    the file: one tensor too many); the graph divided qwen2's frequencies by it before."""
    from support.llm import TinyLlama, write_gguf

    path = tmp_path / "qwen2.gguf"
    write_gguf(path, TinyLlama(architecture="qwen2", rope_freqs=True, default_type="F32"))
    refused(read_gguf_metadata(path), _tensors(path), "gguf.tensors['rope_freqs.weight']", "no use for")


@pytest.mark.parametrize("shape", [(12,), (24, 2)])
def test_phi3_checks_the_factors_it_does_not_choose(files, shape):
    """llama.cpp creates rope_factors_long and _short with n_rot/2 entries whichever it uses; the
    one the graph did not choose was not checked."""
    metadata, tensors = files["phi3-longrope-long-f32"]  # the long factors are chosen
    hostile = tensors | {"rope_factors_short.weight": ("F32", shape)}
    refused(metadata, hostile, "gguf.tensors['rope_factors_short.weight']", "has shape")


def test_the_rope_table_limit_counts_every_rope(files):
    """gemma3's windowed and global layers rotate with two bases: two cos/sin tables. A context
    where one table fits the limit and two do not is refused."""
    metadata, tensors = files["gemma3-swa"]
    head_dim = metadata["gemma3.attention.key_length"]
    context = MAX_ROPE_TABLE_BYTES // (head_dim * 4)  # one table exactly at the limit
    hostile = metadata | {"gemma3.context_length": context}
    refused(hostile, tensors, "gguf.kv['gemma3.context_length']", "rotary cos/sin tables")
    # without a window every layer rotates alike: one table, the same context fits
    single = {k: v for k, v in hostile.items() if k != "gemma3.attention.sliding_window"}
    assert plan_decoder(single, tensors).context_length == context


@pytest.fixture(scope="module")
def gemma3_file(tmp_path_factory):
    module, config = CASES["gemma3-swa-1layer"]
    path = tmp_path_factory.mktemp("ctx") / "gemma3.gguf"
    module.write_gguf(path, config)
    return path


def _rewritten(source, target, key, value, value_type):
    """``source`` with metadata ``key`` replaced by ``value`` of GGUF ``value_type`` (None: dropped)."""
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

    reader = GGUFReader(str(source))
    writer = GGUFWriter(str(target), reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", key):
            continue
        kind = field.types[0]
        sub = {"sub_type": field.types[-1]} if kind == GGUFValueType.ARRAY else {}
        writer.add_key_value(name, field.contents(), kind, **sub)
    if value_type is not None:
        writer.add_key_value(key, value, value_type)
    for t in reader.tensors:
        assert t.tensor_type == GGMLQuantizationType.F32
        writer.add_tensor(t.name, np.asarray(t.data).reshape(tuple(int(d) for d in reversed(t.shape.tolist()))))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def _broken_context_lengths():
    from gguf import GGUFValueType as T

    return [
        pytest.param(None, None, "missing", id="missing"),
        pytest.param("128", T.STRING, "positive integer", id="string"),
        pytest.param(True, T.BOOL, "positive integer", id="bool"),
        pytest.param(128.0, T.FLOAT32, "positive integer", id="float"),
        pytest.param(-5, T.INT32, "positive integer", id="negative"),
        pytest.param(0, T.UINT32, "positive integer", id="zero"),
    ]


@pytest.mark.parametrize(("value", "value_type", "words"), _broken_context_lengths())
def test_a_broken_file_context_length_is_refused_with_a_context_size(gemma3_file, tmp_path, value, value_type, words):
    """--ctx-size N (convert(context_length=N)) is at most the file's context_length: a file whose
    key is missing or not a positive integer was built for N anyway (its metadata then said
    context_length '64', a string), or refused naming convert(context_length)."""
    from onnx_struct.convert import convert

    path = _rewritten(gemma3_file, tmp_path / "broken.gguf", "gemma3.context_length", value, value_type)
    with pytest.raises(onnx_struct.ValidationError) as caught:
        convert(path, graph=True, context_length=64)
    assert caught.value.path == "gguf.kv['gemma3.context_length']", str(caught.value)
    assert words in str(caught.value)


def test_a_context_size_over_the_limit_in_the_file_is_still_allowed(gemma3_file, tmp_path):
    """A trained context over MAX_CONTEXT_LENGTH (a 2^40-position file) builds for a --ctx-size within
    it: the limit is on the tables the graph holds, not on the file's claim."""
    from gguf import GGUFValueType

    from onnx_struct.convert import convert
    from onnx_struct.formats.gguf.metadata import decode_metadata

    path = _rewritten(gemma3_file, tmp_path / "long.gguf", "gemma3.context_length", 2**40, GGUFValueType.UINT64)
    model = convert(path, graph=True, context_length=64)
    assert decode_metadata(model)["gemma3.context_length"] == 64
