"""tinygrad.onnx against hostile and malformed nodes: tensors out of all proportion to the model and its inputs
(refused before any memory is taken, with the limit named and how to raise it), and nodes whose attributes, input
counts or subgraphs are missing or wrong (an OnnxError naming the node, never an IndexError or TypeError from inside
an op). The sizes stay small: the limit is tested by lowering it, or by shapes read without realizing the tensor."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tinygrad import Device  # noqa: E402
from tinygrad.onnx import OnnxError, OnnxRunner  # noqa: E402
from tinygrad.onnx._limits import ENV_VAR, FLOOR_BYTES  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def make_model(nodes: list[Any], inputs: list[Any] = (), inits: list[Any] = (), outputs: list[str] = ("y",),
               opset: int = 17) -> Any:
    graph = helper.make_graph(nodes, "g", list(inputs), [helper.make_tensor_value_info(o, 0, None) for o in outputs],
                              list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name: str, elem: int, shape: list[Any] | None) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value: Any, dtype: Any = np.int64) -> Any:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype), name))


@pytest.fixture
def no_big_allocations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Fails any device allocation over 64 MiB instead of making it (these models never need one)."""
    sizes: list[int] = []
    allocator = Device[Device.DEFAULT].allocator
    real = allocator.alloc

    def spy(nbytes: int, *args: Any, **kwargs: Any) -> Any:
        sizes.append(nbytes)
        if nbytes > 64 << 20:
            raise AssertionError(f"allocated {nbytes} bytes")
        return real(nbytes, *args, **kwargs)
    monkeypatch.setattr(allocator, "alloc", spy)
    return sizes


# ---- sizes out of proportion ----
def test_constant_of_shape_from_a_constant_is_refused_before_allocating(no_big_allocations: list[int]) -> None:
    # the reproducer: a model of about a hundred bytes asking for 8 GiB
    model = make_model([const("s", [1 << 31]), helper.make_node("ConstantOfShape", ["s"], ["y"], name="grow")])
    assert len(model.SerializeToString()) < 128
    with pytest.raises(OnnxError, match=r"ConstantOfShape node 'grow'.*8\.0 GiB.*max_tensor_bytes=8589934592.*"
                                        + ENV_VAR) as info:
        OnnxRunner(model)({})
    assert "the larger of 2.0 GiB and 64x the" in str(info.value)


def test_shape_from_an_input_is_refused_at_the_call(no_big_allocations: list[int]) -> None:
    model = make_model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="grow")], [vi("s", I64, [1])])
    runner = OnnxRunner(model)
    with pytest.raises(OnnxError, match=r"ConstantOfShape node 'grow'.*max_tensor_bytes"):
        runner({"s": np.array([1 << 31], np.int64)})
    assert runner({"s": np.array([3], np.int64)})["y"].shape == (3,)


def _expand_then_shape(n: int) -> Any:
    """y = Shape(Expand(x, [n])): the expanded tensor is built (and measured) but never realized."""
    return make_model([const("n", [n]), helper.make_node("Expand", ["x", "n"], ["big"], name="widen"),
                       helper.make_node("Shape", ["big"], ["y"])], [vi("x", F, [1])])


def test_the_limit_can_be_raised(monkeypatch: pytest.MonkeyPatch, no_big_allocations: list[int]) -> None:
    n = FLOOR_BYTES // 4 + 1  # float32: one element past the default for a small model
    x = np.ones(1, np.float32)
    with pytest.raises(OnnxError, match=r"Expand node 'widen'.*max_tensor_bytes="):
        OnnxRunner(_expand_then_shape(n))({"x": x})
    assert OnnxRunner(_expand_then_shape(n - 1))({"x": x})["y"].numpy().tolist() == [n - 1]
    runner = OnnxRunner(_expand_then_shape(n), max_tensor_bytes=FLOOR_BYTES + 4)
    assert runner({"x": x})["y"].numpy().tolist() == [n]
    monkeypatch.setenv(ENV_VAR, str(FLOOR_BYTES + 4))
    assert OnnxRunner(_expand_then_shape(n))({"x": x})["y"].numpy().tolist() == [n]
    monkeypatch.setenv(ENV_VAR, "1000")  # the keyword wins over the environment; a lower limit refuses sooner
    assert OnnxRunner(_expand_then_shape(300), max_tensor_bytes=1200)({"x": x})["y"].numpy().tolist() == [300]
    with pytest.raises(OnnxError, match=f"the limit set by \\${ENV_VAR}"):
        OnnxRunner(_expand_then_shape(300))({"x": x})


def test_the_limit_grows_with_the_inputs(no_big_allocations: list[int]) -> None:
    n = FLOOR_BYTES // 4 + 1
    model = make_model([const("n", [n]), helper.make_node("Expand", ["x", "n"], ["big"]),
                        helper.make_node("Shape", ["big"], ["y"]), helper.make_node("Shape", ["pixels"], ["z"])],
                       [vi("x", F, [1]), vi("pixels", F, [None])], outputs=["y", "z"])
    runner = OnnxRunner(model)
    x = np.ones(1, np.float32)
    with pytest.raises(OnnxError, match="plus the 4004 bytes of its inputs"):
        runner({"x": x, "pixels": np.zeros(1000, np.float32)})
    # inputs of 1/64 of the size: a tensor that large is in proportion to what the caller handed over
    pixels = np.zeros(FLOOR_BYTES // 64 // 4 + 1, np.float32)
    assert runner({"x": x, "pixels": pixels})["y"].numpy().tolist() == [n]


@pytest.mark.parametrize("value", [0, -5, "lots", 1.5])
def test_bad_limits_are_refused(value: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _expand_then_shape(4)
    with pytest.raises((ValueError, TypeError), match="max_tensor_bytes"):
        OnnxRunner(model, max_tensor_bytes=value)
    monkeypatch.setenv(ENV_VAR, str(value))
    if isinstance(value, float):
        return
    with pytest.raises(ValueError, match=ENV_VAR):
        OnnxRunner(model)


def _size_cases() -> dict[str, tuple[list[Any], list[Any], dict[str, np.ndarray]]]:
    """Models that each make one tensor of about a megabyte from a shape, a count or a scale in the graph, with the
    inputs to run them."""
    x4 = {"x": np.ones((1, 1, 4, 4), np.float32)}
    in4 = [vi("x", F, [1, 1, 4, 4])]
    return {
        "ConstantOfShape": ([const("s", [512, 512]), helper.make_node("ConstantOfShape", ["s"], ["y"])], [], {}),
        "Expand": ([const("s", [1, 1, 512, 512]), helper.make_node("Expand", ["x", "s"], ["y"])],
                   [vi("x", F, [1, 1, 1, 1])], {"x": np.ones((1, 1, 1, 1), np.float32)}),
        "Tile": ([const("r", [1, 1, 128, 128]), helper.make_node("Tile", ["x", "r"], ["y"])], in4, x4),
        "Pad": ([const("p", [0, 0, 300, 300, 0, 0, 300, 300]), helper.make_node("Pad", ["x", "p"], ["y"])], in4, x4),
        "Resize": ([const("sc", [1, 1, 128, 128], np.float32),
                    helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")], in4, x4),
        "Range": ([const("a", 0), const("b", 1 << 18), const("d", 1), helper.make_node("Range", ["a", "b", "d"],
                                                                                         ["y"])], [], {}),
        "RandomNormal": ([helper.make_node("RandomNormal", [], ["y"], shape=[512, 512])], [], {}),
        "OneHot": ([const("depth", 1 << 18), const("vals", [0.0, 1.0], np.float32),
                    helper.make_node("OneHot", ["i", "depth", "vals"], ["y"])], [vi("i", I64, [2])],
                   {"i": np.array([1, 2], np.int64)}),
        "CenterCropPad": ([const("s", [1, 1, 512, 512]), helper.make_node("CenterCropPad", ["x", "s"], ["y"])], in4,
                          x4),
        "MatMul": ([helper.make_node("MatMul", ["a", "b"], ["y"])], [vi("a", F, [512, 1]), vi("b", F, [1, 512])],
                   {"a": np.ones((512, 1), np.float32), "b": np.ones((1, 512), np.float32)}),
        "ConvTranspose": ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[128, 128])], in4 +
                          [vi("w", F, [1, 1, 1, 1])], {**x4, "w": np.ones((1, 1, 1, 1), np.float32)}),
        "HannWindow": ([const("n", 1 << 18), helper.make_node("HannWindow", ["n"], ["y"])], [], {}),
    }


@pytest.mark.parametrize("op", sorted(_size_cases()))
def test_every_way_to_grow_a_tensor_meets_the_limit(op: str, no_big_allocations: list[int]) -> None:
    nodes, inputs, feed = _size_cases()[op]
    for n in nodes:
        n.name = n.name or f"{n.op_type.lower()}_node"
    model = make_model(nodes, inputs, opset=21)
    with pytest.raises(OnnxError, match=f"{op} node '{op.lower()}_node'.*the limit set by max_tensor_bytes="):
        OnnxRunner(model, max_tensor_bytes=64 << 10)(feed)
    out = OnnxRunner(model, max_tensor_bytes=64 << 20)(feed)["y"]  # the same model under a limit it fits
    assert out.numel() * out.dtype.itemsize > 64 << 10


# ---- malformed nodes ----
def _x(shape: list[int]) -> tuple[list[Any], dict[str, np.ndarray]]:
    return [vi("x", F, shape)], {"x": np.ones(shape, np.float32)}


def _body(n_in: int, n_out: int) -> Any:
    """A subgraph passing its first input through to each of its outputs."""
    ins = [vi(f"b_in{i}", F, None) for i in range(n_in)]
    nodes = [helper.make_node("Identity", ["b_in0" if n_in else "b_c"], [f"b_out{j}"]) for j in range(n_out)]
    if not n_in:
        nodes.insert(0, const("b_c", 1.0, np.float32))
    return helper.make_graph(nodes, "body", ins, [vi(f"b_out{j}", F, None) for j in range(n_out)])


def _malformed_cases() -> dict[str, tuple[Any, list[Any], dict[str, np.ndarray], str]]:
    """name -> (node, graph inputs, feed, what the error must say besides the node's name)."""
    x2, f2 = _x([2, 3])
    x4, f4 = _x([1, 1, 5, 5])
    w = [vi("w", F, [1, 1, 3, 3])]
    fw = {**f4, "w": np.ones((1, 1, 3, 3), np.float32)}
    cond, fc = [vi("c", TensorProto.BOOL, [])], {"c": np.array(True)}
    n = helper.make_node
    return {
        # the three the hostile user found
        "scan_without_body": (n("Scan", ["x"], ["y"], num_scan_inputs=1), x2, f2, "required attribute 'body'"),
        "if_without_branches": (n("If", ["c"], ["y"]), cond, fc, "required attribute '(then|else)_branch'"),
        "loop_without_body": (n("Loop", ["", ""], ["y"]), [], {}, "required attribute 'body'"),
        "conv_with_3_pads": (n("Conv", ["x", "w"], ["y"], pads=[1, 1, 1]), x4 + w, fw,
                             r"'pads' has 3 values \[1, 1, 1\]; a 2-D Conv needs 4"),
        # attributes: arity, values, presence, type
        "conv_with_1_stride": (n("Conv", ["x", "w"], ["y"], strides=[2]), x4 + w, fw, "'strides' has 1 values"),
        "conv_with_stride_0": (n("Conv", ["x", "w"], ["y"], strides=[0, 1]), x4 + w, fw, "at least 1"),
        "conv_kernel_not_the_weight": (n("Conv", ["x", "w"], ["y"], kernel_shape=[2, 2]), x4 + w, fw,
                                       "does not match the weight"),
        "conv_with_a_3d_weight": (n("Conv", ["x", "w"], ["y"]), x4 + [vi("w", F, [1, 1, 3])],
                                  {**f4, "w": np.ones((1, 1, 3), np.float32)}, "needs rank 4"),
        "maxpool_without_kernel": (n("MaxPool", ["x"], ["y"]), x4, f4, "required attribute 'kernel_shape'"),
        "maxpool_kernel_for_3d": (n("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2]), x4, f4,
                                  "'kernel_shape' has 3 values"),
        "cast_to_as_a_float": (n("Cast", ["x"], ["y"], to=1.0), x2, f2, "attribute 'to' is FLOAT; Cast takes INT"),
        "depth_to_space_blocksize_0": (n("DepthToSpace", ["x"], ["y"], blocksize=0), x4, f4, "blocksize 0"),
        # input and output counts
        "gemm_with_one_input": (n("Gemm", ["x"], ["y"]), x2, f2, "has 1 inputs; Gemm-13 takes 2 to 3"),
        "relu_with_two_inputs": (n("Relu", ["x", "x"], ["y"]), x2, f2, "has 2 inputs; Relu-14 takes 1"),
        "add_with_an_empty_input": (n("Add", ["x", ""], ["y"]), x2, f2, r"input 1 \(B\) is required but left empty"),
        "topk_with_3_outputs": (n("TopK", ["x", "k"], ["y", "i", "z"]), x2 + [vi("k", I64, [1])],
                                {**f2, "k": np.array([1], np.int64)}, "has 3 outputs; TopK-11 gives 2"),
        # subgraphs that do not fit their node
        "loop_body_too_few_outputs": (n("Loop", ["", "", "x"], ["y"], body=_body(3, 1)), x2, f2,
                                      "the body gives 1 outputs"),
        "if_branch_with_inputs": (n("If", ["c"], ["y"], then_branch=_body(1, 1), else_branch=_body(1, 1)), cond, fc,
                                  "takes 1 inputs, the node passes it 0"),
        "scan_body_wrong_outputs": (n("Scan", ["x"], ["y"], num_scan_inputs=1, body=_body(1, 2)), x2, f2,
                                    "the body gives 2 outputs"),
        "if_cond_with_two_values": (n("If", ["c"], ["y"], then_branch=_body(0, 1), else_branch=_body(0, 1)),
                                    [vi("c", TensorProto.BOOL, [2])], {"c": np.array([True, False])},
                                    "cond must hold one value"),
        # values in the data that no op can build from
        "range_with_delta_0": (n("Range", ["a", "b", "d"], ["y"]), [vi(v, F, []) for v in "abd"],
                               {"a": np.float32(0), "b": np.float32(5), "d": np.float32(0)},
                               "do not describe a finite range"),
        "topk_k_too_large": (n("TopK", ["x", "k"], ["y", "i"]), x2 + [vi("k", I64, [1])],
                             {**f2, "k": np.array([9], np.int64)}, "k = 9 is out of range"),
        # what an op's implementation trips over, named by the dispatch (the original error is kept as the cause)
        "gemm_transposing_a_vector": (n("Gemm", ["x", "x2"], ["y"], transA=1), [vi("x", F, [3]), vi("x2", F, [3, 2])],
                                      {"x": np.ones(3, np.float32), "x2": np.ones((3, 2), np.float32)},
                                      "malformed or does not fit its inputs: IndexError"),
        "add_of_shapes_that_do_not_broadcast": (n("Add", ["x", "x2"], ["y"]), [vi("x", F, [3]), vi("x2", F, [4])],
                                                {"x": np.ones(3, np.float32), "x2": np.ones(4, np.float32)},
                                                "malformed or does not fit its inputs"),
    }


@pytest.mark.parametrize("case", sorted(_malformed_cases()))
def test_malformed_nodes_raise_onnx_errors_naming_the_node(case: str) -> None:
    node, inputs, feed, message = _malformed_cases()[case]
    node.name = case
    model = make_model([node], inputs, outputs=[o for o in node.output if o])
    with pytest.raises(OnnxError, match=f"{node.op_type} node '{case}'.*{message}") as info:
        OnnxRunner(model)(feed)
    if "malformed or does not fit" in message:  # a converted error keeps the original as its cause
        assert isinstance(info.value.__cause__, (IndexError, ValueError, TypeError))


def test_nodes_with_attributes_and_inputs_taken_away_fail_cleanly() -> None:
    """Common ops with each attribute removed, shortened by one value or set to 0 or -1, or their last input dropped:
    each runs or raises an OnnxError (or NotImplementedError), never another exception."""
    x4 = np.random.default_rng(0).standard_normal((1, 2, 6, 6)).astype(np.float32)
    w = np.ones((2, 2, 3, 3), np.float32)
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], dilations=[1, 1],
          group=1),
        n("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2],
          output_padding=[1, 1]),
        n("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], ceil_mode=1),
        n("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1], count_include_pad=1),
        n("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=3),
        n("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1]),
        n("Split", ["x"], ["y", "y2"], axis=1, num_outputs=2),
        n("Concat", ["x", "x"], ["y"], axis=1),
        n("Gather", ["x", "idx"], ["y"], axis=2),
        n("Softmax", ["x"], ["y"], axis=1),
        n("DepthToSpace", ["x"], ["y"], blocksize=1, mode="CRD"),
        n("LayerNormalization", ["x", "b", "b"], ["y"], axis=1, epsilon=1e-5),
        n("Flatten", ["x"], ["y"], axis=2),
        n("Trilu", ["x"], ["y"], upper=0),
        n("ReduceSum", ["x", "axes"], ["y"], keepdims=0),
        n("CumSum", ["x", "axis"], ["y"], exclusive=1, reverse=1),
        n("Resize", ["x", "", "scales"], ["y"], mode="linear", coordinate_transformation_mode="align_corners"),
    ]
    consts = {"w": w, "b": np.ones(2, np.float32), "idx": np.array([0, 2], np.int64),
              "axes": np.array([1], np.int64), "axis": np.array(2, np.int64),
              "scales": np.array([1, 1, 2, 2], np.float32)}
    tried = 0
    for base in nodes:
        variants = []
        for i, a in enumerate(base.attribute):
            dropped = helper.make_node(base.op_type, base.input, base.output)
            dropped.attribute.extend(x for j, x in enumerate(base.attribute) if j != i)
            variants.append((f"without {a.name}", dropped))
            if a.type == a.INTS and len(a.ints):
                short = onnx.NodeProto()
                short.CopyFrom(base)
                del short.attribute[i].ints[-1]
                variants.append((f"{a.name} one short", short))
            for bad in (0, -1):
                if a.type in (a.INT, a.INTS):
                    changed = onnx.NodeProto()
                    changed.CopyFrom(base)
                    if a.type == a.INT:
                        changed.attribute[i].i = bad
                    else:
                        changed.attribute[i].ints[0] = bad
                    variants.append((f"{a.name} {bad}", changed))
        if len(base.input) > 1:
            fewer = onnx.NodeProto()
            fewer.CopyFrom(base)
            del fewer.input[-1]
            variants.append(("last input dropped", fewer))
        for what, node in variants:
            node.name = f"{base.op_type} {what}"
            inits = [numpy_helper.from_array(v, k) for k, v in consts.items() if k in node.input]
            model = make_model([node], [vi("x", F, [1, 2, 6, 6])], inits, outputs=[node.output[0]])
            tried += 1
            try:
                OnnxRunner(model, max_tensor_bytes=16 << 20)({"x": x4})
            except (OnnxError, NotImplementedError):
                pass
            except Exception as e:
                raise AssertionError(f"{node.name}: {type(e).__name__}: {e}") from e
    assert tried > 100
