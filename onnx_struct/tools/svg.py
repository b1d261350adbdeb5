"""An SVG packet diagram of one declaration's bit layout (``onnx-struct inspect --svg``).

Bits are drawn in payload order: left to right, rows of up to 32 bits, bit 0 of each byte first
(the proposal's LSB-first rule), so a field crossing a byte boundary stays one contiguous run.
Each leaf element is a coloured box spanning its bits, labelled when the label fits; thick lines
mark byte boundaries; a legend lists every leaf (and each constant, which takes no bits). An
array or multi-record bit packing at the root is drawn as one element with its repeat count.
"""

from __future__ import annotations

import html

import numpy as np

from onnx_struct.errors import ValidationError
from onnx_struct.layout import dtypes
from onnx_struct.layout.bits import bit_positions
from onnx_struct.layout.table import Leaf, TypeTable, read_constant
from onnx_struct.limits import MAX_SVG_ROWS
from onnx_struct.schema.model import StructTypeProto, load
from onnx_struct.tools.describe import _preview, tensor_label

BIT = 22  # px per bit
ROW = 40  # px per row
LEFT = 96  # row labels
TOP = 96  # title, subtitle, byte and bit headers
FONT = 11
CHAR = FONT * 0.62  # monospace advance, for fitting labels
PALETTE = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd"]

__all__ = ["layout_svg", "declaration_svg"]


def layout_svg(model, type_ref: str | int) -> str:
    """SVG of ``struct_types[type_ref]`` (an index, or a declaration name) of ``model``."""
    loaded = load(model)
    table = TypeTable(loaded.struct_types)
    index = _find(loaded.struct_types, type_ref)
    declaration = loaded.struct_types[index]
    title = f"struct_types[{index}]" + (f" '{declaration.name}'" if declaration.name else "")
    return declaration_svg(declaration, table, title)


def _find(declarations, type_ref: str | int) -> int:
    if isinstance(type_ref, int) or (isinstance(type_ref, str) and type_ref.isdigit()):
        index = int(type_ref)
        if not 0 <= index < len(declarations):
            raise ValidationError(
                "--type",
                f"type index {index} is out of range ({len(declarations)} struct_types)",
                code="unknown_type_index",
                index=index,
            )
        return index
    for i, declaration in enumerate(declarations):
        if declaration.name == type_ref:
            return i
    names = ", ".join(repr(d.name) for d in declarations if d.name) or "none"
    raise ValidationError("--type", f"no declaration named {type_ref!r} (named declarations: {names})")


def declaration_svg(declaration: StructTypeProto, table: TypeTable, title: str) -> str:
    """SVG of one concrete declaration whose references point into ``table``."""
    path = "struct_type"
    total = table.size(declaration, path)
    leaves = table.leaves(declaration, path)
    kind = declaration.WhichOneof("kind")
    repeat = None
    size = total
    if kind in ("array", "bit_packing"):  # draw one element / record
        repeat = declaration.array.dimension if kind == "array" else declaration.bit_packing.dimension
        size = total // repeat if repeat else 0
        leaves = tuple(_first_of_outer(leaf) for leaf in leaves)
    subtitle = f"{_size_text(total)}"
    if repeat is not None:
        what = "element" if kind == "array" else "record"
        subtitle = f"one {what} of {size} bits shown; {kind} repeats it x{repeat} ({_size_text(total)})"
    return _render(leaves, size, title, subtitle)


def _first_of_outer(leaf: Leaf) -> Leaf:
    if leaf.kind == "constant" or not leaf.shape:
        return leaf
    return Leaf(leaf.path, leaf.kind, leaf.elem_type, leaf.bit_width, leaf.dtype, leaf.shape[1:], leaf.strides[1:],
                leaf.bit_offset, leaf.source, leaf.constant)  # fmt: skip


def _size_text(bits: int) -> str:
    return f"{bits} bits = {bits // 8} bytes" if bits % 8 == 0 else f"{bits} bits"


def _render(leaves: tuple[Leaf, ...], size: int, title: str, subtitle: str) -> str:
    per_row = min(32, max(8, -(-size // 8) * 8))
    rows = max(1, -(-size // per_row))
    drawn_rows = min(rows, MAX_SVG_ROWS)
    drawn_bits = min(size, drawn_rows * per_row)
    width = LEFT + per_row * BIT + 24
    parts: list[str] = []
    add = parts.append

    # legend entries first, to know the height
    legend: list[tuple[str, str]] = []
    colors: dict[str, str] = {}
    for leaf in leaves:
        if leaf.kind == "constant":
            value = _constant_text(leaf)
            legend.append(
                (
                    "none",
                    f"{leaf.path or '(root)'}: constant {tensor_label(leaf.elem_type, leaf.shape)} = {value} (no payload bits)",
                )
            )
            continue
        color = PALETTE[len(colors) % len(PALETTE)]
        colors[leaf.path] = color
        kind = f"{leaf.bit_width}-bit component" if leaf.kind == "component" else dtypes.type_name(leaf.elem_type)
        if leaf.shape:
            shape = f"[{', '.join(map(str, leaf.shape))}]"
            text = f"{kind} {shape} ({leaf.bit_width} bits each), first at bit {leaf.bit_offset}"
        else:
            text = f"{kind} ({leaf.bit_width} bits) at bit {leaf.bit_offset}"
        legend.append((color, f"{leaf.path or '(root)'}: {text}"))
    notes = []
    if rows > drawn_rows:
        notes.append(f"... {size - drawn_bits} more bits not drawn")
    legend_top = TOP + drawn_rows * ROW + 28
    height = legend_top + 20 * (len(legend) + len(notes)) + 16

    add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="{FONT}">')  # fmt: skip
    add(f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>')
    add(f'<text x="12" y="22" font-size="15" font-weight="bold">{_esc(title)}</text>')
    add(f'<text x="12" y="40" fill="#444">{_esc(subtitle)}</text>')
    add('<text x="12" y="56" fill="#666">bits left to right in payload order: bit 0 (LSB) of each byte first</text>')

    # byte headers and bit numbers
    for byte in range(per_row // 8):
        x = LEFT + byte * 8 * BIT
        add(f'<text x="{x + 4 * BIT}" y="{TOP - 22}" text-anchor="middle" fill="#333">byte +{byte}</text>')
    for bit in range(per_row):
        x = LEFT + bit * BIT + BIT / 2
        add(f'<text x="{x}" y="{TOP - 6}" text-anchor="middle" fill="#888" font-size="9">{bit % 8}</text>')

    # grid: bit cells, byte boundaries, row labels, unused tail
    for row in range(drawn_rows):
        y = TOP + row * ROW
        first = row * per_row
        add(f'<text x="{LEFT - 8}" y="{y + ROW / 2 - 2}" text-anchor="end" fill="#333">bit {first}</text>')
        add(
            f'<text x="{LEFT - 8}" y="{y + ROW / 2 + 11}" text-anchor="end" fill="#888" font-size="9">byte {first // 8}</text>'
        )
        used = min(per_row, drawn_bits - first)
        if used < per_row:
            add(
                f'<rect x="{LEFT + used * BIT}" y="{y}" width="{(per_row - used) * BIT}" height="{ROW}" fill="#f2f2f2"/>'
            )
        for bit in range(per_row + 1):  # bit cells; boxes drawn later cover them
            x = LEFT + bit * BIT
            add(f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + ROW}" stroke="#ccc" stroke-width="0.5"/>')
        add(f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + per_row * BIT}" y2="{y}" stroke="#222" stroke-width="1.5"/>')
    y_end = TOP + drawn_rows * ROW
    add(f'<line x1="{LEFT}" y1="{y_end}" x2="{LEFT + per_row * BIT}" y2="{y_end}" stroke="#222" stroke-width="1.5"/>')

    # element boxes
    for leaf in leaves:
        if leaf.kind == "constant" or leaf.count == 0 or leaf.bit_offset >= drawn_bits:
            continue
        # Elements start at increasing bits in index order, each at least one bit after the one
        # before, so only the first ``drawn_bits`` can be visible: the declaration's size, which
        # no payload bounds here, never sizes an allocation.
        count = min(leaf.count, drawn_bits)
        starts = bit_positions(leaf.bit_offset, leaf.shape, leaf.strides, 0, count)
        if leaf.shape:
            indices = np.stack(np.unravel_index(np.arange(count), leaf.shape), axis=-1)
        else:
            indices = np.zeros((1, 0), dtype=np.int64)
        for start, index in zip(starts.tolist(), indices.tolist(), strict=True):
            if not 0 <= start < drawn_bits:  # int64 positions past 2**63 wrap to negative
                continue
            label = (
                leaf.path + "".join(f"[{i}]" for i in index) if leaf.path or index else dtypes.type_name(leaf.elem_type)
            )
            short = "".join(f"[{i}]" for i in index) or label
            _element(add, start, min(start + leaf.bit_width, drawn_bits), per_row, colors[leaf.path], label, short)

    # byte boundaries: ticks at the top and bottom of every row, over the boxes but clear of labels
    for row in range(drawn_rows):
        y = TOP + row * ROW
        for byte in range(per_row // 8 + 1):
            x = LEFT + byte * 8 * BIT
            add(f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + 9}" stroke="#222" stroke-width="2"/>')
            add(f'<line x1="{x}" y1="{y + ROW - 9}" x2="{x}" y2="{y + ROW}" stroke="#222" stroke-width="2"/>')
    add(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{y_end}" stroke="#222" stroke-width="2"/>')
    add(
        f'<line x1="{LEFT + per_row * BIT}" y1="{TOP}" x2="{LEFT + per_row * BIT}" y2="{y_end}" stroke="#222" stroke-width="2"/>'
    )

    # legend
    for i, (color, text) in enumerate(legend):
        y = legend_top + 20 * i
        if color == "none":
            add(f'<rect x="14" y="{y - 10}" width="14" height="14" fill="white" stroke="#888" stroke-dasharray="2,2"/>')
        else:
            add(f'<rect x="14" y="{y - 10}" width="14" height="14" fill="{color}" stroke="#444"/>')
        add(f'<text x="36" y="{y + 1}">{_esc(text)}</text>')
    for i, note in enumerate(notes):
        add(f'<text x="14" y="{legend_top + 20 * (len(legend) + i) + 1}" fill="#a00">{_esc(note)}</text>')
    add("</svg>")
    return "\n".join(parts) + "\n"


def _element(add, start: int, stop: int, per_row: int, color: str, label: str, short: str) -> None:
    """One element's box, split at row ends; the label goes in its widest segment if it fits."""
    segments = []
    position = start
    while position < stop:
        row, column = divmod(position, per_row)
        end = min(stop, (row + 1) * per_row)
        segments.append((row, column, end - position))
        position = end
    widest = max(range(len(segments)), key=lambda k: segments[k][2])
    for k, (row, column, bits) in enumerate(segments):
        x, y = LEFT + column * BIT, TOP + row * ROW
        add(f'<rect x="{x + 1}" y="{y + 3}" width="{bits * BIT - 2}" height="{ROW - 6}" rx="3" fill="{color}" '
            f'stroke="#333" stroke-width="0.8"/>')  # fmt: skip
        if k != widest:
            continue
        room = bits * BIT - 6
        for text in (label, short):
            if len(text) * CHAR <= room:
                add(f'<text x="{x + bits * BIT / 2}" y="{y + ROW / 2 + 4}" text-anchor="middle">{_esc(text)}</text>')
                break


def _constant_text(leaf: Leaf) -> str:
    # read_constant refuses external data (a type has no directory: nothing is read from a file)
    # and checks the data against dims before numpy allocates anything.
    try:
        return _preview(read_constant(leaf.constant, leaf.source))
    except ValidationError as error:  # shown as unknown; the checker reports unreadable constants
        return f"? ({error.reason})"


def _esc(text: str) -> str:
    return html.escape(text, quote=True)
