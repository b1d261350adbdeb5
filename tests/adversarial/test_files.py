"""File access: one resolver for every external reference, reads and writes stay in the model's
directory, no SIGBUS, non-regular files refused unopened (docs/security.md, "Files")."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from support.protowire import field

import onnx_struct as S
from adversarial.bounded import run_bounded

OPSET = [oh.make_opsetid("", 18)]
PAYLOAD = bytes(range(256)) * 8  # 2048 bytes, recognisable
SECRET = np.array([1234.5, 6789.25, 42.125, 99.5], dtype=np.float32)  # what a cwd file would leak


def _stock_model(opset=OPSET) -> onnx.ModelProto:
    return oh.make_model(oh.make_graph([], "g", [], []), opset_imports=opset)


def _external_value_model(directory: pathlib.Path, location: str, payload: bytes = PAYLOAD, **entries) -> pathlib.Path:
    """model.onnx in ``directory`` with one struct value ``w`` (UINT8[len]) stored in ``location``."""
    directory.mkdir(parents=True, exist_ok=True)
    model = _stock_model()
    external = {"location": location, "offset": 0, "length": len(payload), **entries}
    S.add_struct_values(model, S.make_struct_value("w", S.make_array(T.UINT8, len(payload)), external_data=external))
    path = directory / "model.onnx"
    onnx.save(model, path)
    return path


def _external_tensor(location: str, name: str = "c") -> onnx.TensorProto:
    tensor = onnx.TensorProto(name=name, data_type=T.FLOAT, dims=[4], data_location=T.EXTERNAL)
    tensor.external_data.add(key="location", value=location)
    return tensor


def _cwd_with_secret(tmp_path: pathlib.Path, name: str = "secret.bin") -> pathlib.Path:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / name).write_bytes(SECRET.tobytes())
    return cwd


# ---------------------------------------------------------------------- writes
@pytest.mark.slow
def test_resave_does_not_write_through_a_symlinked_data_file(tmp_path):
    """model.onnx.data -> ../victim.txt: an in-place re-save truncated and overwrote the victim."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious bytes outside the model directory")
    directory = tmp_path / "model"
    path = _external_value_model(directory, "real.data")
    (directory / "real.data").write_bytes(PAYLOAD)
    os.symlink("../victim.txt", directory / "model.onnx.data")
    out = run_bounded("S.save_with_external_data(ARG, ARG, size_threshold=0)", str(path), cpu_seconds=10)
    out.assert_validation_error("location", contains="symbolic link")
    assert victim.read_bytes() == b"precious bytes outside the model directory"
    assert (directory / "real.data").read_bytes() == PAYLOAD
    assert sorted(p.name for p in directory.iterdir()) == ["model.onnx", "model.onnx.data", "real.data"]  # no temp left


@pytest.mark.slow
def test_resave_over_a_symlink_to_its_own_payload_keeps_the_payload(tmp_path):
    """model.onnx.data -> payload.bin, the value's own file: the re-save destroyed the payload."""
    directory = tmp_path / "model"
    path = _external_value_model(directory, "model.onnx.data")
    (directory / "payload.bin").write_bytes(PAYLOAD)
    os.symlink("payload.bin", directory / "model.onnx.data")
    out = run_bounded("S.save_with_external_data(ARG, ARG, size_threshold=0)", str(path), cpu_seconds=10)
    out.assert_validation_error("location", contains="symbolic link")
    assert (directory / "payload.bin").read_bytes() == PAYLOAD
    assert S.view("w", path).buffer.tobytes() == PAYLOAD


@pytest.mark.slow
def test_resave_in_place_keeps_the_payload_it_rewrites(tmp_path):
    """The data file is both the source and the destination: every byte is read before writing."""
    path = _external_value_model(tmp_path, "model.onnx.data", offset=0)
    (tmp_path / "model.onnx.data").write_bytes(PAYLOAD)
    code = """
    S.save_with_external_data(ARG, ARG, size_threshold=0, align=4096)
    data = S.view("w", ARG).buffer.tobytes()
    assert data == bytes(range(256)) * 8, "payload changed"
    raise S.ValidationError("done", "re-saved")
    """
    run_bounded(code, str(path), cpu_seconds=10).assert_validation_error("done")
    refs = {e.key: e.value for e in S.get_struct_values(path)[0].external_data}
    assert refs == {"location": "model.onnx.data", "offset": "0", "length": str(len(PAYLOAD))}


@pytest.mark.slow
def test_save_does_not_depend_on_the_current_directory(tmp_path):
    """onnx's writer raised FileExistsError when the *current* directory held a file named like
    the data file, and resolved nothing against the model's directory."""
    model = _stock_model()
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.arange(1000, dtype=np.float32), "big"))
    S.add_struct_values(model, S.make_struct_value("w", S.make_array(T.UINT8, len(PAYLOAD)), raw_data=PAYLOAD))
    source = tmp_path / "source.onnx"
    onnx.save(model, source)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "m.onnx.data").write_bytes(b"unrelated file in the working directory")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code = """
    S.save_with_external_data(ARG[0], ARG[1], size_threshold=100)
    assert S.view("w", ARG[1]).buffer.tobytes() == bytes(range(256)) * 8
    raise S.ValidationError("done", "saved")
    """
    out = run_bounded(code, [str(source), str(out_dir / "m.onnx")], cpu_seconds=10, cwd=cwd)
    out.assert_validation_error("done")
    assert (cwd / "m.onnx.data").read_bytes() == b"unrelated file in the working directory"
    loaded = onnx.load(out_dir / "m.onnx")  # stock onnx reads the tensor back from the model's directory
    assert np.array_equal(onnx.numpy_helper.to_array(loaded.graph.initializer[0]), np.arange(1000, dtype=np.float32))


@pytest.mark.slow
def test_save_refuses_a_destination_directory_link_leaving_the_directory(tmp_path):
    """one_file_per_value names stay in the directory; a location under a symlinked
    subdirectory that leaves it is refused."""
    (tmp_path / "outside").mkdir()
    directory = tmp_path / "model"
    directory.mkdir()
    os.symlink("../outside", directory / "sub")
    model = _stock_model()
    S.add_struct_values(model, S.make_struct_value("w", S.make_array(T.UINT8, len(PAYLOAD)), raw_data=PAYLOAD))
    source = tmp_path / "source.onnx"
    onnx.save(model, source)
    code = "S.save_with_external_data(ARG[0], ARG[1], location='sub/x.data', size_threshold=0)"
    out = run_bounded(code, [str(source), str(directory / "m.onnx")], cpu_seconds=10)
    out.assert_validation_error("location", contains="not in a directory inside")
    assert not any((tmp_path / "outside").iterdir())


# ---------------------------------------------------------------------- tensors in types and graphs
def _decoder_constant_model(directory: pathlib.Path) -> pathlib.Path:
    """A decoder whose Constant node's tensor is external ('secret.bin')."""
    directory.mkdir()
    (directory / "secret.bin").write_bytes(np.zeros(4, np.float32).tobytes())
    nodes = [
        oh.make_node("Constant", [], ["k"], value=_external_tensor("secret.bin")),
        oh.make_node("Cast", ["x"], ["xf"], to=T.FLOAT),
        oh.make_node("Add", ["xf", "k"], ["y"]),
    ]
    decoder = oh.make_function("t", "dec", ["x"], ["y"], nodes, OPSET)
    model = _stock_model()
    S.add_struct_values(model, S.make_struct_value("v", S.make_array(T.UINT8, 4, decoder=decoder), raw_data=bytes(4)))
    path = directory / "m.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "code",
    [
        "S.decode('v', ARG)",
        "S.decode('v', ARG, runtime='reference')",
        "S.check_model(ARG)",
        "S.lower(ARG)",
    ],
)
def test_decoder_tensor_with_external_data_is_refused(tmp_path, code):
    """decode() resolved the decoder's external tensor against the current directory (and read
    a file outside the model's); check_model accepted it."""
    path = _decoder_constant_model(tmp_path / "model")
    out = run_bounded(code, str(path), cpu_seconds=20, cwd=_cwd_with_secret(tmp_path))
    # check_model's decoder policy and decode's resolver both refuse it, each naming the node
    out.assert_validation_error("graph.struct_initializer[0] ('v').struct_type.decoder ('dec').node[0]")
    assert "external data" in out.message or "must be inline" in out.message, out.message


@pytest.mark.slow
def test_constant_leaf_with_external_data_is_refused_by_decode(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    decoder = oh.make_function(
        "t",
        "cdec",
        ["x", "c"],
        ["y"],
        [oh.make_node("Cast", ["x"], ["xf"], to=T.FLOAT), oh.make_node("Add", ["xf", "c"], ["y"])],
        OPSET,
    )
    fields = [
        S.make_field("x", S.make_tensor_type(T.UINT8, [4])),
        S.make_constant_field("c", _external_tensor("secret.bin")),
    ]
    model = _stock_model()
    S.add_struct_values(model, S.make_struct_value("w", S.make_structure(fields, decoder=decoder), raw_data=bytes(4)))
    onnx.save(model, directory / "m.onnx")
    out = run_bounded("S.decode('w', ARG)", str(directory / "m.onnx"), cpu_seconds=20, cwd=_cwd_with_secret(tmp_path))
    out.assert_validation_error(
        "graph.struct_initializer[0] ('w').structure.field[1] ('c')", contains="external data is not allowed"
    )


@pytest.mark.slow
def test_inspect_svg_does_not_read_the_current_directory(tmp_path):
    """--svg previewed a constant's value with numpy_helper.to_array, which read an external
    constant from the working directory and embedded its bytes in the SVG."""
    directory = tmp_path / "model"
    directory.mkdir()
    fields = [S.make_field("x", T.UINT8), S.make_constant_field("c", _external_tensor("secret.bin"))]
    model = _stock_model()
    S.add_struct_types(model, S.make_structure(fields, name="T"))
    onnx.save(model, directory / "m.onnx")
    svg = tmp_path / "out.svg"
    code = """
    import contextlib, io
    from onnx_struct.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["inspect", ARG[0], "--svg", ARG[1], "--type", "T"])
    raise S.ValidationError("exit", str(code))
    """
    out = run_bounded(code, [str(directory / "m.onnx"), str(svg)], cpu_seconds=10, cwd=_cwd_with_secret(tmp_path))
    out.assert_validation_error("exit", contains="0")
    text = svg.read_text()
    assert "c: constant" in text and "external data is not allowed" in text
    assert "1234.5" not in text and "6789" not in text


@pytest.mark.slow
def test_model_function_tensor_leaving_the_directory_is_refused(tmp_path):
    """Location rules apply to tensors in model functions and node attributes, not only to the
    main graph's initializers."""
    (tmp_path / "secret.bin").write_bytes(SECRET.tobytes())
    directory = tmp_path / "model"
    directory.mkdir()
    os.symlink("../secret.bin", directory / "link.bin")
    function = oh.make_function(
        "local", "f", [], ["y"], [oh.make_node("Constant", [], ["y"], value=_external_tensor("link.bin"))], OPSET
    )
    graph = oh.make_graph(
        [oh.make_node("f", [], ["out"], domain="local")], "g", [], [oh.make_tensor_value_info("out", T.FLOAT, [4])]
    )
    model = oh.make_model(graph, opset_imports=[*OPSET, oh.make_opsetid("local", 1)], functions=[function])
    S.add_struct_values(model, S.make_struct_value("w", S.make_array(T.UINT8, 4), raw_data=bytes(4)))
    onnx.save(model, directory / "m.onnx")
    out = run_bounded("S.check_model(ARG)", str(directory / "m.onnx"), cpu_seconds=10)
    out.assert_validation_error(
        "functions[0].node[0].attribute[0].t.external_data", contains="outside the model directory"
    )


@pytest.mark.slow
def test_subgraph_initializer_with_dotdot_location_is_refused(tmp_path):
    branch = oh.make_graph(
        [oh.make_node("Identity", ["c"], ["y"])],
        "then",
        [],
        [oh.make_tensor_value_info("y", T.FLOAT, [4])],
        initializer=[_external_tensor("../secret.bin")],
    )
    graph = oh.make_graph(
        [oh.make_node("If", ["cond"], ["out"], then_branch=branch, else_branch=branch)],
        "g",
        [oh.make_tensor_value_info("cond", T.BOOL, [])],
        [oh.make_tensor_value_info("out", T.FLOAT, [4])],
    )
    model = oh.make_model(graph, opset_imports=OPSET)
    S.add_struct_values(model, S.make_struct_value("w", S.make_array(T.UINT8, 4), raw_data=bytes(4)))
    onnx.save(model, tmp_path / "m.onnx")
    out = run_bounded("S.check_model(ARG)", str(tmp_path / "m.onnx"), cpu_seconds=10)
    out.assert_validation_error("graph.node[0].attribute[", contains="contains '..'")


@pytest.mark.slow
def test_external_initializer_spelled_longer_than_needed_is_still_checked(tmp_path):
    """data_location = EXTERNAL in a longer varint form (0x81 0x00), with three dims packed (one
    byte shorter than protobuf writes them): the model's bytes are exactly as long as their
    canonical form and hold no canonical 0x70 0x01, yet protobuf reads the tensor as external."""

    location = field(1, b"location") + field(2, b"../secret.bin")  # StringStringEntryProto
    # TensorProto: dims = 1 (packed), data_type = 2, name = 8, external_data = 13, data_location = 14
    tensor = field(1, bytes([1, 2, 3])) + bytes([2 << 3, T.FLOAT]) + field(8, b"c") + field(13, location)
    tensor += bytes([14 << 3, 0x80 | T.EXTERNAL, 0x00])
    graph = oh.make_graph(
        [oh.make_node("Identity", ["c"], ["y"])], "g", [], [oh.make_tensor_value_info("y", T.FLOAT, [1, 2, 3])]
    )
    model = oh.make_model(oh.make_graph([], "g", [], []), opset_imports=OPSET)
    model.ClearField("graph")
    data = model.SerializeToString() + field(7, graph.SerializeToString() + field(5, tensor))
    # A struct model (one declaration): onnx_struct's location rules apply (a plain model is stock's).
    data += field(27, S.make_array(T.UINT8, 4).SerializeToString())
    parsed = onnx.ModelProto.FromString(data)
    assert parsed.graph.initializer[0].data_location == T.EXTERNAL and parsed.ByteSize() == len(data)
    (tmp_path / "m.onnx").write_bytes(data)
    out = run_bounded("S.check_model(ARG)", str(tmp_path / "m.onnx"), cpu_seconds=10)
    out.assert_validation_error("graph.initializer[0] ('c').external_data", contains="contains '..'")


# ---------------------------------------------------------------------- reads
@pytest.mark.slow
def test_truncated_external_payload_is_a_validation_error_not_sigbus(tmp_path):
    """A memory-mapped payload whose file shrank after the check killed the interpreter (SIGBUS)."""
    payload = bytes(range(256)) * 256  # 64 KiB: many pages
    path = _external_value_model(tmp_path, "w.bin", payload)
    (tmp_path / "w.bin").write_bytes(payload)
    code = """
    import os
    v = S.view("w", ARG)
    os.truncate(os.path.join(os.path.dirname(ARG), "w.bin"), 0)
    v[""].sum()
    """
    out = run_bounded(code, str(path), cpu_seconds=10, memory_mib=200)
    assert out.returncode == 0  # not killed by a signal
    out.assert_validation_error("graph.struct_initializer[0] ('w').external_data", contains="changed after the check")


@pytest.mark.slow
def test_external_payload_that_is_a_fifo_is_refused_unopened(tmp_path):
    path = _external_value_model(tmp_path, "w.bin")
    os.mkfifo(tmp_path / "w.bin")
    out = run_bounded("S.view('w', ARG)['']", str(path), cpu_seconds=10)
    out.assert_validation_error("graph.struct_initializer[0] ('w').external_data", contains="FIFO")


@pytest.mark.slow
def test_external_initializer_that_is_a_fifo_is_refused_when_saving(tmp_path):
    """Stock tensors are read through the same resolver (onnx's loader would block on a FIFO)."""
    model = _stock_model()
    tensor = _external_tensor("t.bin", "t")
    model.graph.initializer.append(tensor)
    onnx.save(model, tmp_path / "m.onnx")
    os.mkfifo(tmp_path / "t.bin")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code = "S.save_with_external_data(ARG[0], ARG[1])"
    out = run_bounded(code, [str(tmp_path / "m.onnx"), str(out_dir / "m.onnx")], cpu_seconds=10)
    out.assert_validation_error("graph.initializer[0] ('t').external_data", contains="FIFO")


@pytest.mark.slow
@pytest.mark.parametrize(
    "code",
    [
        "S.check_model(ARG)",
        "S.view('w', ARG)",
        "S.decode('w', ARG)",
        "S.lower(ARG)",
        # inspect reports the entry's error (path first) in its description instead of raising
        "from onnx_struct.tools.describe import describe\n"
        "raise S.ValidationError(*describe(ARG)['struct_values'][0]['location']['error'].split(': ', 1))",
    ],
)
@pytest.mark.parametrize("key", ["offset", "length"])
def test_offset_or_length_with_very_many_digits(tmp_path, code, key):
    """int() of a 5,000-digit string raised ValueError (Python's digit limit) everywhere."""
    directory = tmp_path / "model"
    path = _external_value_model(directory, "w.bin", **{key: "1" * 5000})
    (directory / "w.bin").write_bytes(PAYLOAD)
    index = {"offset": 1, "length": 2}[key]
    value = "graph.struct_initializer[0] ('w')"  # one resolver: decode reports the checker's path too
    out = run_bounded(code, str(path), cpu_seconds=10)
    out.assert_validation_error(f"{value}.external_data[{index}] ('{key}')", contains="at most 20 digits")


# ---------------------------------------------------------------------- the model path
_SUBCOMMANDS = {
    "check": ["check", "{fifo}"],
    "check --full": ["check", "--full", "{fifo}"],
    "inspect": ["inspect", "{fifo}"],
    "inspect --svg": ["inspect", "{fifo}", "--svg", "{out}.svg", "--type", "0"],
    "decode": ["decode", "{fifo}", "w", "-o", "{out}.npy"],
    "lower": ["lower", "{fifo}", "{out}.onnx"],
    "quantize": ["quantize", "{fifo}", "{out}.onnx", "--format", "Q4_0"],
    "from-gguf": ["from-gguf", "{fifo}", "{out}.onnx"],
    "generate": ["generate", "{fifo}", "--prompt", "hi"],
}


@pytest.mark.slow
@pytest.mark.parametrize("command", list(_SUBCOMMANDS))
def test_every_subcommand_refuses_a_fifo_as_the_model_path(tmp_path, command):
    """Every subcommand blocked forever opening a FIFO given as the model path."""
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    argv = [part.format(fifo=fifo, out=tmp_path / "out") for part in _SUBCOMMANDS[command]]
    code = """
    import contextlib, io
    from onnx_struct.cli import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(ARG)
    raise S.ValidationError("exit", f"{code}|{err.getvalue()}")
    """
    out = run_bounded(code, argv, cpu_seconds=10)
    out.assert_validation_error("exit", contains="FIFO")
    exit_code, _, stderr = out.message.removeprefix("exit: ").partition("|")
    assert exit_code in ("1", "2")
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert not list(tmp_path.glob("out*"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_public_api_refuses_a_non_regular_model_path(tmp_path, kind):
    target = tmp_path / "model.onnx"
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    out = run_bounded("S.view('w', ARG)", str(target), cpu_seconds=10)
    out.assert_validation_error("", contains={"fifo": "is a FIFO", "directory": "is a directory"}[kind])


@pytest.mark.slow
@pytest.mark.parametrize("location", ["w.bin/", "w.bin\\", "w.bin/.", "w.bin\\."])
def test_a_location_naming_a_directory_is_refused(tmp_path, location):
    """``w.bin/`` and ``w.bin/.`` named the file ``w.bin`` for pathlib (which drops a trailing
    separator or '.'), so the checker accepted them and read ``w.bin``; the OS, onnx and
    onnxruntime find no file there."""
    path = _external_value_model(tmp_path, location)
    (tmp_path / "w.bin").write_bytes(PAYLOAD)
    out = run_bounded("S.check_model(ARG)", str(path), cpu_seconds=10)
    out.assert_validation_error("graph.struct_initializer[0] ('w').external_data", contains="names a directory")


# ---------------------------------------------------------------------- hard links
def _hard_link_outside(directory: pathlib.Path, name: str, content: bytes) -> pathlib.Path:
    """``directory/name`` as a second link to a file outside ``directory``: no path rule sees it."""
    outside = directory.parent / f"outside-{name}"
    outside.write_bytes(content)
    os.link(outside, directory / name)
    return outside


@pytest.mark.slow
def test_struct_payload_with_a_second_hard_link_is_refused(tmp_path):
    """onnx refuses external data with more than one link; a path rule cannot tell such a file
    from one inside the directory, so the checker accepted it and view read it."""
    directory = tmp_path / "model"
    path = _external_value_model(directory, "w.bin")
    _hard_link_outside(directory, "w.bin", PAYLOAD)
    for code in ("S.check_model(ARG)", "S.view('w', ARG)['']"):
        out = run_bounded(code, str(path), cpu_seconds=10)
        out.assert_validation_error("graph.struct_initializer[0] ('w').external_data", contains="2 hard links")


@pytest.mark.slow
@pytest.mark.parametrize("where", ["initializer", "function"])
def test_stock_tensor_with_a_second_hard_link_is_refused(tmp_path, where):
    """A main-graph initializer reaches onnx's checker as a graph input and a function's Constant
    as a stand-in file, so onnx's own hard-link rule never saw them; ours applies to both."""
    directory = tmp_path / "model"
    directory.mkdir()
    _hard_link_outside(directory, "t.bin", SECRET.tobytes())
    tensor = _external_tensor("t.bin")
    if where == "initializer":
        graph = oh.make_graph(
            [oh.make_node("Identity", ["c"], ["y"])], "g", [], [oh.make_tensor_value_info("y", T.FLOAT, [4])], [tensor]
        )
        model, expected = oh.make_model(graph, opset_imports=OPSET), "graph.initializer[0] ('c').external_data"
    else:
        function = oh.make_function("local", "f", [], ["y"], [oh.make_node("Constant", [], ["y"], value=tensor)], OPSET)
        graph = oh.make_graph(
            [oh.make_node("f", [], ["y"], domain="local")], "g", [], [oh.make_tensor_value_info("y", T.FLOAT, [4])]
        )
        model = oh.make_model(graph, opset_imports=[*OPSET, oh.make_opsetid("local", 1)], functions=[function])
        expected = "functions[0].node[0].attribute[0].t.external_data"
    S.add_struct_values(model, S.make_struct_value("w", S.make_array(T.UINT8, 4), raw_data=bytes(4)))
    onnx.save(model, directory / "m.onnx")
    out = run_bounded("S.check_model(ARG)", str(directory / "m.onnx"), cpu_seconds=10)
    out.assert_validation_error(expected, contains="hard links")


@pytest.mark.slow
def test_hard_link_made_after_the_check_is_refused_at_the_read(tmp_path):
    """The opened file is checked again, as for a file that shrank: a link made between the check
    and the read is refused there."""
    path = _external_value_model(tmp_path / "model", "w.bin")
    (tmp_path / "model" / "w.bin").write_bytes(PAYLOAD)
    code = """
    import os
    v = S.view("w", ARG)
    os.link(os.path.join(os.path.dirname(ARG), "w.bin"), os.path.join(os.path.dirname(ARG), "..", "later"))
    v[""].sum()
    """
    out = run_bounded(code, str(path), cpu_seconds=10)
    out.assert_validation_error("graph.struct_initializer[0] ('w').external_data", contains="2 hard links")


def test_a_model_file_the_caller_names_may_have_hard_links(tmp_path):
    """The rule is for files a model names; the caller's own model file is the caller's choice
    (onnx.load reads a hard-linked model file too)."""
    directory = tmp_path / "model"
    path = _external_value_model(directory, "w.bin")
    (directory / "w.bin").write_bytes(PAYLOAD)
    os.link(path, tmp_path / "second-name.onnx")
    onnx.load(path)  # the oracle: onnx reads it
    S.check_model(path)
    assert S.view("w", path).buffer.tobytes() == PAYLOAD
