"""The data a chat template is given nests at most MAX_TEMPLATE_DATA_DEPTH deep: a message, tool or
extra variable holding itself, or nested 100,000 deep, raised RecursionError from
apply_chat_template (the copy to plain JSON-like values recursed, outside the sandbox's handlers).
Found with tests/fuzz/targets_chat.py; the inputs are tests/fuzz/findings/chat/*.json."""

from __future__ import annotations

import pytest

import onnx_struct as S
from onnx_struct.limits import MAX_TEMPLATE_DATA_DEPTH

pytest.importorskip("jinja2")

METADATA = {"tokenizer.ggml.tokens": ["<s>", "</s>"], "tokenizer.ggml.bos_token_id": 0}


def nested(depth: int) -> list:
    outer = current = []
    for _ in range(depth):
        current.append([])
        current = current[0]
    return outer


def cyclic_list() -> list:
    value = []
    value.append(value)
    return value


def cyclic_dict() -> dict:
    value = {}
    value["a"] = value
    return value


CASES = {
    "self_referencing_content": ([{"role": "user", "content": cyclic_list()}], {}),
    "content_nested_100000_deep": ([{"role": "user", "content": nested(100_000)}], {}),
    "self_referencing_tool_calls": ([{"role": "assistant", "content": "x", "tool_calls": cyclic_list()}], {}),
    "self_referencing_tools": ([{"role": "user", "content": "x"}], {"tools": [cyclic_dict()]}),
    "self_referencing_extra": ([{"role": "user", "content": "x"}], {"data": cyclic_dict()}),
    "extra_nested_900_deep": ([{"role": "user", "content": "x"}], {"data": nested(900)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_deep_or_self_referencing_data_refused(name):
    messages, kwargs = CASES[name]
    with pytest.raises(S.ValidationError, match="MAX_TEMPLATE_DATA_DEPTH") as caught:
        S.apply_chat_template(METADATA, messages, chat_template="{{ messages|tojson }}{{ data|tojson }}", **kwargs)
    assert caught.value.code == "limit_exceeded"
    assert caught.value.path.startswith("apply_chat_template(")


def test_data_at_the_depth_bound_renders():
    # content parts nested up to the bound still render (tool schemas nest about ten deep)
    content = [{"type": "text", "text": "x", "deep": nested(MAX_TEMPLATE_DATA_DEPTH - 4)}]
    out = S.apply_chat_template(METADATA, [{"role": "user", "content": content}], chat_template="{{ messages|tojson }}")
    assert out.count("[") > MAX_TEMPLATE_DATA_DEPTH - 4
