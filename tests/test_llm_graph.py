"""The decoder graph of convert(..., graph=True) (onnx_struct/llm/graph/) against an
independent float64 numpy forward (tests/support/llm.py) of tiny random llama GGUF files written
with gguf-py: GQA, tied and untied heads, Q4_0/Q8_0/Q4_K/Q6_K/F32 mixes, qwen2's biases and NEOX
rope, Llama 3.1-style rope_freqs, mistral with linear rope scaling; logits at accuracy_level=0 within 1e-4 relative RMS for a whole
prompt and for prefill + steps through the KV cache; greedy tokens identical."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gguf")

from support.llm import TinyLlama, forward, read_weights, relative_rms, write_gguf  # noqa: E402

import onnx_struct  # noqa: E402
from onnx_struct.cli import main  # noqa: E402
from onnx_struct.convert import convert  # noqa: E402
from onnx_struct.llm.graph import plan_decoder  # noqa: E402

CONFIGS = {
    "tied-q4_0-gqa": TinyLlama(),
    "untied-mix": TinyLlama(
        tied=False,
        seed=1,
        types={
            "attn_q": "Q8_0",
            "attn_k": "Q4_K",
            "attn_v": "F32",
            "ffn_gate": "Q4_K",
            "ffn_down": "Q6_K",
            "output": "Q6_K",
            "token_embd": "Q4_K",
        },
    ),
    "mha-rope-freqs": TinyLlama(n_kv_heads=8, rope_freqs=True, seed=2, types={"token_embd": "F32"}),
    "qwen2-biases-neox": TinyLlama(architecture="qwen2", tied=False, seed=3, types={"ffn_up": "Q8_0"}),
    "mistral-linear-rope": TinyLlama(architecture="mistral", linear_rope_factor=4.0, freq_base=500000.0, seed=4),
}
PROMPT = np.array([3, 17, 5, 42, 7, 9, 60, 1], np.int64)
TOLERANCE = 1e-4


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    config = CONFIGS[request.param]
    path = tmp_path_factory.mktemp("llm") / "tiny.gguf"
    write_gguf(path, config)
    session = onnx_struct.InferenceSession(convert(path, graph=True, all_logits=True), accuracy_level=0)
    return config, read_weights(path), session


def feeds(config: TinyLlama, ids: np.ndarray, total: int, cache: list | None) -> dict[str, np.ndarray]:
    empty = np.zeros((1, config.n_kv_heads, 0, config.head_dim), np.float32)
    out = {"input_ids": ids[None], "attention_mask": np.ones((1, total), np.int64)}
    for i in range(config.n_layers):
        out[f"past_key_values.{i}.key"] = cache[2 * i] if cache else empty
        out[f"past_key_values.{i}.value"] = cache[2 * i + 1] if cache else empty
    return out


def test_whole_prompt_matches_numpy_forward(tiny):
    config, weights, session = tiny
    expected, _ = forward(weights, config, PROMPT)
    logits, *present = session.run(None, feeds(config, PROMPT, len(PROMPT), None))
    assert logits.shape == (1, len(PROMPT), config.n_vocab)
    assert relative_rms(logits[0], expected) < TOLERANCE
    assert present[0].shape == (1, config.n_kv_heads, len(PROMPT), config.head_dim)


def test_prefill_then_steps_through_the_cache(tiny):
    """Prefill 5 tokens, then one at a time through present -> past; greedy tokens as the oracle's."""
    config, weights, session = tiny
    prefix = PROMPT[:5]
    logits, *cache = session.run(None, feeds(config, prefix, len(prefix), None))
    expected, ref_cache = forward(weights, config, prefix)
    assert relative_rms(logits[0], expected) < TOLERANCE
    ours, theirs = [int(np.argmax(logits[0, -1]))], [int(np.argmax(expected[-1]))]
    total = len(prefix)
    for _ in range(6):
        total += 1
        logits, *cache = session.run(None, feeds(config, np.array(ours[-1:]), total, cache))
        expected, ref_cache = forward(weights, config, np.array(ours[-1:]), ref_cache)
        assert relative_rms(logits[0], expected) < TOLERANCE
        ours.append(int(np.argmax(logits[0, -1])))
        theirs.append(int(np.argmax(expected[-1])))
    assert ours == theirs
    assert cache[0].shape[2] == total


def test_a_chunk_after_the_prompt(tiny):
    """A multi-token step after a prefill (past > 0, seq > 1) attends causally within the chunk."""
    config, weights, session = tiny
    _, *cache = session.run(None, feeds(config, PROMPT[:3], 3, None))
    logits, *_ = session.run(None, feeds(config, PROMPT[3:], len(PROMPT), cache))
    _, ref_cache = forward(weights, config, PROMPT[:3])
    expected, _ = forward(weights, config, PROMPT[3:], ref_cache)
    assert relative_rms(logits[0], expected) < TOLERANCE


def test_graph_io_contract(tiny):
    config, _, session = tiny
    inputs = {i.name: (i.type, i.shape) for i in session.get_inputs()}
    assert inputs["input_ids"] == ("tensor(int64)", ["batch", "seq"])
    assert inputs["attention_mask"][0] == "tensor(int64)"
    assert inputs["past_key_values.1.value"] == (
        "tensor(float)",
        ["batch", config.n_kv_heads, "past", config.head_dim],
    )
    names = [o.name for o in session.get_outputs()]
    assert names == ["logits"] + [f"present.{i}.{kv}" for i in range(config.n_layers) for kv in ("key", "value")]
    ops = {node.op_type for node in session.lowered.graph.node}
    assert {"GroupQueryAttention", "MatMulNBits"} <= ops


# ------------------------------------------------------------------------------------ refusals
def metadata(arch: str = "llama", **extra) -> dict[str, object]:
    base = {
        "general.architecture": arch,
        f"{arch}.block_count": 1,
        f"{arch}.context_length": 64,
        f"{arch}.embedding_length": 64,
        f"{arch}.feed_forward_length": 128,
        f"{arch}.attention.head_count": 4,
        f"{arch}.attention.head_count_kv": 2,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
    }
    base.update(extra)
    return {k: v for k, v in base.items() if v is not None}


def tensors(**changes) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The tensors of metadata()'s model, with ``blk__0__x`` -> ``blk.0.x`` changed (None: removed)."""
    out = {"token_embd.weight": ("Q4_0", (32, 64))} | _rest()
    for name, value in changes.items():
        name = name.replace("__", ".")
        if value is None:
            out.pop(name)
        else:
            out[name] = value
    return out


def _rest() -> dict[str, tuple[str, tuple[int, ...]]]:
    shapes = {
        "output_norm.weight": (64,),
        "blk.0.attn_norm.weight": (64,),
        "blk.0.attn_q.weight": (64, 64),
        "blk.0.attn_k.weight": (32, 64),
        "blk.0.attn_v.weight": (32, 64),
        "blk.0.attn_output.weight": (64, 64),
        "blk.0.ffn_norm.weight": (64,),
        "blk.0.ffn_gate.weight": (128, 64),
        "blk.0.ffn_up.weight": (128, 64),
        "blk.0.ffn_down.weight": (64, 128),
    }
    return {name: ("Q4_0", shape) for name, shape in shapes.items()}


def test_the_hand_written_shapes_are_what_the_builder_expects():
    """The shapes above are written out by hand: the builder's own table must agree with them."""
    p = plan_decoder(metadata(), tensors())
    assert set(p.expected_shapes().items()) == {(n, s) for n, (_, s) in tensors().items()}
    assert (p.n_heads, p.n_kv_heads, p.head_dim, p.n_vocab, p.tied) == (4, 2, 16, 32, True)


@pytest.mark.parametrize(
    ("meta", "table", "path", "words"),
    [
        (metadata("gpt2"), None, "gguf.kv['general.architecture']", "architecture 'gpt2' has no decoder graph"),
        (metadata(**{"llama.expert_count": 8}), None, "gguf.kv['llama.expert_count']", "mixture of experts"),
        (metadata(**{"llama.block_count": None}), None, "gguf.kv['llama.block_count']", "missing"),
        (metadata(**{"llama.attention.head_count": 3}), None, "gguf.kv['llama.attention.head_count_kv']", "divide"),
        (metadata(**{"llama.rope.scaling.type": "yarn"}), None, "gguf.kv['llama.rope.scaling.type']", "yarn"),
        (metadata(**{"llama.attention.key_length": 32}), None, "gguf.tensors['blk.0.attn_q.weight']", "[128, 64]"),
        (metadata(**{"llama.attention.value_length": 32}), None, "value_length", "one head size"),
        (metadata(**{"llama.rope.dimension_count": 8}), None, "rope.dimension_count", "rotates whole heads"),
        (metadata(**{"llama.attention.sliding_window": 4096}), None, "sliding_window", "sliding-window"),
        (metadata(**{"llama.context_length": 0}), None, "gguf.kv['llama.context_length']", "positive integer"),
        (metadata(**{"general.architecture": ["llama"]}), None, "gguf.kv['general.architecture']", "no decoder graph"),
        (metadata(**{"llama.block_count": 2**40}), None, "gguf.kv['llama.block_count']", "11 tensors in all"),
        (metadata(**{"llama.attention.layer_norm_rms_epsilon": float("inf")}), None, "rms_epsilon", "finite"),
        (metadata(**{"llama.attention.layer_norm_rms_epsilon": 1e300}), None, "rms_epsilon", "float32"),
        (metadata(**{"llama.context_length": 2**40}), None, "gguf.kv['llama.context_length']", "exceed the limit"),
        (metadata(**{"llama.context_length": "64"}), None, "context_length", "not '64' (a string)"),
        (metadata(**{"llama.attention.key_length": "16"}), None, "key_length", "positive integer, not '16' (a string)"),
        (metadata(**{"llama.rope.freq_base": [1.0]}), None, "freq_base", "float32 number, not [1.0] (an array)"),
        (metadata(**{"tokenizer.ggml.tokens": ["a"] * 31}), None, "tokenizer.ggml.tokens", "31 tokens, but"),
        (metadata(**{"tokenizer.ggml.tokens": ["a"] * 33}), None, "tokenizer.ggml.tokens", "have 32 rows"),
        (metadata(), {"blk__0__ffn_up__weight": None}, "gguf.tensors['blk.0.ffn_up.weight']", "missing"),
        (metadata(), {"blk__0__attn_k__weight": ("Q4_0", (64, 64))}, "attn_k.weight", "[32, 64]"),
        (metadata(), {"blk__0__attn_q_norm__weight": ("F32", (16,))}, "attn_q_norm", "no use for 'attn_q_norm"),
    ],
)
def test_refusals_name_what_is_missing(meta, table, path, words):
    with pytest.raises(onnx_struct.ValidationError) as caught:
        plan_decoder(meta, tensors(**(table or {})))
    assert path in caught.value.path
    assert words in str(caught.value)


def test_a_vocabulary_of_the_embedding_size_is_accepted():
    """The vocabulary check compares sizes: 32 tokens for token_embd's 32 rows pass."""
    p = plan_decoder(metadata(**{"tokenizer.ggml.tokens": ["a"] * 32}), tensors())
    assert p.n_vocab == 32


def test_the_context_length_limit_is_a_limit_error():
    with pytest.raises(onnx_struct.ValidationError) as caught:
        plan_decoder(metadata(**{"llama.context_length": 2**24 + 1}), tensors())
    assert (caught.value.code, caught.value.details) == ("limit_exceeded", {"actual": 2**24 + 1, "limit": 2**24})
    assert plan_decoder(metadata(**{"llama.context_length": 2**24}), tensors()).context_length == 2**24


def test_the_rotary_tables_size_is_a_limit_error():
    """context_length x head size x 4 bytes of cos/sin tables are folded at session creation: at
    head size 32 (2 heads of 64), 2^23 positions fill MAX_ROPE_TABLE_BYTES (1 GiB) and one more is
    refused, though both are under MAX_CONTEXT_LENGTH."""
    heads = {"llama.attention.head_count": 2, "llama.attention.head_count_kv": 1}
    at_limit = plan_decoder(metadata(**heads, **{"llama.context_length": 2**23}), tensors())
    assert (at_limit.context_length, at_limit.head_dim) == (2**23, 32)
    with pytest.raises(onnx_struct.ValidationError) as caught:
        plan_decoder(metadata(**heads, **{"llama.context_length": 2**23 + 1}), tensors())
    assert caught.value.path == "gguf.kv['llama.context_length']" and "rotary cos/sin tables" in str(caught.value)
    assert (caught.value.code, caught.value.details) == (
        "limit_exceeded",
        {"actual": (2**23 + 1) * 128, "limit": 2**30},
    )


def test_a_refused_file_is_refused_by_convert(tmp_path, capsys):
    import gguf

    reader_free = tmp_path / "phi.gguf"
    writer = gguf.GGUFWriter(str(reader_free), "phi2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(onnx_struct.ValidationError, match="architecture 'phi2' has no decoder graph"):
        convert(reader_free, graph=True)
    assert len(convert(reader_free).graph.node) == 0
    assert main(["from-gguf", str(reader_free), str(tmp_path / "phi.onnx"), "--graph", "--quiet"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "gguf.kv['general.architecture']: architecture 'phi2' has no decoder graph" in line
    assert not (tmp_path / "phi.onnx").exists()


def test_ctx_size_builds_the_graph_for_fewer_positions(tmp_path, capsys):
    """from-gguf --graph --ctx-size N: the RoPE tables hold N positions and the model's metadata
    says N (generation reads it); more than the file's context_length, or without --graph, is refused."""
    import onnx
    from onnx import numpy_helper

    path = tmp_path / "tiny.gguf"
    write_gguf(path, TinyLlama(n_layers=1, default_type="F32"))
    out = tmp_path / "tiny.onnx"
    assert main(["from-gguf", str(path), str(out), "--graph", "--ctx-size", "48", "--quiet"]) == 0
    model = onnx.load(str(out), load_external_data=False)
    (length,) = [t for t in model.graph.initializer if t.name == "rope/length"]
    assert float(numpy_helper.to_array(length)) == 48.0
    assert {p.key: p.value for p in model.metadata_props}["llama.context_length"] == "48"
    assert main(["from-gguf", str(path), str(tmp_path / "big.onnx"), "--graph", "--ctx-size", "129", "--quiet"]) == 1
    assert "129 positions exceed the file's llama.context_length of 128" in capsys.readouterr().err
    assert main(["from-gguf", str(path), str(tmp_path / "no.onnx"), "--ctx-size", "48", "--quiet"]) == 2
    assert "--ctx-size needs --graph" in capsys.readouterr().err
    assert not (tmp_path / "big.onnx").exists() and not (tmp_path / "no.onnx").exists()


def test_logits_of_the_last_position_by_default(tmp_path, capsys):
    """The default graph's head runs on the last position only: logits [1, 1, n_vocab], equal to
    the last row of the numpy forward (and of --all-logits' [1, seq, n_vocab]); greedy tokens
    through the cache are the oracle's. --all-logits needs --graph."""
    import onnx

    config = CONFIGS["untied-mix"]
    path = tmp_path / "tiny.gguf"
    write_gguf(path, config)
    weights = read_weights(path)
    expected, _ = forward(weights, config, PROMPT)
    session = onnx_struct.InferenceSession(convert(path, graph=True), accuracy_level=0)
    logits, *present = session.run(None, feeds(config, PROMPT, len(PROMPT), None))
    assert logits.shape == (1, 1, config.n_vocab)
    assert relative_rms(logits[0], expected[-1:]) < TOLERANCE
    assert present[0].shape == (1, config.n_kv_heads, len(PROMPT), config.head_dim)  # every position cached
    tokens = onnx_struct.generate(convert(path, graph=True), PROMPT.tolist(), max_new_tokens=6, accuracy_level=0)
    oracle, ids = [], PROMPT
    for _ in range(6):
        step, _ = forward(weights, config, ids)
        oracle.append(int(np.argmax(step[-1])))
        ids = np.append(ids, oracle[-1])
    assert tokens.tokens == oracle

    out = tmp_path / "all.onnx"
    assert main(["from-gguf", str(path), str(out), "--graph", "--all-logits", "--quiet"]) == 0
    (declared,) = [o for o in onnx.load(str(out), load_external_data=False).graph.output if o.name == "logits"]
    assert declared.type.tensor_type.shape.dim[1].dim_param == "seq"
    assert main(["from-gguf", str(path), str(tmp_path / "no.onnx"), "--all-logits", "--quiet"]) == 2
    assert "--all-logits needs --graph" in capsys.readouterr().err
