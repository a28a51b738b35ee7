"""A node against its operator's ONNX schema, at load: input and output counts, required inputs left empty, required
attributes and the types of the attributes given. A malformed node then fails with an OnnxError that names it and
what is wrong before any of it runs, instead of as an IndexError or a TypeError deep inside the op.

Only what the schema states is checked; a node of a domain onnx does not define (a model-local function, a vendor
domain) has no schema here and is left to its implementation.
"""

from __future__ import annotations

import functools
from typing import Any

from tinygrad.onnx._proto import OnnxError, import_onnx


@functools.lru_cache(maxsize=1024)
def _schema(op_type: str, opset: int, domain: str) -> Any:
    onnx = import_onnx()
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:  # no such op at this opset: the runner reports unsupported ops itself
        return None
    return None if schema.deprecated else schema


def _attr_type_name(t: int) -> str:
    return str(import_onnx().AttributeProto.AttributeType.Name(t))


def check_node(node: Any, domain: str, opset: int, what: str) -> None:
    """Raise an OnnxError naming the node (`what`) if it breaks its operator's schema at `opset`."""
    schema = _schema(node.op_type, opset, domain or "")
    if schema is None:
        return
    onnx = import_onnx()
    Option = onnx.defs.OpSchema.FormalParameterOption
    inputs, outputs = list(node.input), list(node.output)
    given_in = len(inputs)
    while given_in and not inputs[given_in - 1]:
        given_in -= 1  # trailing empty names are inputs left out
    if len(inputs) < schema.min_input or given_in > schema.max_input:
        raise OnnxError(f"{what}: has {given_in} inputs; {node.op_type}-{schema.since_version} takes "
                        f"{_arity(schema.min_input, schema.max_input)}")
    formal = list(schema.inputs)
    for i, name in enumerate(inputs[:schema.min_input]):
        param = formal[min(i, len(formal) - 1)] if formal else None
        if not name and param is not None and param.option == Option.Single:
            raise OnnxError(f"{what}: input {i} ({param.name}) is required but left empty")
    given_out = len(outputs)
    while given_out and not outputs[given_out - 1]:
        given_out -= 1
    if len(outputs) < schema.min_output or given_out > schema.max_output:
        raise OnnxError(f"{what}: has {given_out} outputs; {node.op_type}-{schema.since_version} gives "
                        f"{_arity(schema.min_output, schema.max_output)}")
    attrs = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if spec.required and name not in attrs:
            raise OnnxError(f"{what}: the required attribute {name!r} ({_attr_type_name(int(spec.type))}) is "
                            f"missing")
    for name, a in attrs.items():
        spec = schema.attributes.get(name)
        if spec is None or a.ref_attr_name or not a.type:
            continue  # unknown attributes are ignored, as by the ops; references are resolved by the caller
        if int(a.type) != int(spec.type) and int(spec.type) != 0:
            raise OnnxError(f"{what}: attribute {name!r} is {_attr_type_name(int(a.type))}; {node.op_type} takes "
                            f"{_attr_type_name(int(spec.type))}")


def _arity(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    return f"{lo} or more" if hi >= 2**31 - 1 else f"{lo} to {hi}"
