"""Chat generation (onnx_struct/llm/generation.py, chat_session.py, kv_cache.py): generate(messages=...)
tokenized as llama.cpp's chat (one BOS, special-token texts as tokens), end-of-generation ids,
a Chat keeping the KV cache across turns (the tokens prefilled per turn counted; replies against
the float64 numpy forward of the whole conversation), a cache that grows, a full context.

The chat template is a stand-in for apply_chat_template written here in Python (the Generator's
chat_renderer): "<s>" then "role: content</s>" per message, then "assistant:"; TEMPLATE is the same
as Jinja text, for the CLI's --chat-template.
"""

from __future__ import annotations

import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from support.llm import TinyLlama, greedy, read_weights, spm_tokenize, spm_vocab, write_gguf  # noqa: E402

import onnx_struct  # noqa: E402
from onnx_struct.convert import convert  # noqa: E402
from onnx_struct.llm import kv_cache  # noqa: E402
from onnx_struct.llm.chat.session import Chat  # noqa: E402
from onnx_struct.llm.generation import Generator  # noqa: E402

BOS, EOS = 1, 2


TEMPLATE = (
    "<s>{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def stand_in_template(metadata, messages, *, chat_template, add_generation_prompt):
    turns = "".join(f"{m['role']}: {m['content']}</s>" for m in messages)
    return "<s>" + turns + ("assistant:" if add_generation_prompt else "")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    config = TinyLlama(**spm_vocab(), seed=5)
    directory = tmp_path_factory.mktemp("chat")
    write_gguf(directory / "model.gguf", config)
    return config, convert(directory / "model.gguf", graph=True), read_weights(directory / "model.gguf")


@pytest.fixture(scope="module")
def generator(tiny):
    return Generator(tiny[1], accuracy_level=0, chat_renderer=stand_in_template)


def _ids(config, text: str) -> list[int]:
    """The hand-framed tokens of a rendered stand-in prompt: one BOS, "</s>" as EOS, the text
    between by the plain SentencePiece port (llama.cpp's algorithm, tests/support/llm.py)."""
    assert text.startswith("<s>")
    ids = [BOS]
    for i, part in enumerate(text[3:].split("</s>")):
        if i:
            ids.append(EOS)
        if part:
            ids += spm_tokenize(config.tokens, config.token_scores, part)[1:]  # its own BOS dropped
    return ids


def test_messages_are_rendered_and_tokenized_with_one_bos_and_special_tokens(tiny, generator):
    config = tiny[0]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
    result = generator.generate(messages=messages, max_new_tokens=3, stop_ids=())
    expected = _ids(config, "<s>system: be brief</s>user: hello world</s>assistant:")
    assert result.prompt_tokens == expected
    assert result.prompt_tokens[:2] != [BOS, BOS]  # the template's "<s>" is the tokenizer's BOS, once
    assert result.tokens == greedy(tiny[2], config, expected, 3)


def test_messages_to_a_file_without_a_template_are_refused_naming_the_key(tiny):
    with pytest.raises(onnx_struct.ValidationError) as caught:
        Generator(tiny[1]).generate(messages=[{"role": "user", "content": "hi"}], max_new_tokens=1)
    assert (caught.value.path, caught.value.code) == ("gguf.kv['tokenizer.chat_template']", "no_chat_template")


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"prompt": "hi", "messages": [{"role": "user", "content": "x"}]}, "generate(prompt)"),
        ({}, "generate(prompt)"),
        ({"messages": "hi"}, "generate(messages)"),
        ({"messages": [{"role": "user", "content": "x"}, "hi"]}, "generate(messages)[1]"),
        ({"messages": [{"content": "x"}]}, "generate(messages)[0]['role']"),
        ({"messages": [{"role": "user", "content": 5}]}, "generate(messages)[0]['content']"),
        ({"prompt": "hi", "stop_ids": [2**70]}, "generate(stop_ids)[0]"),
        ({"prompt": "hi", "stop_ids": "2"}, "generate(stop_ids)"),
    ],
)
def test_bad_prompts_and_messages_are_refused_naming_them(generator, arguments, path):
    with pytest.raises(onnx_struct.ValidationError) as caught:
        onnx_struct.generate(generator, max_new_tokens=1, **arguments)
    assert (caught.value.path, caught.value.code) == (path, "bad_argument")


def test_stop_ids_replace_the_end_of_generation_set(tiny, generator):
    config, _, weights = tiny
    prompt = spm_tokenize(config.tokens, config.token_scores, "hello world")
    expected = greedy(weights, config, prompt, 12)
    stop = next(i for i in range(1, 12) if expected[i] not in expected[:i])
    result = generator.generate(prompt, max_new_tokens=12, stop_ids={expected[stop]})
    assert result.tokens == expected[:stop]
    assert (result.stopped_at_eos, result.stop_id, result.stop_reason) == (True, expected[stop], "eog")
    never = generator.generate(prompt, max_new_tokens=12, stop_ids=())
    assert never.tokens == expected and never.stop_reason == "max_new_tokens" and never.stop_id is None


def test_eos_ids_hold_eos_and_turn_end_texts(tiny):
    from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer  # noqa: PLC0415

    config = TinyLlama(**spm_vocab(), seed=5)
    metadata = onnx_struct.convert.decode_metadata(tiny[1])
    tokens = [*metadata["tokenizer.ggml.tokens"], "<|im_end|>", "<|im_start|>"]
    extra = {
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [*metadata["tokenizer.ggml.scores"], 0.0, 0.0],
        "tokenizer.ggml.token_type": [*metadata["tokenizer.ggml.token_type"], 3, 3],
    }
    tokenizer = load_tokenizer({**metadata, **extra})
    assert tokenizer.eos_ids == {config.eos, len(tokens) - 2}  # eos and <|im_end|>, not <|im_start|>


def _fed(reply) -> int:
    """Generated tokens the model ran: all but a last one that stopped on max_new_tokens."""
    return len(reply.tokens) - (1 if reply.stop_reason == "max_new_tokens" and reply.tokens else 0)


def test_a_chat_prefills_only_the_new_tokens_and_replies_as_the_whole_conversation_would(tiny, generator):
    config, _, weights = tiny
    chat = Chat(generator, system="be brief", stop_ids=())
    cache = chat.cache
    conversation = [{"role": "system", "content": "be brief"}]
    previous = 0  # the previous turn's prompt length
    for turn, text in enumerate(["hello world", "and the café", "in"]):
        before = cache.run_tokens
        reply = chat.send(text, max_new_tokens=4)
        conversation.append({"role": "user", "content": text})
        prompt = _ids(config, stand_in_template(None, conversation, chat_template=None, add_generation_prompt=True))
        assert reply.prompt_tokens == prompt
        # the oracle: the float64 forward of the whole conversation from scratch
        assert reply.tokens == greedy(weights, config, prompt, 4)
        assert cache.run_tokens - before == reply.prefilled + _fed(reply)  # counted at the model
        if turn == 0:
            assert reply.prefilled == len(prompt)
        else:
            # everything up to the previous "assistant:" came from the cache (SentencePiece may
            # merge its last piece with the reply's first text: at most 2 tokens redone)
            assert reply.prefilled <= len(prompt) - previous + 2
        previous = len(prompt)
        conversation.append({"role": "assistant", "content": reply.text})
    assert chat.messages == conversation


def test_the_cache_grows_from_a_few_positions_keeping_what_it_holds(tiny, generator, monkeypatch):
    monkeypatch.setattr(kv_cache, "INITIAL_CAPACITY", 4)
    config, _, weights = tiny
    chat = Chat(generator, stop_ids=())
    assert chat.cache.capacity == 4
    first = chat.send("hello world and the", max_new_tokens=5)
    second = chat.send("café", max_new_tokens=5)
    conversation = [
        {"role": "user", "content": "hello world and the"},
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "café"},
    ]
    prompt = _ids(config, stand_in_template(None, conversation, chat_template=None, add_generation_prompt=True))
    assert second.tokens == greedy(weights, config, prompt, 5)
    assert 4 < chat.cache.capacity < 128 and chat.cache.capacity >= len(chat.cache.tokens)


def test_a_cache_past_half_its_limit_grows_to_the_limit_at_once(tiny, generator, monkeypatch):
    # 8 positions then a 9th of a 20-position limit: doubling would grow to 16, then again to 20
    # (two copies, each holding both buffers for a moment); grown past half the limit, it goes to 20.
    monkeypatch.setattr(kv_cache, "INITIAL_CAPACITY", 4)
    config, _, weights = tiny
    cache = kv_cache.KVCache(generator, 20)
    capacities = [cache.capacity]
    prompt = [BOS, *range(10, 17)]
    ids = list(prompt)
    logits = cache.run(ids)
    capacities.append(cache.capacity)
    for _ in range(3):
        ids.append(int(logits.argmax()))
        logits = cache.run(ids[-1:])
        capacities.append(cache.capacity)
    assert capacities == [4, 8, 20, 20, 20]
    assert ids[len(prompt) :] == greedy(weights, config, prompt, 3)


def test_a_full_context_is_said_and_leaves_the_conversation_as_it_was(generator):
    chat = Chat(generator, ctx_size=30, stop_ids=())
    reply = chat.send("hello", max_new_tokens=100)
    assert reply.stop_reason == "context_full"
    assert len(chat.cache.tokens) == 30
    kept = list(chat.messages)
    with pytest.raises(onnx_struct.ValidationError, match="the context is full") as caught:
        chat.send("world and the café and the café")
    assert caught.value.code == "context_full"
    assert chat.messages == kept


@pytest.mark.parametrize("ctx_size", [0, 129, 2**70, 1.5, True, "64"])
def test_a_ctx_size_outside_the_model_is_refused(generator, ctx_size):
    with pytest.raises(onnx_struct.ValidationError) as caught:
        Chat(generator, ctx_size=ctx_size)
    assert (caught.value.path, caught.value.code) == ("chat(ctx_size)", "bad_argument")


def test_ctrl_c_mid_reply_keeps_the_partial_reply_and_the_chat_goes_on(tiny, generator):
    config, _, weights = tiny
    chat = Chat(generator, stop_ids=())
    pieces = []

    def interrupt_after_two(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 2:
            raise KeyboardInterrupt

    reply = chat.send("hello world", max_new_tokens=10, stream=interrupt_after_two)
    assert reply.stop_reason == "interrupted" and 2 <= len(reply.tokens) < 10
    assert chat.messages[-1] == {"role": "assistant", "content": reply.text}
    after = chat.send("and", max_new_tokens=3)
    prompt = _ids(config, stand_in_template(None, chat.messages[:-1], chat_template=None, add_generation_prompt=True))
    assert after.prompt_tokens == prompt
    assert after.tokens == greedy(weights, config, prompt, 3)
