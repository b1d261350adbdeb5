"""The session cache (onnx_struct/runtime/session_cache.py): a second session over the same model
file and GGUF loads the kept lowered model without checking, lowering or repacking, gives the
logits of a session without a cache, and is not used once a file it was made from changed."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from support.llm import TinyLlama, greedy, prompt_feeds, read_weights, spm_vocab, write_gguf  # noqa: E402

import onnx_struct  # noqa: E402
from onnx_struct.cli import main  # noqa: E402
from onnx_struct.convert import convert  # noqa: E402
from onnx_struct.llm.generation import Generator  # noqa: E402
from onnx_struct.runtime import delivery, session_build, session_cache  # noqa: E402
from onnx_struct.runtime import session as session_module  # noqa: E402

PROMPT = [1, 17, 42, 5, 63, 9]


@pytest.fixture
def files(tmp_path):
    config = TinyLlama(**spm_vocab(), seed=7)
    write_gguf(tmp_path / "model.gguf", config)
    onnx.save(convert(tmp_path / "model.gguf", graph=True, reference=True), tmp_path / "model.onnx")
    return config, tmp_path / "model.onnx", tmp_path / "cache"


@pytest.fixture
def lowerings(monkeypatch):
    """How many times a session lowered a model (the work a cache hit skips)."""
    calls = []
    real = session_build.lower_checked

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(session_build, "lower_checked", counted)
    return calls


def entries(cache):
    return sorted(p for p in cache.iterdir() if not p.name.startswith("."))


def logits(session, config) -> np.ndarray:
    return session.run(["logits"], prompt_feeds(config, PROMPT))[0]


def callers_options():
    import onnxruntime  # noqa: PLC0415

    return onnxruntime.SessionOptions()


def test_a_hit_loads_onnxruntimes_saved_graph_and_gives_the_same_logits(files, lowerings):
    config, model, cache = files
    plain = onnx_struct.InferenceSession(model, accuracy_level=0)
    first = onnx_struct.InferenceSession(model, accuracy_level=0, cache_dir=cache)
    assert len(lowerings) == 2
    (entry,) = entries(cache)
    assert sorted(p.name for p in entry.iterdir()) == ["entry.json", "lowered.onnx", "model.data", "model.onnx"]
    second = onnx_struct.InferenceSession(model, accuracy_level=0, cache_dir=cache)
    assert len(lowerings) == 2  # the hit lowered nothing
    expected = logits(plain, config)
    np.testing.assert_array_equal(logits(first, config), expected)
    np.testing.assert_array_equal(logits(second, config), expected)
    # What onnxruntime loads is its own optimized graph (no local function left to inline, no
    # RMS norm left unfused), referencing only the entry's weights file.
    saved = onnx.load(entry / "model.onnx", load_external_data=False)
    assert not saved.functions and "SimplifiedLayerNormalization" in {n.op_type for n in saved.graph.node}
    locations = {e.value for t in saved.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"model.data"}
    # ``lowered`` is the lowered model the miss made, not onnxruntime's graph.
    assert second.lowered.graph == first.lowered.graph and second.lowered.metadata_props == plain.lowered.metadata_props


def test_with_a_callers_options_the_entry_is_the_lowered_model(files, lowerings):
    config, model, cache = files
    expected = logits(onnx_struct.InferenceSession(model, accuracy_level=0), config)
    for _ in range(2):
        session = onnx_struct.InferenceSession(model, callers_options(), accuracy_level=0, cache_dir=cache)
        np.testing.assert_array_equal(logits(session, config), expected)
    assert len(lowerings) == 2
    (entry,) = entries(cache)
    assert sorted(p.name for p in entry.iterdir()) == ["entry.json", "model.onnx", "weights.bin"]
    # The kept model references only its own weights file: nothing outside the entry.
    locations = {e.value for t in session.lowered.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"weights.bin"}


@pytest.mark.parametrize("edit", [("location", "../model.gguf"), ("location", "other.bin"), ("length", "past_end")])
def test_a_saved_graph_that_reads_outside_its_entry_is_not_published(files, tmp_path, edit):
    config, model, cache = files
    onnx_struct.InferenceSession(model, cache_dir=cache)
    (entry,) = entries(cache)
    slot_record = json.loads((entry / "entry.json").read_text())
    saved = onnx.load(entry / "model.onnx", load_external_data=False)
    outside = next(t for t in saved.graph.initializer if t.external_data)
    key, value = edit
    if value == "past_end":
        value = str((entry / "model.data").stat().st_size + 1)
    next(e for e in outside.external_data if e.key == key).value = value
    staged = tmp_path / "staged"
    staged.mkdir()
    onnx.save(saved, staged / "model.onnx")
    (staged / "model.data").write_bytes((entry / "model.data").read_bytes())
    (staged / "other.bin").write_bytes((entry / "model.data").read_bytes())  # inside, but not the weights file
    slot = session_cache.CacheSlot(cache, "another-key", slot_record["source"], slot_record["files"][0])
    assert not session_cache.publish_saved_graph(slot, str(staged), saved, [])
    assert not staged.exists() and not (cache / "another-key").exists()


def test_a_graph_onnxruntime_cannot_save_leaves_no_entry_and_the_session_works(files, monkeypatch, lowerings):
    config, model, cache = files
    real = delivery.save_graph_options

    def unwritable(ort, threads, path):  # as a full disk: onnxruntime fails to write the graph
        return real(ort, threads, os.path.join(path, "no-such-directory", "model.onnx"))

    monkeypatch.setattr(delivery, "save_graph_options", unwritable)
    session = onnx_struct.InferenceSession(model, accuracy_level=0, cache_dir=cache)
    np.testing.assert_array_equal(
        logits(session, config), logits(onnx_struct.InferenceSession(model, accuracy_level=0), config)
    )
    assert not entries(cache) and not list(cache.iterdir())


def test_a_session_that_fails_leaves_no_partial_entry(files, monkeypatch):
    config, model, cache = files

    def refused(*args, **kwargs):  # as onnxruntime refusing the lowered model
        raise MemoryError("no room for the session")

    monkeypatch.setattr(session_build, "deliver", refused)
    with pytest.raises(MemoryError):
        onnx_struct.InferenceSession(model, cache_dir=cache)
    assert list(cache.iterdir()) == []  # not even a .tmp-* directory


def test_a_model_without_a_large_tensor_is_kept_without_a_weights_file(tmp_path, lowerings):
    from onnx import TensorProto, helper  # noqa: PLC0415

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 32])
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    block = bytes([0x00, 0x3C]) + bytes([0x9A]) * 16  # Q4_0: d = 1.0; 16 weights 2.0, 16 weights 1.0
    onnx_struct.add_struct_values(model, onnx_struct.formats.get("Q4_0").make_value(model, "W", (1, 32), block))
    onnx.save(model, tmp_path / "tiny.onnx")
    feed = {"X": np.full((1, 1), 2.0, np.float32)}
    for _ in range(2):
        session = onnx_struct.InferenceSession(tmp_path / "tiny.onnx", accuracy_level=0, cache_dir=tmp_path / "cache")
        np.testing.assert_array_equal(session.run(None, feed)[0], [[4.0] * 16 + [2.0] * 16])  # 2 x the weights
    assert len(lowerings) == 1  # the second was a hit
    (entry,) = entries(tmp_path / "cache")
    assert sorted(p.name for p in entry.iterdir()) == ["entry.json", "lowered.onnx", "model.onnx"]


def test_the_machine_is_part_of_a_saved_graphs_key(files, monkeypatch, lowerings):
    config, model, cache = files
    onnx_struct.InferenceSession(model, cache_dir=cache)
    monkeypatch.setattr(session_cache, "machine", lambda: "another-cpu")
    onnx_struct.InferenceSession(model, cache_dir=cache)
    assert len(lowerings) == 2


def test_threads_reach_the_sessions_own_options(files):
    config, model, cache = files
    session = onnx_struct.InferenceSession(model, threads=1, cache_dir=cache)
    assert session.get_session_options().intra_op_num_threads == 1
    hit = onnx_struct.InferenceSession(model, threads=2, cache_dir=cache)  # the count is not in the key
    assert hit.get_session_options().intra_op_num_threads == 2
    for bad, options in ((0, None), (True, None), ("2", None), (1, callers_options())):
        with pytest.raises(onnx_struct.ValidationError) as caught:
            onnx_struct.InferenceSession(model, options, threads=bad)
        assert (caught.value.path, caught.value.code) == ("InferenceSession(threads)", "bad_argument")


def test_a_generator_over_a_hit_generates_the_float64_forwards_tokens(files, lowerings):
    config, model, cache = files
    expected = greedy(read_weights(model.parent / "model.gguf"), config, PROMPT, 8)
    for _ in range(2):
        generator = Generator(model, accuracy_level=0, cache_dir=cache)
        assert generator.generate(PROMPT, max_new_tokens=8, stop_at_eos=False).tokens == expected
    assert len(lowerings) == 1
    assert generator.tokenizer.vocab_size == config.n_vocab  # the metadata came with the kept model


def test_a_touched_gguf_is_a_miss_and_replaces_the_entry(files, lowerings):
    config, model, cache = files
    onnx_struct.InferenceSession(model, cache_dir=cache)
    (old,) = entries(cache)
    gguf = model.parent / "model.gguf"
    info = gguf.stat()
    os.utime(gguf, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))  # same bytes, another mtime
    onnx_struct.InferenceSession(model, cache_dir=cache)
    assert len(lowerings) == 2
    (new,) = entries(cache)
    assert new == old  # the same key (same model bytes), made again for the file as it is now
    record = json.loads((new / "entry.json").read_text())
    model_file, gguf_file = record["files"]  # [path looked up, file it resolved to, stat key]
    assert model_file[:2] == [str(model), str(model)] and gguf_file[:2] == [str(gguf), str(gguf)]
    assert gguf_file[2][3] == gguf.stat().st_mtime_ns


def test_a_replaced_gguf_is_refused_not_served_from_the_cache(files):
    config, model, cache = files
    onnx_struct.InferenceSession(model, cache_dir=cache)
    write_gguf(model.parent / "model.gguf", TinyLlama(**spm_vocab(), seed=8))  # same shape, other weights
    with pytest.raises(onnx_struct.ValidationError) as caught:
        onnx_struct.InferenceSession(model, cache_dir=cache)
    assert caught.value.code == "file_changed"


def test_another_model_at_the_same_path_replaces_the_entry(files, lowerings):
    config, model, cache = files
    onnx_struct.InferenceSession(model, cache_dir=cache)
    (old,) = entries(cache)
    edited = onnx.load(model)
    edited.doc_string = "edited"
    onnx.save(edited, model)
    onnx_struct.InferenceSession(model, cache_dir=cache)
    (new,) = entries(cache)
    assert new != old and len(lowerings) == 2


def test_the_settings_are_part_of_the_key(files, lowerings):
    config, model, cache = files
    onnx_struct.InferenceSession(model, cache_dir=cache)
    level_0 = onnx_struct.InferenceSession(model, accuracy_level=0, cache_dir=cache)
    assert len(lowerings) == 2
    levels = {a.i for n in level_0.lowered.graph.node if n.op_type == "MatMulNBits" for a in n.attribute
              if a.name == "accuracy_level"}  # fmt: skip
    assert levels == {0}


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no_model", "no_lowered"])
def test_a_broken_entry_is_made_again(files, lowerings, damage):
    config, model, cache = files
    expected = logits(onnx_struct.InferenceSession(model, cache_dir=cache), config)
    (entry,) = entries(cache)
    size = (entry / "model.data").stat().st_size
    if damage == "truncate":
        os.truncate(entry / "model.data", size // 2)
    elif damage == "garbage":
        (entry / "model.onnx").write_bytes(b"\x08\xff\xff" * 100)
    else:
        (entry / ("model.onnx" if damage == "no_model" else "lowered.onnx")).unlink()
    session = onnx_struct.InferenceSession(model, cache_dir=cache)
    assert len(lowerings) == 2
    np.testing.assert_array_equal(logits(session, config), expected)
    (again,) = entries(cache)
    assert (again / "model.data").stat().st_size == size


def test_the_cache_needs_the_model_as_a_path(files):
    config, model, cache = files
    with pytest.raises(onnx_struct.ValidationError) as caught:
        onnx_struct.InferenceSession(onnx.load(model), cache_dir=cache)
    assert caught.value.code == "bad_argument"
    assert "cache_dir" in caught.value.path
    assert not cache.exists()


def test_a_plain_model_is_not_cached(tmp_path):
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "g", [x], [
        onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])  # fmt: skip
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)]), tmp_path / "m.onnx")
    session = onnx_struct.InferenceSession(tmp_path / "m.onnx", cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(session.run(None, {"x": np.array([-1, 2], np.float32)})[0], [0, 2])
    assert not (tmp_path / "cache").exists() or not entries(tmp_path / "cache")


def test_a_cache_that_cannot_be_written_is_a_warning_and_the_session_works(files, tmp_path):
    config, model, _ = files
    not_a_directory = tmp_path / "a_file"
    not_a_directory.write_bytes(b"x")
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        session = onnx_struct.InferenceSession(model, accuracy_level=0, cache_dir=not_a_directory)
    np.testing.assert_array_equal(
        logits(session, config), logits(onnx_struct.InferenceSession(model, accuracy_level=0), config)
    )
    assert not_a_directory.read_bytes() == b"x"


def test_the_cli_prints_an_unwritable_cache_as_one_warning_line(files, tmp_path, capsys):
    config, model, _ = files
    not_a_directory = tmp_path / "a_file"
    not_a_directory.write_bytes(b"x")
    args = ["generate", str(model), "--prompt", "hello", "--max-new-tokens", "2", "--quiet"]
    before = warnings.showwarning
    assert main([*args, "--cache-dir", str(not_a_directory)]) == 0
    assert warnings.showwarning is before  # main() restores Python's (a program may call it)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"onnx-struct generate: warning: the session cache {str(not_a_directory)!r} cannot be written "
                   "(File exists): this session is not kept"]  # fmt: skip


def test_the_cache_directory_is_private(files):
    config, model, cache = files
    onnx_struct.InferenceSession(model, cache_dir=cache)
    (entry,) = entries(cache)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(entry.stat().st_mode) == 0o700


def test_cli_cache_dir_and_its_environment_default(files, capsys, monkeypatch, lowerings):
    config, model, cache = files
    args = ["generate", str(model), "--prompt", "hello", "--max-new-tokens", "4", "--quiet"]
    assert main([*args, "--cache-dir", str(cache)]) == 0
    first = capsys.readouterr().out
    assert len(entries(cache)) == 1
    monkeypatch.setenv("ONNX_STRUCT_CACHE_DIR", str(cache))
    assert main(args) == 0
    assert capsys.readouterr().out == first
    assert len(lowerings) == 1  # the second run was a hit through the environment's directory


@pytest.mark.slow
def test_two_processes_starting_at_once_both_work_and_leave_one_entry(files):
    config, model, cache = files
    code = (
        "import sys, numpy as np, onnx_struct\n"
        "from support.llm import prompt_feeds, TinyLlama, spm_vocab\n"
        "s = onnx_struct.InferenceSession(sys.argv[1], cache_dir=sys.argv[2])\n"
        "config = TinyLlama(**spm_vocab(), seed=7)\n"
        f"print(s.run(['logits'], prompt_feeds(config, {PROMPT!r}))[0].tobytes().hex())\n"
    )
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    children = [
        subprocess.Popen([sys.executable, "-c", code, str(model), str(cache)], stdout=subprocess.PIPE, env=env)
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=300)[0] for child in children]
    assert [child.returncode for child in children] == [0, 0]
    expected = logits(onnx_struct.InferenceSession(model), config).tobytes().hex()
    assert [o.decode().strip() for o in outputs] == [expected, expected]
    assert len(entries(cache)) == 1
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]  # the loser removed its own


# Red-team findings (2026-12-07): an entry is used only while every location still leads to the
# file it recorded, and that file and the model file are as they were before they were read.


def refused_code(model, **kwargs) -> str | None:
    try:
        onnx_struct.InferenceSession(model, **kwargs)
    except onnx_struct.ValidationError as error:
        return error.code
    return None


def test_a_repointed_gguf_link_is_a_miss_and_refused_as_without_a_cache(files):
    config, model, cache = files
    gguf = model.parent / "model.gguf"
    os.rename(gguf, model.parent / "v1.gguf")
    os.symlink("v1.gguf", gguf)
    write_gguf(model.parent / "v2.gguf", TinyLlama(**spm_vocab(), seed=8))
    onnx_struct.InferenceSession(model, cache_dir=cache)
    os.remove(gguf)
    os.symlink("v2.gguf", gguf)  # the same location now leads to another model's file
    assert refused_code(model) == "file_changed"
    assert refused_code(model, cache_dir=cache) == "file_changed"


def test_a_gguf_linked_from_outside_the_model_directory_is_cached(tmp_path, lowerings):
    # from-gguf --reference records the identity of the file a link reaches (a download cache's
    # blob): the check follows that link, and so does the cache (it was a silent miss every time)
    config = TinyLlama(**spm_vocab(), seed=7)
    (tmp_path / "downloads").mkdir()
    (tmp_path / "model").mkdir()
    write_gguf(tmp_path / "downloads" / "blob", config)
    os.symlink(tmp_path / "downloads" / "blob", tmp_path / "model" / "model.gguf")
    model, cache = tmp_path / "model" / "model.onnx", tmp_path / "cache"
    onnx.save(convert(tmp_path / "model" / "model.gguf", graph=True, reference=True), model)
    first = onnx_struct.InferenceSession(model, accuracy_level=0, cache_dir=cache)
    second = onnx_struct.InferenceSession(model, accuracy_level=0, cache_dir=cache)
    assert len(lowerings) == 1 and len(entries(cache)) == 1  # the second session was a hit
    np.testing.assert_array_equal(logits(second, config), logits(first, config))
    os.remove(tmp_path / "model" / "model.gguf")
    write_gguf(tmp_path / "downloads" / "other", TinyLlama(**spm_vocab(), seed=8))
    os.symlink(tmp_path / "downloads" / "other", tmp_path / "model" / "model.gguf")
    assert refused_code(model, cache_dir=cache) == "file_changed"  # re-pointed: a miss, then the check


def test_one_model_through_links_in_two_directories_uses_each_directorys_files(files, tmp_path):
    config, model, cache = files
    for name, seed in (("a", 7), ("c", 8)):
        (tmp_path / name).mkdir()
        write_gguf(tmp_path / name / "model.gguf", TinyLlama(**spm_vocab(), seed=seed))
        os.symlink(model, tmp_path / name / "model.onnx")
    onnx_struct.InferenceSession(tmp_path / "a" / "model.onnx", cache_dir=cache)
    assert refused_code(tmp_path / "c" / "model.onnx") == "file_changed"
    assert refused_code(tmp_path / "c" / "model.onnx", cache_dir=cache) == "file_changed"


def test_a_relative_base_dir_is_keyed_by_the_directory_it_names(files, tmp_path, monkeypatch):
    config, model, cache = files
    for name, seed in (("run1", 7), ("run2", 8)):
        (tmp_path / name / "w").mkdir(parents=True)
        write_gguf(tmp_path / name / "w" / "model.gguf", TinyLlama(**spm_vocab(), seed=seed))
    monkeypatch.chdir(tmp_path / "run1")
    onnx_struct.InferenceSession(model, base_dir="w", cache_dir=cache)
    monkeypatch.chdir(tmp_path / "run2")
    assert refused_code(model, base_dir="w") == "file_changed"
    assert refused_code(model, base_dir="w", cache_dir=cache) == "file_changed"


def test_a_gguf_rewritten_while_the_session_is_made_is_not_recorded_as_the_new_file(files, monkeypatch):
    config, model, cache = files
    real = session_cache.publish_saved_graph

    def rewritten_first(*args, **kwargs):  # a download finishing during the session's creation
        write_gguf(model.parent / "model.gguf", TinyLlama(**spm_vocab(), seed=8))
        return real(*args, **kwargs)

    monkeypatch.setattr(session_cache, "publish_saved_graph", rewritten_first)
    onnx_struct.InferenceSession(model, cache_dir=cache)
    monkeypatch.undo()
    assert refused_code(model) == "file_changed"
    assert refused_code(model, cache_dir=cache) == "file_changed"


def test_a_model_file_swapped_after_its_hash_does_not_poison_the_entry(tmp_path, monkeypatch):
    configs = {}
    for name, seed in (("a", 7), ("b", 8)):
        configs[name] = TinyLlama(**spm_vocab(), seed=seed)
        write_gguf(tmp_path / f"{name}.gguf", configs[name])
        onnx.save(convert(tmp_path / f"{name}.gguf", graph=True, reference=True), tmp_path / f"{name}.onnx")
    model, cache = tmp_path / "model.onnx", tmp_path / "cache"
    shutil.copy(tmp_path / "a.onnx", model)
    real = session_module._cache_slot

    def swapped(*args, **kwargs):  # B written over the file between the key's read and the load
        slot = real(*args, **kwargs)
        shutil.copy(tmp_path / "b.onnx", model)
        return slot

    monkeypatch.setattr(session_module, "_cache_slot", swapped)
    onnx_struct.InferenceSession(model, cache_dir=cache)
    monkeypatch.undo()
    shutil.copy(tmp_path / "a.onnx", model)
    hit = logits(onnx_struct.InferenceSession(model, cache_dir=cache), configs["a"])
    np.testing.assert_array_equal(hit, logits(onnx_struct.InferenceSession(tmp_path / "a.onnx"), configs["a"]))


def test_a_miss_reads_the_model_file_once_and_a_hit_holds_no_copy_of_it(files, monkeypatch, lowerings):
    """The key's hash and the load share one read of the model file (a miss parsed it again
    before); a hit reads it for the key and keeps nothing of it while onnxruntime loads."""
    from onnx_struct.schema import model as model_module  # noqa: PLC0415

    config, model, cache = files
    reads, real = [], model_module._read_model_file

    def counted(path):
        reads.append(os.path.abspath(path))
        return real(path)

    monkeypatch.setattr(model_module, "_read_model_file", counted)
    miss = logits(onnx_struct.InferenceSession(model, cache_dir=cache), config)
    assert reads == [str(model)] and lowerings == [1]
    reads.clear()
    held = []
    real_open = session_module.InferenceSession._open_cached

    def opened(self, *args, **kwargs):  # what the hit's frame still holds while onnxruntime loads
        frame = sys._getframe(1)
        held.append(frame.f_locals.get("model_bytes"))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(session_module.InferenceSession, "_open_cached", opened)
    hit = logits(onnx_struct.InferenceSession(model, cache_dir=cache), config)
    assert reads == [str(model)] and lowerings == [1] and held == [None]
    np.testing.assert_array_equal(hit, miss)


def test_a_failure_with_a_callers_options_leaves_no_partial_entry(files, monkeypatch):
    config, model, cache = files

    def failing(*args, **kwargs):  # as a referenced file found too short while it is copied
        raise onnx_struct.ValidationError("gguf", "shrank", code="file_too_short")

    monkeypatch.setattr(session_build, "deliver_into", failing)
    assert refused_code(model, sess_options=callers_options(), cache_dir=cache) == "file_too_short"
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("record", ["nested", "huge_int", "fifo", "junk_directory"])
def test_a_record_that_is_not_an_entrys_is_ignored(files, lowerings, record):
    config, model, cache = files
    expected = logits(onnx_struct.InferenceSession(model, cache_dir=cache), config)
    (entry,) = entries(cache)
    path = entry / "entry.json"
    if record == "nested":
        path.write_text("[" * 100_000)
    elif record == "huge_int":
        path.write_text(json.dumps({**json.loads(path.read_text()), "files": [[10**30, None, None]]}))
    elif record == "fifo":
        path.unlink()
        os.mkfifo(path)  # opened without O_NONBLOCK it blocked every start
    else:
        (cache / "junk").mkdir()
        (cache / "junk" / "entry.json").write_text("[" * 100_000)  # read by every publish
        path.unlink()
    np.testing.assert_array_equal(logits(onnx_struct.InferenceSession(model, cache_dir=cache), config), expected)
    assert len(lowerings) == 2  # a miss, made again
