"""A folder onnxruntime-genai loads as it is, from a model ``from-gguf --graph`` built.

``export_genai(model, directory)`` writes:

- the model lowered with quantized execution (``lower(..., execution="quantized")``: MatMulNBits
  and GatherBlockQuantized on the GGUF blocks). In the model's own directory it references the
  bytes the model references (the .gguf itself with ``--reference``); elsewhere its weights go
  to ``<model>.data`` beside it;
- ``genai_config.json``: the decoder's sizes read from the graph itself (layers, KV heads, head
  size from the cache inputs) and the GGUF metadata the model keeps (attention heads, embedding
  width, context length, vocabulary size, BOS / EOS / pad and every end-of-generation id, the
  file's ``general.sampling.*`` defaults), greedy search by default;
- ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json`` and
  ``chat_template.jinja`` (:mod:`onnx_struct.llm.tokenizer.hf_export`).

Nothing is written when the tokenizer has no exact HF equivalent or the graph is not a decoder
with the cache inputs genai feeds: a ValidationError says which.
"""

from __future__ import annotations

import json
import os
import pathlib

import onnx

from onnx_struct.errors import ValidationError
from onnx_struct.formats.gguf.metadata import decode_metadata
from onnx_struct.llm.tokenizer.hf_export import hf_tokenizer, save_pretrained
from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer
from onnx_struct.lowering.lower import lower_model
from onnx_struct.payload import external, file_identity
from onnx_struct.payload.external_io import save_plain_with_external_tensors
from onnx_struct.schema.model import model_directory, resolve_path

CONFIG_FILE = "genai_config.json"
# The decoder graph's I/O names (onnx_struct.llm.graph), which are genai's defaults too.
INPUTS = {
    "input_ids": "input_ids",
    "attention_mask": "attention_mask",
    "past_key_names": "past_key_values.%d.key",
    "past_value_names": "past_key_values.%d.value",
}
OUTPUTS = {"logits": "logits", "present_key_names": "present.%d.key", "present_value_names": "present.%d.value"}
# genai's model type: "llama" is its plain decoder-only loop (inputs above, nothing architecture
# specific); the graph itself carries every family's differences.
GENAI_MODEL_TYPE = "llama"
DEFAULT_ACCURACY_LEVEL = 4  # onnxruntime's default for MatMulNBits, and onnx_struct.generate's
# general.sampling.* keys (gguf-py's Keys.General.SAMPLING_*) -> genai search option
_SAMPLING = {
    "general.sampling.top_k": "top_k",
    "general.sampling.top_p": "top_p",
    "general.sampling.temp": "temperature",
}


def export_genai(
    model: str | os.PathLike, directory: str | os.PathLike, *, accuracy_level: int = DEFAULT_ACCURACY_LEVEL
) -> list[pathlib.Path]:
    """Write the onnxruntime-genai folder of a ``from-gguf --graph`` model into ``directory``.

    Args:
        model: the model file (struct parts and the decoder graph; a lowered one is taken as is).
        directory: the folder to write (created if absent).
        accuracy_level: the MatMulNBits nodes' (4, onnxruntime's default and what
            ``onnx_struct.generate`` runs by default; 0: float32 activations).

    Returns:
        The files written, the model first.

    Raises:
        ValidationError: the model is not a decoder graph built by ``from-gguf --graph`` (no GGUF
            metadata, other inputs), or its tokenizer has no exact HF equivalent.
    """
    source, folder = pathlib.Path(model), pathlib.Path(directory)
    stock = onnx.load(source, load_external_data=False)  # metadata and graph inputs only
    metadata = decode_metadata(stock)
    if not metadata:
        raise ValidationError(
            "metadata_props", "no GGUF metadata: not a model built by from-gguf", code="not_a_decoder"
        )
    sizes = decoder_sizes(stock.graph)
    tokenizer = load_tokenizer(stock)
    hf = hf_tokenizer(tokenizer)  # refuse before anything is written
    folder.mkdir(parents=True, exist_ok=True)
    model_file = _model_file_name(source, folder)
    # References are kept only into the model's own directory and never through a link: onnxruntime
    # (and so genai) refuses external data that is a symlink out of the model's directory, as in the
    # Hugging Face cache, which onnx_struct admits by the file's recorded identity.
    keep = _same_directory(source, folder) and not _references_links(stock, source.parent)
    # MatMulNBits emitted directly at the given level, as onnx_struct's own session emits them: genai
    # runs the computation onnx_struct.generate runs, whatever its session's fusion settings.
    lowered = lower_model(source, keep_external=keep, execution="quantized", accuracy_level=accuracy_level).model
    if not keep:
        directory = model_directory(source)
        file_identity.admit_recorded_links(stock.metadata_props, directory)
        external.load_external_tensors(lowered, directory)
    save_plain_with_external_tensors(lowered, folder / model_file, location=f"{model_file}.data")
    del lowered
    config = genai_config(metadata, sizes, model_file, tokenizer)
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    context = config["model"]["context_length"]
    written = save_pretrained(tokenizer, folder, context_length=context, built=hf)
    return [folder / model_file, folder / CONFIG_FILE, *written]


def decoder_sizes(graph: onnx.GraphProto) -> dict[str, int]:
    """Layers, KV heads and head size of a decoder graph, from its cache inputs
    (``past_key_values.<i>.key``: [batch, kv heads, past, head size]).

    Args:
        graph: the decoder graph.

    Returns:
        ``{"num_hidden_layers", "num_key_value_heads", "head_size"}``.

    Raises:
        ValidationError: an input genai feeds is missing, or the cache inputs are not numbered
            0..n-1 with fixed KV heads and head size (``not_a_decoder``).
    """
    names = {i.name: i for i in graph.input}
    for required in ("input_ids", "attention_mask", "past_key_values.0.key"):
        if required not in names:
            raise ValidationError(
                f"graph.input[{required!r}]", "missing: not a decoder graph (from-gguf --graph)", code="not_a_decoder"
            )
    layers = 0
    while f"past_key_values.{layers}.key" in names:
        layers += 1
    expected = {"input_ids", "attention_mask"}
    expected |= {f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")}
    extra = sorted(set(names) - expected)
    if extra:
        raise ValidationError(
            f"graph.input[{extra[0]!r}]", "an input onnxruntime-genai does not feed", code="not_a_decoder"
        )
    dims = names["past_key_values.0.key"].type.tensor_type.shape.dim
    if len(dims) != 4 or not (dims[1].HasField("dim_value") and dims[3].HasField("dim_value")):
        raise ValidationError(
            "graph.input['past_key_values.0.key']", "not [batch, kv heads, past, head size]", code="not_a_decoder"
        )
    return {"num_hidden_layers": layers, "num_key_value_heads": dims[1].dim_value, "head_size": dims[3].dim_value}


def genai_config(metadata: dict, sizes: dict[str, int], model_file: str, tokenizer) -> dict[str, object]:
    """The ``genai_config.json`` object of a decoder graph.

    Args:
        metadata: the GGUF metadata (``decode_metadata``).
        sizes: :func:`decoder_sizes` of the graph.
        model_file: the model's file name in the folder.
        tokenizer: the model's :class:`~onnx_struct.llm.tokenizer.tokenizer.Tokenizer`.

    Returns:
        The JSON object: ``model`` (ids, sizes, I/O names) and ``search`` (greedy; the file's
        sampling defaults for when ``do_sample`` is turned on).
    """
    arch = metadata.get("general.architecture")
    context = int(metadata[f"{arch}.context_length"])
    heads = metadata.get(f"{arch}.attention.head_count")
    heads = heads if isinstance(heads, int) else sizes["num_key_value_heads"]
    vocab = tokenizer.vocab
    eos = sorted(tokenizer.eos_ids) or ([vocab.eos] if vocab.eos is not None else [])
    pad = vocab.pad if vocab.pad is not None else (eos[0] if eos else 0)
    decoder = {
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
        "filename": model_file,
        "hidden_size": int(metadata.get(f"{arch}.embedding_length", heads * sizes["head_size"])),
        "num_attention_heads": heads,
        **sizes,
        "inputs": dict(INPUTS),
        "outputs": dict(OUTPUTS),
    }
    search = {
        "do_sample": False,
        "num_beams": 1,
        "num_return_sequences": 1,
        "max_length": context,
        "min_length": 0,
        "past_present_share_buffer": False,
        "early_stopping": True,
        "length_penalty": 1.0,
        "repetition_penalty": 1.0,
        "no_repeat_ngram_size": 0,
        "diversity_penalty": 0.0,
        "temperature": 1.0,
        "top_k": 50,
        "top_p": 1.0,
    }
    for key, option in _SAMPLING.items():
        value = metadata.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            search[option] = value
    return {
        "model": {
            "type": GENAI_MODEL_TYPE,
            "bos_token_id": vocab.bos if vocab.bos is not None else pad,
            "eos_token_id": eos,
            "pad_token_id": pad,
            "context_length": context,
            "vocab_size": tokenizer.vocab_size,
            "decoder": decoder,
        },
        "search": search,
    }


def _same_directory(source: pathlib.Path, folder: pathlib.Path) -> bool:
    """Whether the folder is where the source model's external files are looked up (then the
    lowered model references them in place, as ``onnx-struct lower`` does)."""
    directory = model_directory(source)
    return directory.resolved_file_directory is None and directory == resolve_path(folder.absolute())


def _references_links(stock: onnx.ModelProto, directory: pathlib.Path) -> bool:
    """Whether a file the model records (``from-gguf --reference``'s .gguf) is a symlink or has
    several hard links."""
    for identity, _ in file_identity.recorded(stock.metadata_props) or []:
        path = directory / identity.location
        try:
            if path.is_symlink() or path.stat().st_nlink > 1:
                return True
        except OSError:
            return True  # not readable as named: copy through the checked reader, which reports it
    return False


def _model_file_name(source: pathlib.Path, folder: pathlib.Path) -> str:
    """``model.onnx``, unless that is the source itself (then ``<stem>.genai.onnx``)."""
    candidate = folder / "model.onnx"
    if candidate.exists() and candidate.resolve() == source.resolve():
        return f"{source.stem}.genai.onnx"
    return "model.onnx"
