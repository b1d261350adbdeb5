"""Leaf reads of onnx_struct.view against peers measured in the same run (one command, one table).

    python benchmarks/bench_view.py

1. FLOAT16 ``d`` of an Array of 18-byte {d: FLOAT16, qs: UINT8[16]} records over 64 MiB:
   numpy copy of the whole buffer / leaf view creation (zero copy), and / view + materialization
   (``np.ascontiguousarray``). Goal >= 0.5.
2. An INT4 leaf over 64 MiB: numpy copy of the buffer / materialized view. Goal >= 0.25.
3. Three 6-bit components at bit offsets 3, 9, 15 of 24-bit records over 16 MiB: ours vs a
   straightforward numpy reference (assemble each 3-byte record, shift, mask); and per record vs
   ``construct`` (ByteSwapped BitStruct) and ``bitstruct`` (compiled, C if available), which are
   timed on the first 10,000 records and extrapolated per record (they run a Python call per
   record). Every peer's output is checked equal to ours first.
4. The writer: pack of the INT4 leaf and of the 6-bit components, vs the same numpy copy.
5. ``view("w", model)`` + materialization of its ``d`` leaf, where ``model`` is an
   ``onnx.ModelProto`` holding the 64 MiB Q4_0-like payload of 1. inline: numpy copy of 64 MiB /
   that time (goal >= 1/3, i.e. at most 3x the copy). Also shown: the same through a whole-model
   parse (what ``load`` did before reading the struct parts alone), and the floor of the struct-parts
   path: protobuf hands an unknown field over as a ``bytes`` object, one copy of the payload.

Times are the best of several runs (``time.perf_counter``).
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from _timing import best_of
from google.protobuf.unknown_fields import UnknownFieldSet
from onnx import TensorProto

import onnx_struct as S
from onnx_struct.payload.view import view_buffer

MIB = 1 << 20
RNG = np.random.default_rng(0)


def row(name: str, ours: float, peer_name: str, peer: float, goal: str = "") -> str:
    return f"| {name} | {ours * 1e3:.2f} ms | {peer_name} | {peer * 1e3:.2f} ms | {peer / ours:.2f} | {goal} |"


def bench_float16(rows: list[str]) -> None:
    n = 64 * MIB // 18
    types = [
        S.make_structure(
            [S.make_field("d", TensorProto.FLOAT16), S.make_field("qs", S.make_tensor_type(TensorProto.UINT8, [16]))]
        )
    ]
    root = S.make_array(S.make_type_reference(0), n)
    buffer = RNG.integers(0, 256, n * 18, dtype=np.uint8)
    v = view_buffer(buffer, root, types)
    expected = buffer.reshape(n, 18)[:, :2].copy().view(np.float16).reshape(n)
    assert np.array_equal(np.ascontiguousarray(v["d"]).view(np.uint16), expected.view(np.uint16))
    copy = best_of(buffer.copy)
    rows.append(
        row(
            "Q4_0-like `d` (FLOAT16, 18-byte stride, 64 MiB): view creation",
            best_of(lambda: v["d"]),
            "numpy copy of buffer",
            copy,
            ">= 0.5",
        )
    )
    rows.append(
        row(
            "Q4_0-like `d`: view + np.ascontiguousarray",
            best_of(lambda: np.ascontiguousarray(v["d"])),
            "numpy copy of buffer",
            copy,
            ">= 0.5",
        )
    )


def bench_int4(rows: list[str]) -> None:
    n = 128 * MIB  # 64 MiB of nibbles
    root = S.make_array(TensorProto.INT4, n)
    buffer = RNG.integers(0, 256, n // 2, dtype=np.uint8)
    v = view_buffer(buffer, root)
    got = v[""]
    assert np.array_equal(got[:1000].view(np.uint8), np.stack([buffer[:500] & 15, buffer[:500] >> 4], 1).reshape(-1))
    copy = best_of(buffer.copy)
    rows.append(
        row("INT4 leaf (64 MiB payload) materialized", best_of(lambda: v[""]), "numpy copy of buffer", copy, ">= 0.25")
    )
    leaves = {"": got}
    rows.append(row("pack of the INT4 leaf", best_of(lambda: S.pack(leaves, root), 3), "numpy copy of buffer", copy))


SIX_BIT = ("a", "b", "c")


def six_bit_layout(n: int):
    return S.make_bit_packing([("p", 3), ("a", 6), ("b", 6), ("c", 6), ("q", 3)], n)


def numpy_reference(buffer: np.ndarray) -> dict[str, np.ndarray]:
    records = buffer.reshape(-1, 3).astype(np.uint32)
    value = records[:, 0] | (records[:, 1] << 8) | (records[:, 2] << 16)
    return {name: ((value >> shift) & 63).astype(np.uint8) for name, shift in zip(SIX_BIT, (3, 9, 15), strict=True)}


def bench_six_bit(rows: list[str]) -> None:
    import bitstruct
    import construct as c

    try:
        import bitstruct.c as bitstruct_c  # the C implementation, when built
    except ImportError:
        bitstruct_c = None

    n = 16 * MIB // 3
    root = six_bit_layout(n)
    buffer = RNG.integers(0, 256, n * 3, dtype=np.uint8)
    v = view_buffer(buffer, root)

    def ours():
        return {name: v[name] for name in SIX_BIT}

    reference = numpy_reference(buffer)
    mine = ours()
    assert all(np.array_equal(mine[k], reference[k]) for k in SIX_BIT)
    t_ours = best_of(ours, 3)
    rows.append(
        row(
            "6-bit components a, b, c at bits 3/9/15 (16 MiB)",
            t_ours,
            "straightforward numpy",
            best_of(lambda: numpy_reference(buffer), 3),
        )
    )

    # construct / bitstruct on the first 10,000 records: LSB-first little-endian records are the
    # MSB-first fields of the byte-reversed record (q, c, b, a, p from the top).
    subset = 10_000
    record = c.ByteSwapped(
        c.BitStruct(
            "q" / c.BitsInteger(3),
            "c" / c.BitsInteger(6),
            "b" / c.BitsInteger(6),
            "a" / c.BitsInteger(6),
            "p" / c.BitsInteger(3),
        )
    )
    parser = c.Array(subset, record).compile()
    data = buffer[: subset * 3].tobytes()
    parsed = parser.parse(data)
    assert [r.a for r in parsed] == mine["a"][:subset].tolist() and [r.c for r in parsed] == mine["c"][:subset].tolist()
    per_record_ours = t_ours / n
    t_construct = best_of(lambda: parser.parse(data), 3) / subset
    rows.append(
        row(
            "  same, time per 1e6 records (ours measured on all records)",
            per_record_ours * 1e6,
            "construct (compiled), extrapolated from 10,000",
            t_construct * 1e6,
        )
    )

    for label, module in (("bitstruct.c", bitstruct_c), ("bitstruct", bitstruct)):
        if module is None:
            continue
        compiled = module.compile("u3u6u6u6u3")
        swapped = [data[i : i + 3][::-1] for i in range(0, len(data), 3)]
        unpacked = [compiled.unpack(r) for r in swapped]
        assert [u[3] for u in unpacked] == mine["a"][:subset].tolist()
        t_peer = best_of(lambda compiled=compiled, swapped=swapped: [compiled.unpack(r) for r in swapped], 3) / subset
        rows.append(
            row(
                "  same, time per 1e6 records (ours measured on all records)",
                per_record_ours * 1e6,
                f"{label}, extrapolated from 10,000",
                t_peer * 1e6,
            )
        )

    copy = best_of(buffer.copy)
    leaves = dict(mine)
    rows.append(
        row(
            "pack of the 6-bit components (16 MiB)",
            best_of(lambda: S.pack(leaves, root, fill_missing=True), 3),
            "numpy copy of buffer",
            copy,
        )
    )


def bench_model_view(rows: list[str]) -> None:
    n = 64 * MIB // 18
    types = [
        S.make_structure(
            [S.make_field("d", TensorProto.FLOAT16), S.make_field("qs", S.make_tensor_type(TensorProto.UINT8, [16]))]
        ),
        S.make_array(S.make_type_reference(0), n),
    ]
    buffer = RNG.integers(0, 256, n * 18, dtype=np.uint8)
    payload = buffer.tobytes()
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    S.add_struct_types(model, *types)
    S.add_struct_values(model, S.make_struct_value("w", 1, raw_data=payload))
    expected = buffer.reshape(n, 18)[:, :2].copy().view(np.uint16).reshape(n)
    assert np.array_equal(np.ascontiguousarray(S.view("w", model)["d"]).view(np.uint16), expected)

    def struct_parts():
        return np.ascontiguousarray(S.view("w", model)["d"])

    def whole_parse():  # load_model parses the whole model, as every load did before
        return np.ascontiguousarray(S.view("w", S.load_model(model))["d"])

    copy = best_of(buffer.copy)
    ours = best_of(struct_parts)
    rows.append(
        row(
            "view + materialize `d` of a 64 MiB inline value of an onnx.ModelProto", ours, "numpy copy", copy, ">= 0.33"
        )
    )
    rows.append(row("  same, through a whole-model parse", best_of(whole_parse, 3), "numpy copy", copy))
    floor = best_of(lambda: UnknownFieldSet(model.graph))
    rows.append(row("  floor: UnknownFieldSet(model.graph), the one copy protobuf makes", floor, "numpy copy", copy))
    print(
        f"view + materialize from an onnx.ModelProto: {ours / copy:.2f}x a numpy copy of 64 MiB (goal <= 3); "
        f"of which UnknownFieldSet's copy {floor / copy:.2f}x"
    )


def main() -> int:
    rows = [
        "| operation | ours | peer | peer time | peer / ours | goal |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    bench_float16(rows)
    bench_int4(rows)
    bench_six_bit(rows)
    bench_model_view(rows)
    print("\n".join(rows))
    print(
        "\nRatios are peer time / our time in this run (higher is better for us). construct and bitstruct "
        "run one Python call per record: they were timed on the first 10,000 records and scaled to 1e6."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
