"""The one graph traversal (`post_order`) and the typed IR arguments: every pass walks graphs through the first, and
reads the args of PARAM, DEFINE_VAR, DEFINE_LOCAL, REDUCE_AXIS and SPECIAL by the field names of the second."""

from __future__ import annotations

import ast
import pathlib
import pickle

import pytest
from tinygrad import Tensor
from tinygrad.dtype import dtypes
from tinygrad.uop.ops import ARG_RECORDS, LocalArg, Ops, ParamArg, ReduceArg, SpecialArg, UOp, VarArg, post_order
from tinygrad.uop.ops import Variable as Var

REPO = pathlib.Path(__file__).resolve().parents[3]
SOURCES = sorted(p for pattern in ("packages/*/src/**/*.py", "integration-tests/sample_backend/src/**/*.py")
                 for p in REPO.glob(pattern))


def _leaf(n: int) -> UOp:
    return UOp(Ops.CONST, dtypes.int32, (), n)


def test_post_order_lists_sources_first_each_node_once() -> None:
    a, b = _leaf(1), _leaf(2)
    s = a + b
    root = s * s + a
    order = post_order((root,))
    assert len(order) == len(set(order)) == len(root.toposort())
    position = {u: i for i, u in enumerate(order)}
    assert all(position[src] < position[u] for u in order for src in u.src)
    assert order[-1] is root and order.index(a) < order.index(b)  # the first source's subgraph first


def test_post_order_skip_and_children_prune() -> None:
    a, b, c = _leaf(1), _leaf(2), _leaf(3)
    left, right = a + b, b * c
    root = left - right
    assert set(post_order((root,), skip=lambda u: u is left)) == {root, right, b, c}
    only_right = post_order((root,), children=lambda u: u.src[1:] if u is root else ())
    assert only_right == [right, root]
    # several roots share one walk: a node under two of them is listed once, before both
    assert post_order((left, right)) == [a, b, left, c, right]


def test_post_order_is_iterative() -> None:
    x = _leaf(0)
    for i in range(20000):
        x = x + _leaf(i % 7)
    order = post_order((x,))
    assert order[-1] is x and len(order) == 20000 + 7


def test_tuple_args_become_records() -> None:
    p = UOp(Ops.PARAM, dtypes.float32, (), (3, 16))
    assert isinstance(p.arg, ParamArg) and (p.arg.slot, p.arg.size) == (3, 16)
    assert p is UOp(Ops.PARAM, dtypes.float32, (), ParamArg(3, 16))  # one node, however the arg was spelled
    slot, size = p.arg  # tinygrad programs unpack these args as tuples
    assert (slot, size) == (3, 16) and p.arg == (3, 16)
    v = Var("n", 1, 64)
    assert isinstance(v.arg, VarArg) and (v.arg.name, v.arg.vmin, v.arg.vmax) == ("n", 1, 64)
    r = Tensor.ones(4, 5).sum(axis=1).uop
    reduce_axis = next(u for u in r.toposort() if u.op is Ops.REDUCE_AXIS)
    assert reduce_axis.arg == ReduceArg(Ops.ADD, (1,)) and reduce_axis.arg.axes == (1,)
    assert UOp(Ops.DEFINE_LOCAL, dtypes.float32, (), (0, 256)).arg == LocalArg(0, 256)
    assert UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx0", 32)).arg.size == 32
    assert set(ARG_RECORDS) == {Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_LOCAL, Ops.REDUCE_AXIS, Ops.SPECIAL}
    assert pickle.loads(pickle.dumps(p.arg)) == p.arg and repr(p.arg) == "ParamArg(3, 16)"
    assert repr(SpecialArg("gidx0", 32)) == "SpecialArg('gidx0', 32)"


def test_a_record_with_the_wrong_arity_is_refused() -> None:
    with pytest.raises(TypeError):
        UOp(Ops.PARAM, dtypes.float32, (), (3, 16, 1))


def _arg_subscripts(path: pathlib.Path) -> list[int]:
    # `x.arg[N]`: the records' fields have names; an index says nothing to a reader and breaks when a field moves
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "arg"]


def test_no_positional_arg_reads_in_the_sources() -> None:
    found = {str(p.relative_to(REPO)): lines for p in SOURCES if (lines := _arg_subscripts(p))}
    assert not found, f"read op args by field name (tinygrad.uop.ops records), not .arg[N]: {found}"


#: explicit-stack loops that are not graph traversals, and the one engine that rewrites graphs
NOT_A_TRAVERSAL = {
    ("packages/tg-core/src/tinygrad/uop/ops.py", "post_order"),  # the shared traversal itself
    ("packages/tg-core/src/tinygrad/uop/ops.py", "pretty"),  # prints a tree, pre-order, with closing text
    ("packages/tg-core/src/tinygrad/uop/rewrite.py", "walk"),  # Rewriter.walk: re-enters rewritten nodes until fixed
    ("packages/tg-core/src/tinygrad/uop/symbolic.py", "_terms"),  # flattens one sum into (term, coefficient)
    ("packages/tg-compiler/src/tinygrad/renderer/vectorize.py", "split_index"),  # flattens one sum into terms
    # flattens one int32 sum into its terms, a term reached twice counted twice (it is added twice)
    ("packages/tg-backend-cpu/src/tg_backend_cpu/byte_dot.py", "_addends"),
    ("packages/tg-core/src/tinygrad/function.py", "_collect"),  # finds the Tensors in nested Python arguments
    # walks whose state differs per path (which axes of the node a reduction's axes became: one node reached along
    # two paths is read at two places), each (node, state) visited once
    ("packages/tg-core/src/tinygrad/engine/schedule.py", "_nested_reductions"),
    ("packages/tg-core/src/tinygrad/engine/schedule.py", "_moved_by"),
    # the unpickler's value stack, not a graph
    ("packages/tg-nn/src/tinygrad/nn/_safe_pickle.py", "_pop"),
    ("packages/tg-nn/src/tinygrad/nn/_safe_pickle.py", "_pop_op"),
}


def _stack_loops(path: pathlib.Path) -> set[tuple[str, str]]:
    """(file, function) of every function that pops from a list named like a stack: the mark of a hand-written
    depth-first walk."""
    out = set()
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            # `stack.pop()`, or `stack.pop` bound to a local name for speed
            if isinstance(node, ast.Attribute) and node.attr == "pop" and "stack" in ast.unparse(node.value):
                out.add((str(path.relative_to(REPO)), fn.name))
    return out


def test_every_graph_walk_goes_through_post_order() -> None:
    loops = set().union(*(_stack_loops(p) for p in SOURCES))
    assert loops - NOT_A_TRAVERSAL == set(), "walk graphs with tinygrad.uop.ops.post_order"
    assert NOT_A_TRAVERSAL - loops == set(), "an exemption names a function that no longer has its loop: drop it"
