"""The op codes of the UOp IR (`Ops`) and their groups (`GroupOp`).

They live apart from the node type (uop/ops.py) so that the modules the node type builds on, as the ALU reference
semantics (uop/alu.py), can name ops without importing it. uop/ops.py re-exports both.
"""

from __future__ import annotations

import enum


class Ops(enum.Enum):
    # leaves of the tensor graph
    BUFFER = enum.auto()  # arg: Buffer (device storage); shape (size,)
    CONST = enum.auto()  # arg: the Python value; shape ()
    # arg: size; shape (size,); element i holds i in the node's integer dtype. Lowering makes it the loop index
    # itself (no buffer), so a compare with it stays visible to the compiler (codegen/gather_fold.py)
    ARANGE = enum.auto()
    # elementwise ALU; the set a renderer must provide is in docs/device-contract.md, section 2
    NEG = enum.auto(); RECIPROCAL = enum.auto(); SQRT = enum.auto(); EXP2 = enum.auto(); LOG2 = enum.auto()
    SIN = enum.auto(); TRUNC = enum.auto()
    ADD = enum.auto(); SUB = enum.auto(); MUL = enum.auto(); IDIV = enum.auto(); MOD = enum.auto()
    MAX = enum.auto(); CMPLT = enum.auto(); CMPNE = enum.auto(); CMPEQ = enum.auto()
    AND = enum.auto(); OR = enum.auto(); XOR = enum.auto(); SHL = enum.auto(); SHR = enum.auto()
    FDIV = enum.auto()  # float division; decomposed into MUL+RECIPROCAL for renderers without it
    WHERE = enum.auto()
    CAST = enum.auto(); BITCAST = enum.auto()
    # reductions and movement (tensor graph only); REDUCE_AXIS arg: (Ops.ADD|Ops.MAX|Ops.MUL, axes)
    REDUCE_AXIS = enum.auto()
    RESHAPE = enum.auto(); PERMUTE = enum.auto(); EXPAND = enum.auto()
    PAD = enum.auto(); SHRINK = enum.auto(); FLIP = enum.auto()
    # graph structure
    CONTIGUOUS = enum.auto()  # realization boundary; arg may carry a unique tag
    # identity that stops gradients; in a graph lowered per device (multi.py), DETACH(constant, arg=device) keeps
    # the constants of one device's graph apart from another's, which hash-consing would merge
    DETACH = enum.auto()
    # identity whose arg (tinygrad/uop/layout.py) names a layout the value may be read from; the scheduler's layout
    # pass (engine/layout.py) lowers it per target: a copy in that layout, or the value itself
    LAYOUT = enum.auto()
    COPY = enum.auto()  # arg: target device name; a tuple of names: the source replicated on each (multi.py)
    # multi-device values (tinygrad/multi.py): MULTI src: one value per device, arg: the axis they are split
    # along (None: each holds all of it); SHARD: src[0]'s value placed split along arg (None: replicated), or
    # with a second source placed as that one is
    MULTI = enum.auto(); SHARD = enum.auto()
    SINK = enum.auto()
    # kernel level
    PARAM = enum.auto()  # arg: (index, size): a kernel's buffer argument, shape (size,)
    DEFINE_VAR = enum.auto()  # arg: (name, min, max): a symbolic integer bound at launch
    BIND = enum.auto()  # src: (DEFINE_VAR, CONST value): a variable with its value, in the tensor graph
    RANGE = enum.auto()  # arg: RangeArg(axis id, AxisKind); src: (end,)
    INDEX = enum.auto()  # src: (param, idx) or (param, idx, valid)
    LOAD = enum.auto()  # src: (index,)
    STORE = enum.auto()  # src: (index, value)
    REDUCE = enum.auto()  # arg: ALU op; src: (value, *ranges)
    SPECIAL = enum.auto()  # arg: (name, size): a GPU work-item id
    # linearized program
    DEFINE_ACC = enum.auto()  # src: (init,); a mutable accumulator
    ASSIGN = enum.auto()  # src: (acc, value)
    END = enum.auto()  # src: (range,); closes a loop
    IF = enum.auto(); ENDIF = enum.auto()
    BARRIER = enum.auto()
    NOOP = enum.auto()
    DEFINE_LOCAL = enum.auto()  # arg: (id, element count): a work-group's shared scratch buffer (GPU local memory)
    # a tensor core instruction run by a warp (TC opt, tinygrad/codegen/opt/tensor_cores.py); arg: TensorCore;
    # src: (lane, this lane's elements of A..., of B...); its values are this lane's elements of A@B, read by GEP
    WMMA = enum.auto()
    GEP = enum.auto()  # src: (WMMA,); arg: i: element i of the WMMA's result

    # members are singletons, so identity is their hash; Enum's own __hash__ is Python code, and every UOp made or
    # looked up hashes its op
    __hash__ = object.__hash__


class GroupOp:
    Unary = frozenset({Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC})
    Binary = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
                        Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.FDIV})
    Ternary = frozenset({Ops.WHERE})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
    Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX})
