"""The wire scan's numpy reader of long runs (schema/wire_runs.py) against the scan reading every
record in Python: the same first problem, the same facts about each struct value, and no node with
attributes left out; then check_model on hand-made runs with one odd record in the middle."""

from __future__ import annotations

import random

import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from support.protowire import field, varint

import onnx_struct as S
from onnx_struct.schema import wire, wire_runs

N = 300  # records per run: well past the records left to Python before numpy is tried


def tag_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def node(i: int) -> bytes:
    return oh.make_node("Identity", [f"h{i - 1}" if i else "X"], [f"h{i}"], name=f"n{i}").SerializeToString()


def value(i: int, payload: bytes = bytes(8), name: str | None = None) -> bytes:
    return S.make_struct_value(f"w{i}" if name is None else name, 0, raw_data=payload).SerializeToString()


def model_bytes(nodes: list[bytes], values: list[bytes], between: bytes = b"", after: bytes = b"") -> bytes:
    """A model of ``nodes`` (chained Identity), then the graph's name, input and output, then
    ``between``, the struct ``values`` (of struct_types[0]: UINT8[8]) and ``after``."""
    last = len(nodes) - 1
    inputs = field(11, oh.make_tensor_value_info("X", TensorProto.FLOAT, [1]).SerializeToString())
    outputs = field(12, oh.make_tensor_value_info(f"h{last}", TensorProto.FLOAT, [1]).SerializeToString())
    graph = b"".join(field(1, n) for n in nodes) + field(2, b"g") + inputs + outputs + between
    graph += b"".join(field(17, v) for v in values) + after
    model = oh.make_model(oh.make_graph([], "g", [], []), opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    model.ClearField("graph")
    S.add_struct_types(model, S.make_array(TensorProto.UINT8, 8))
    return model.SerializeToString() + field(7, graph)


def plain_model(**changes) -> tuple[list[bytes], list[bytes]]:
    nodes = [node(i) for i in range(N)]
    values = [value(i) for i in range(N)]
    for where, replacement in changes.items():
        kind, index = where.split("_")
        (nodes if kind == "node" else values)[int(index)] = replacement
    return nodes, values


def scans(data: bytes, monkeypatch) -> tuple[wire.Scan, wire.Scan, wire.Scan]:
    """(numpy runs from the first record, numpy runs after some records in Python, every record
    in Python)."""
    first = wire.scan_model(data, (1 << 20, 1 << 20))  # as for counts from a parse of long runs
    later = wire.scan_model(data)
    with monkeypatch.context() as patch:
        patch.setattr(wire_runs, "_PATIENCE", 1 << 62)
        slow = wire.scan_model(data)
    return first, later, slow


def assert_same_scan(data: bytes, monkeypatch) -> wire.Scan:
    first, fast, slow = scans(data, monkeypatch)
    assert str(first.error) == str(fast.error) == str(slow.error)
    if fast.error is None:
        assert (first.value_types, first.value_payloads, first.value_names) == (
            slow.value_types,
            slow.value_payloads,
            slow.value_names,
        )
        assert first.node_count == slow.node_count and set(first.nodes) <= set(slow.nodes)
        assert (fast.value_types, fast.value_payloads, fast.value_names) == (
            slow.value_types,
            slow.value_payloads,
            slow.value_names,
        )
        assert fast.node_count == slow.node_count
        assert set(fast.nodes) <= set(slow.nodes)
        try:
            parsed = S.load_model(data).proto.graph
        except S.ValidationError:
            return fast
        with_attributes = {i for i, n in enumerate(parsed.node) if len(n.attribute)}
        assert with_attributes <= set(fast.nodes) and with_attributes <= set(first.nodes)
        assert fast.node_count == len(parsed.node) and len(fast.value_types) == len(parsed.struct_initializer)
    return fast


def test_plain_runs_are_read_by_numpy_with_the_same_facts(monkeypatch):
    data = model_bytes(*plain_model())
    scan = assert_same_scan(data, monkeypatch)
    assert scan.value_types == [0] * N and scan.value_payloads == [8] * N
    assert scan.value_names == [f"w{i}".encode() for i in range(N)]
    assert len(scan.nodes) < N // 2  # numpy read most nodes
    S.check_model(data)


FAKE_RECORD = bytes((0x8A, 0x01, 12, 0x08, 0, 0x1A, 2, 0, 0, 0x2A, 2, 0x77, 0x31, 0x0A, 0x05))


@pytest.mark.parametrize(
    "changes",
    [
        {"value_150": value(150) + field(6, b"doc")},  # doc_string: not plain, valid
        {"value_150": value(150) + varint(99 << 3) + b"\x01"},  # an unknown field: not plain, valid
        {"value_150": value(150, payload=FAKE_RECORD[:8])},  # a payload that looks like a record
        {"value_150": value(150, name="w\x00150")},  # a NUL in a name
        {"value_150": value(150, payload=bytes(200))},  # a two-byte payload length
        {"node_150": oh.make_node("Identity", ["h149"], ["h150"], name="n" * 200).SerializeToString()},
        {"node_150": oh.make_node("Identity", ["h149"], ["h150"], name="n" * 20000).SerializeToString()},
        {"node_150": node(150) + field(5, oh.make_attribute("x", 1.0).SerializeToString())},
        {"node_150": node(150) + bytes((0xAA, 0x00, 0x00))},  # an empty attribute, its tag in a longer form
        {"node_100": node(100) + field(6, b"*" * 40), "node_299": node(299) + field(6, b"\xaa")},
    ],
    ids=["doc", "unknown", "fake_record", "nul", "payload_200", "node_200", "node_20000", "attr", "attr_long", "stars"],
)
def test_an_odd_record_in_a_run_is_read_as_python_reads_it(changes, monkeypatch):
    assert_same_scan(model_bytes(*plain_model(**changes)), monkeypatch)


@pytest.mark.parametrize(
    "changes, path, contains",
    [
        ({"value_150": value(150) + bytes((5 << 3, 1))}, "graph.struct_initializer[150] ('w150').name", "wire type"),
        (
            {"value_150": value(150) + field(2, tag_varint(5, 0) + field(2, b""))},
            "graph.struct_initializer[150] ('w150').struct_type",
            "oneof",
        ),
        (
            {"node_150": node(150) + field(5, field(1, b"t") + field(14, field(1, b"") + field(10, b"")))},
            "graph.node[150] ('n150').attribute[0] ('t').tp",
            "oneof",
        ),
    ],
    ids=["value_wire_type", "value_oneof", "node_oneof"],
)
def test_a_problem_in_the_middle_of_a_run_is_found(changes, path, contains, monkeypatch):
    data = model_bytes(*plain_model(**changes))
    scan = assert_same_scan(data, monkeypatch)
    assert str(scan.error).startswith(path) and contains in str(scan.error)
    with pytest.raises(S.ValidationError, match=contains) as caught:
        S.check_model(data)
    assert caught.value.path.startswith(path)


@pytest.mark.parametrize(
    "changes, path, code",
    [
        ({"value_150": value(150, name="w10")}, "graph.struct_initializer[150] ('w10')", "duplicate_name"),
        ({"value_150": value(150, name="X")}, "graph.struct_initializer[150] ('X')", "name_clash"),
        ({"value_150": value(150, name="")}, "graph.struct_initializer[150]", "missing_name"),
        ({"value_150": value(150, payload=bytes(7))}, "graph.struct_initializer[150] ('w150')", None),
    ],
    ids=["duplicate", "clash", "empty_name", "short_payload"],
)
def test_a_value_rule_broken_in_the_middle_of_a_run_is_reported_there(changes, path, code, monkeypatch):
    data = model_bytes(*plain_model(**changes))
    assert_same_scan(data, monkeypatch)
    with pytest.raises(S.ValidationError) as caught:
        S.check_model(data)
    assert caught.value.path.startswith(path), str(caught.value)
    if code is not None:
        assert caught.value.code == code


def test_a_non_utf8_name_in_the_middle_of_a_run(monkeypatch):
    raw = bytearray(value(150, name="w\x01"))
    raw[raw.index(b"w\x01") + 1] = 0xFF
    data = model_bytes(*plain_model(value_150=bytes(raw)))
    assert_same_scan(data, monkeypatch)
    with pytest.raises(S.ValidationError) as caught:
        S.check_model(data)
    assert caught.value.code == "invalid_utf8" and caught.value.path.startswith("graph.struct_initializer[150]")


def test_runs_split_over_two_occurrences_of_the_graph(monkeypatch):
    nodes, values = plain_model()
    data = model_bytes(nodes, values[:200]) + field(7, b"".join(field(17, v) for v in values[200:]))
    scan = assert_same_scan(data, monkeypatch)
    assert scan.value_names == [f"w{i}".encode() for i in range(N)]
    S.check_model(data)


def test_a_stock_field_between_values_ends_a_run(monkeypatch):
    nodes, values = plain_model()
    extra = field(13, oh.make_tensor_value_info("v", TensorProto.FLOAT, [1]).SerializeToString())
    data = model_bytes(nodes, values[:150], after=extra + b"".join(field(17, v) for v in values[150:]))
    assert_same_scan(data, monkeypatch)


@pytest.mark.parametrize("seed", range(3))
def test_random_byte_changes_give_the_same_scan(seed, monkeypatch):
    """Bytes changed, inserted or deleted at random in the graph: whatever they now mean (or fail
    to mean), numpy and Python read them alike."""
    base = model_bytes(*plain_model(node_7=node(7) + field(5, oh.make_attribute("x", 1).SerializeToString())))
    rng = random.Random(seed)
    start = base.index(field(1, node(0))[:4])
    interesting = [0x0A, 0x8A, 0x01, 0x2A, 0xAA, 0x08, 0x1A, 0x80, 0x00, 0x02, 0x12]
    for _ in range(150):
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            at, byte = rng.randrange(start, len(data)), rng.choice([*interesting, rng.randrange(256)])
            how = rng.random()
            if how < 0.7:
                data[at] = byte
            elif how < 0.85:
                data.insert(at, byte)
            else:
                del data[at]
        assert_same_scan(bytes(data), monkeypatch)


def test_runs_longer_than_a_window(monkeypatch):
    """Thousands of records over several windows (they start at 64 KiB and double)."""
    nodes = [node(i) for i in range(6000)]
    values = [value(i, payload=bytes(8) * 40) for i in range(6000)]
    declaration = S.make_array(TensorProto.UINT8, 320).SerializeToString()
    data = model_bytes(nodes, values[:3000]) + field(7, b"".join(field(17, v) for v in values[3000:]))
    data = data.replace(field(27, S.make_array(TensorProto.UINT8, 8).SerializeToString()), field(27, declaration))
    scan = assert_same_scan(data, monkeypatch)
    assert len(scan.nodes) < 100 and scan.value_payloads == [320] * 6000
    S.check_model(data)


def test_a_model_without_graph_or_runs(monkeypatch):
    for data in (b"", onnx.ModelProto(ir_version=10).SerializeToString(), model_bytes([node(0)], [value(0)])):
        assert_same_scan(data, monkeypatch)


def test_chain_against_following_the_records_one_by_one():
    """The numpy chain (a guess checked link by link, else pointer doubling) is the chain of
    records read one at a time from the window's start: runs of records whose bodies are dense
    with bytes that look like tags, one byte sometimes changed."""
    import numpy as np

    rng = np.random.default_rng(0)
    alphabet = np.array([0x0A, 0x0A, 0x0A, 0x01, 0x02, 0x05, 0x0C, 0x7F, 0x80, 0x81, 0xFF], np.uint8)
    doubled = 0
    for case in range(400):
        records = []
        for _ in range(rng.integers(1, 60)):
            body = rng.choice(alphabet, rng.integers(0, 13))
            records.append(np.concatenate(([0x0A, len(body)], body)).astype(np.uint8))
        w = np.concatenate(records)
        if case % 3:
            w[rng.integers(0, len(w))] = rng.choice(alphabet)
        starts = np.flatnonzero(w == 0x0A)
        length, size, ok = wire_runs._varints(w, starts + 1, 2)
        stops = starts + 1 + size + length
        valid = ok & (stops <= len(w))
        by_start = {int(s): (int(e), bool(v)) for s, e, v in zip(starts, stops, valid, strict=True)}
        expected, at = [], 0
        while at in by_start and by_start[at][1]:
            expected.append(at)
            at = by_start[at][0]
        assert starts[wire_runs._chain(starts, stops, valid, len(w))].tolist() == expected, case
        if not len(starts):
            continue
        reach = np.maximum.accumulate(np.where(valid, stops, 0))
        doubled += not set(expected) <= set(starts[np.concatenate(([True], starts[1:] >= reach[:-1]))].tolist())
    assert doubled > 20  # both ways of finding the chain were taken


def test_joined_names_are_the_slices_joined_by_nul():
    """The one-copy gather of a run's names (a cumulative sum of shifts) is ``b"\\0".join`` of the
    slices, empty strings and strings ending at the window's end included."""
    import numpy as np

    rng = np.random.default_rng(1)
    for case in range(2000):
        w = rng.integers(1, 256, rng.integers(1, 120)).astype(np.uint8)
        starts = rng.integers(0, len(w), rng.integers(0, 8)).astype(np.int64)
        lengths = np.array([rng.integers(0, len(w) - s + 1) for s in starts], np.int64)
        want = b"\0".join(w[s : s + n].tobytes() for s, n in zip(starts.tolist(), lengths.tolist(), strict=True))
        assert wire_runs._joined(w, starts, lengths) == want, case
