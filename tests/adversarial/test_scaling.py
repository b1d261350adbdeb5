"""Work that grew with (entries naming a value) x (a declaration's size), found by a red-team pass:
each model is built in the child, then checked or lowered under CPU and memory limits that the old
code broke by far and the linear code meets with room (the measured figures are in each test)."""

from __future__ import annotations

from adversarial.bounded import run_bounded

BUILD = """
from onnx import TensorProto as T, helper as oh, numpy_helper
def decoder(name="dec", const_bytes=0, inputs=("values",)):
    nodes = [oh.make_node("Cast", [inputs[0]], ["y"], to=T.FLOAT)]
    if const_bytes:  # an unused constant: only the decoder's size matters
        table = numpy_helper.from_array(np.zeros(const_bytes, np.uint8), "table")
        nodes.insert(0, oh.make_node("Constant", [], ["table"], value=table))
    return oh.make_function("t", name, list(inputs), ["y"], nodes, [oh.make_opsetid("", 21)])
def model(values=1):
    graph = oh.make_graph([], "g", [], [])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
"""


def test_entries_naming_a_value_of_an_inline_declaration_type_it_once():
    """4,000 value_info entries naming one value whose inline declaration's decoder holds 8 MB:
    the full check typed the declaration again per entry (58 CPU s; now 0.3 s)."""
    code = (
        BUILD
        + """
m = model()
declaration = S.make_array(T.UINT8, 4, decoder=decoder(const_bytes=8_000_000))
S.add_struct_values(m, S.make_struct_value("W", declaration, raw_data=bytes(4)))
m.graph.value_info.extend(oh.make_tensor_value_info("W", T.FLOAT, [4]) for _ in range(4000))
m.graph.output.append(oh.make_tensor_value_info("W", T.FLOAT, [4]))
S.check_model(m, full_check=True)
raise S.ValidationError("done", "the full check passed")
"""
    )
    run_bounded(code, cpu_seconds=8, memory_mib=600).assert_validation_error("done")


def test_entries_naming_a_value_compare_its_declarations_once():
    """6,400 value_info entries re-declaring a value of declaration 0 as the identical
    declaration 1 (8 MB decoders): each entry serialized and compared both (26 CPU s; now 0.4 s)."""
    code = (
        BUILD
        + """
m = model()
declaration = S.make_array(T.UINT8, 4, decoder=decoder(const_bytes=8_000_000))
S.add_struct_types(m, declaration, declaration)
S.add_struct_values(m, S.make_struct_value("W", 0, raw_data=bytes(4)))
S.add_value_infos(m, value_info=[S.make_struct_value_info("W", 1) for _ in range(6400)])
S.check_model(m)
raise S.ValidationError("done", "the check passed")
"""
    )
    run_bounded(code, cpu_seconds=8, memory_mib=700).assert_validation_error("done")


def test_a_long_decoder_or_field_name_is_not_repeated_per_value():
    """2,500 values of one declaration whose decoder and field names are 1 MB: lower repeated the
    decoder's name in each call node and the field name in each leaf name (MemoryError past
    2.5 GB, 29 s; now 0.3 s and no more than the model)."""
    code = (
        BUILD
        + """
big = "A" * 1_000_000
m = model()
declaration = S.make_structure([S.make_field(big, S.make_tensor_type(T.UINT8, [4]))], decoder=decoder("d" + big, inputs=(big,)))
declaration.name = big
S.add_struct_types(m, declaration)
S.add_struct_values(m, *[S.make_struct_value(f"W{i}", 0, raw_data=bytes(4)) for i in range(2500)])
m.graph.node.extend(oh.make_node("Identity", [f"W{i}"], [f"Y{i}"]) for i in range(2500))
m.graph.output.extend(oh.make_tensor_value_info(f"Y{i}", T.FLOAT, [4]) for i in range(2500))
lowered = S.lower(m)
assert lowered.ByteSize() < 4_000_000, lowered.ByteSize()
assert len({n.op_type for n in lowered.graph.node if n.domain == "t"}) == 1
raise S.ValidationError("done", "lowered")
"""
    )
    run_bounded(code, cpu_seconds=10, memory_mib=300).assert_validation_error("done")
