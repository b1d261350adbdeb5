"""inspect: the layout description (hand-computed offsets), the text tree, JSON, the CLI, and the
SVG diagram (geometry of the boxes, and the examples in docs/ kept up to date).

Regenerate the docs examples with ``python tests/test_inspect.py``.
"""

from __future__ import annotations

import json
import pathlib
import sys
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T

import onnx_struct as S
from onnx_struct.cli import main
from onnx_struct.layout.table import TypeTable
from onnx_struct.limits import MAX_SVG_ROWS as MAX_ROWS
from onnx_struct.tools.describe import describe, describe_declaration, format_text
from onnx_struct.tools.svg import BIT, LEFT, ROW, TOP, layout_svg

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
SVG_NS = "{http://www.w3.org/2000/svg}"


def build_model() -> onnx.ModelProto:
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    S.add_struct_types(
        model,
        S.make_structure(
            [
                S.make_field("values", S.make_tensor_type(T.INT4, [128])),
                S.make_constant_field("scale", np.float32(0.125)),
                S.make_constant_field("zero_point", np.int64(0)),
            ],
            name="LINEAR_INT4_128",
        ),  # 0
        S.make_structure(
            [S.make_field("d", T.FLOAT16), S.make_field("qs", S.make_tensor_type(T.UINT8, [16]))], name="Q4_0"
        ),  # 1
        S.make_array(S.make_type_reference(1), 100, name="Q4_0x100"),  # 2
        S.make_bit_packing([("a", 3), ("b", 5), ("c", 6)], 4, name="BITS"),  # 3: 56 bits
        S.make_structure(
            [
                S.make_field("lead", S.make_type_reference(5)),
                S.make_field("h", T.FLOAT16),
                S.make_field("hdr", S.make_type_reference(3)),
                S.make_field("tail", S.make_type_reference(5)),
            ],
            name="MIXED",
        ),  # 4: 4 + 16 + 56 + 4 = 80 bits
        S.make_bit_packing([("p", 4)], 1),  # 5
    )
    S.add_struct_values(
        model,
        S.make_struct_value("weight", 0, raw_data=bytes(64)),
        S.make_struct_value("blocks", 2, external_data={"location": "w.bin", "offset": 4096, "length": 1800}),
        S.make_struct_value("inline", S.make_array(T.FLOAT16, 3), raw_data=bytes(6)),
    )
    return model


def nodes_by_name(tree) -> dict[str, dict]:
    out = {}

    def walk(node, prefix):
        for child in node.get("children", []):
            name = f"{prefix}.{child['name']}" if prefix and child["name"] else child["name"] or prefix
            out[name] = child
            walk(child, name if child["kind"] != "reference" else name)

    walk(tree, "")
    return out


# ---------------------------------------------------------------------- description
def test_offsets_and_sizes_are_the_hand_computed_ones():
    description = describe(build_model())
    types = description["struct_types"]
    assert [t["size_bits"] for t in types] == [512, 144, 14400, 56, 80, 4]
    mixed = nodes_by_name(types[4]["tree"])
    # lead: 4 bits at 0; h: FLOAT16 at 4; hdr: 4 records of 14 bits at 20 (a at 20, b at 23, c at 28)
    assert (mixed["lead"]["bit_offset"], mixed["lead"]["size_bits"]) == (0, 4)
    assert (mixed["h"]["bit_offset"], mixed["h"]["size_bits"], mixed["h"]["type"]) == (4, 16, "FLOAT16")
    assert (mixed["hdr"]["bit_offset"], mixed["hdr"]["size_bits"]) == (20, 56)
    assert [(mixed[f"hdr.{c}"]["bit_offset"], mixed[f"hdr.{c}"]["size_bits"]) for c in "abc"] == [
        (20, 3),
        (23, 5),
        (28, 6),
    ]
    assert (mixed["tail"]["bit_offset"], mixed["tail"]["size_bits"]) == (76, 4)
    linear = nodes_by_name(types[0]["tree"])
    assert linear["scale"]["kind"] == "constant" and linear["scale"]["value"] == "0.125"
    assert (linear["values"]["bit_offset"], linear["values"]["size_bits"], linear["values"]["type"]) == (
        0,
        512,
        "INT4[128]",
    )
    array = types[2]["tree"]
    assert (array["kind"], array["dimension"], array["stride_bits"]) == ("array", 100, 144)


def test_values_sizes_and_locations():
    values = {v["name"]: v for v in describe(build_model())["struct_values"]}
    assert values["weight"]["location"] == {"kind": "inline", "length": 64}
    assert values["weight"]["size_bytes"] == 64 and values["weight"]["type"] == "struct_types[0] ('LINEAR_INT4_128')"
    assert values["blocks"]["location"] == {"kind": "external", "location": "w.bin", "offset": 4096, "length": 1800}
    assert values["inline"]["type"] == "inline" and values["inline"]["tree"]["dimension"] == 3
    only = describe(build_model(), "blocks")
    assert only["struct_types"] == [] and [v["name"] for v in only["struct_values"]] == ["blocks"]
    assert only["struct_values"][0]["tree"]["stride_bits"] == 144  # one value: its tree is included
    assert "tree" not in values["blocks"]  # listed with its declaration above instead
    with pytest.raises(S.ValidationError, match="no struct value named 'nope'"):
        describe(build_model(), "nope")


def test_text_tree():
    text = format_text(describe(build_model()))
    assert "struct_types[4] 'MIXED': structure, 80 bits (10 bytes)" in text
    assert "struct_types[2] 'Q4_0x100': array[100] of 144-bit elements, 14400 bits (1800 bytes)" in text
    lines = text.splitlines()
    h = next(line for line in lines if "── h " in line)
    assert "FLOAT16" in h and "@ bit 4 (byte 0.4)" in h and h.endswith("16 bits")
    assert any("scale" in line and "constant FLOAT = 0.125" in line for line in lines)
    assert "'blocks': struct_types[2] ('Q4_0x100'), 1800 bytes, external 'w.bin' offset 4096 length 1800" in text


def test_broken_declaration_is_reported_not_raised():
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    S.add_struct_types(model, S.make_array(S.make_type_reference(0), 2, name="SELF"))
    description = describe(model)
    assert "cyclic" in description["struct_types"][0]["error"]


# ---------------------------------------------------------------------- CLI
def test_cli_text_json_and_exit_codes(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(build_model(), path)
    assert main(["inspect", str(path)]) == 0
    assert "struct_types[1] 'Q4_0': structure, 144 bits (18 bytes)" in capsys.readouterr().out
    assert main(["inspect", str(path), "--json", "--value", "weight"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["struct_values"][0]["location"]["kind"] == "inline" and data["struct_types"] == []
    assert main(["inspect", str(path), "--value", "nope"]) == 2  # names nothing: a usage error
    assert "no struct value named 'nope'" in capsys.readouterr().err
    assert main(["inspect", str(path), "--svg", str(tmp_path / "x.svg")]) == 2
    assert main(["inspect", str(path), "--svg", str(tmp_path / "x.svg"), "--type", "NOPE"]) == 2
    assert "no declaration named 'NOPE'" in capsys.readouterr().err
    assert main(["inspect", str(path), "--svg", str(tmp_path / "x.svg"), "--type", "1"]) == 0
    assert (tmp_path / "x.svg").read_text().startswith("<svg")
    capsys.readouterr()
    broken = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    S.add_struct_types(broken, S.make_array(S.make_type_reference(0), 2))
    onnx.save(broken, tmp_path / "b.onnx")
    assert main(["inspect", str(tmp_path / "b.onnx"), "--json"]) == 1
    assert "cyclic" in json.loads(capsys.readouterr().out)["struct_types"][0]["error"]


# ---------------------------------------------------------------------- SVG
def boxes(svg: str) -> list[tuple[float, float, float, str]]:
    """(x, y, width, fill) of every element box (rounded rectangles)."""
    root = ET.fromstring(svg)
    return [
        (float(r.get("x")), float(r.get("y")), float(r.get("width")), r.get("fill"))
        for r in root.iter(f"{SVG_NS}rect")
        if r.get("rx")
    ]


def labels(svg: str) -> list[str]:
    return [t.text for t in ET.fromstring(svg).iter(f"{SVG_NS}text")]


def bit_of(x: float, y: float) -> int:
    return round((x - 1 - LEFT) / BIT) + 32 * round((y - 3 - TOP) / ROW)


def test_svg_box_geometry_q4_0_element_of_array():
    svg = layout_svg(build_model(), "Q4_0x100")
    drawn = boxes(svg)
    assert len(drawn) == 1 + 16  # d, qs[0..15]: one element drawn
    starts = sorted(bit_of(x, y) for x, y, _, _ in drawn)
    assert starts == [0] + [16 + 8 * i for i in range(16)]
    d = next(b for b in drawn if bit_of(b[0], b[1]) == 0)
    assert d[2] == 16 * BIT - 2
    assert "d" in labels(svg) and "qs[15]" in labels(svg)
    assert any("x100" in (text or "") for text in labels(svg))


def test_svg_split_elements_and_unaligned_fields():
    svg = layout_svg(build_model(), 4)  # MIXED
    drawn = boxes(svg)
    # h (FLOAT16) starts at bit 4; hdr.a[3] = bit 20 + 3*14 = 62 crosses the row end at 64 and
    # is drawn as two segments (2 bits + 1 bit)
    assert any(bit_of(x, y) == 4 and w == 16 * BIT - 2 for x, y, w, _ in drawn)
    assert any(bit_of(x, y) == 62 and w == 2 * BIT - 2 for x, y, w, _ in drawn)
    assert any(bit_of(x, y) == 64 and w == 1 * BIT - 2 for x, y, w, _ in drawn)
    total = sum(w + 2 for *_, w, _ in [(x, y, w, f) for x, y, w, f in drawn]) / BIT
    assert total == 80  # every bit covered exactly once
    assert "h" in labels(svg) and "tail.p[0]" in labels(svg)


def test_svg_large_declaration_is_cut_with_a_note():
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    S.add_struct_types(model, S.make_structure([S.make_field("x", S.make_tensor_type(T.UINT8, [1000]))]))
    svg = layout_svg(model, 0)
    assert len(boxes(svg)) == MAX_ROWS * 4
    assert any("more bits not drawn" in (text or "") for text in labels(svg))


def test_svg_draws_only_what_fits_however_large_the_declaration():
    # 2**40 bytes then a field at bit 2**43, and one past 2**63: only the first rows are drawn,
    # so nothing proportional to the declaration is allocated.
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    S.add_struct_types(
        model,
        S.make_structure([S.make_field("x", S.make_tensor_type(T.UINT8, [1 << 40])), S.make_field("y", T.UINT8)]),
        S.make_structure([S.make_field("x", S.make_tensor_type(T.UINT8, [1 << 60])), S.make_field("y", T.UINT8)]),
    )
    for index in (0, 1):
        svg = layout_svg(model, index)
        assert len(boxes(svg)) == MAX_ROWS * 4
        assert any("more bits not drawn" in (text or "") for text in labels(svg))


def deep_chain_model(depth: int) -> onnx.ModelProto:
    """``depth`` structures, each one field ``x`` referencing the previous one (valid, 1 byte)."""
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    types = [S.make_structure([S.make_field("x", T.UINT8)])]
    types += [S.make_structure([S.make_field("x", S.make_type_reference(i))]) for i in range(depth)]
    S.add_struct_types(model, *types)
    return model


def test_deep_nesting_is_described_and_drawn_without_recursion_errors():
    depth = 2000
    model = deep_chain_model(depth)
    table = TypeTable(model_types := S.get_struct_types(model))
    tree = describe_declaration(model_types[depth], table, TypeTable.path(depth))
    node, levels = tree, 0
    while node.get("children"):
        node, levels = node["children"][0], levels + 1
    assert node.get("truncated") and levels < 200  # expansion stops at a fixed depth
    svg = layout_svg(model, depth)
    assert len(boxes(svg)) == 1 and ".".join(["x"] * (depth + 1)) in svg


def docs_examples() -> dict[str, str]:
    model = build_model()
    return {
        "layout-linear_int4_128.svg": layout_svg(model, "LINEAR_INT4_128"),
        "layout-q4_0.svg": layout_svg(model, "Q4_0"),
    }


def test_docs_examples_are_up_to_date():
    for name, svg in docs_examples().items():
        assert (DOCS / name).read_text() == svg, f"docs/{name} is stale: run python tests/test_inspect.py"


if __name__ == "__main__":
    for name, svg in docs_examples().items():
        (DOCS / name).write_text(svg)
        print(f"wrote docs/{name}", file=sys.stderr)


def test_model_metadata_props_are_described_from_any_model_form(tmp_path):
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    onnx.helper.set_model_props(model, {"general.name": "tiny", "note": "x"})
    onnx.save(model, tmp_path / "m.onnx")
    for form in (model, model.SerializeToString(), tmp_path / "m.onnx"):
        assert describe(form)["metadata_props"] == {"general.name": "tiny", "note": "x"}
    assert "metadata_props" not in describe(build_model(), "blocks")  # one value: no model-level parts
