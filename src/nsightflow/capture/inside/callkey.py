"""An operator call's key: what its FLOPs and its signature follow from (its operator, its tensors' dtypes, shapes and
strides, its other arguments as written), so the probe pass describes and counts each distinct call once: a decode
step repeats its layers' calls, and describing them again cost more than the operators of a launch-bound step."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from torch import Tensor

from nsightflow.formulas import FLEX_ATTENTION, GROUPED_GEMMS, op_name

# Operators whose work depends on their inputs' values, not only on their shapes: a grouped GEMM runs one GEMM per
# group with sizes read from an offsets tensor (a mixture of experts' tokens per expert), so its tiles, and with
# them its FLOPs and bytes, follow the routing. HuggingFace Mixtral's prefill measured +13.4% tensor FLOPs when its
# two layers' grouped GEMMs, equal calls by shape, were taken as one class.
# Flex attention computes the blocks its block mask lists: equal shapes, different masks, different work.
DATA_DEPENDENT = frozenset({*GROUPED_GEMMS, *FLEX_ATTENTION, "segment_reduce", "_segment_reduce_backward"})


def _arg_key(x: Any) -> Hashable:
    if isinstance(x, Tensor):
        return (x.dtype, x.shape, x.stride())
    kind = type(x)
    if kind is float:
        return ("float", repr(x))  # -0.0 and 0.0 are equal keys otherwise
    if x is None or kind is bool or kind is int or kind is str:
        return (kind, x)
    if isinstance(x, (list, tuple)):
        return tuple([_arg_key(y) for y in x])
    if isinstance(x, (bool, int, float, str)):  # subclasses: as they are described, by value
        return (kind, repr(x))
    return kind.__name__


def call_key(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable | None:
    """What an operator call's FLOPs and signature follow from: the operator, its tensors' dtypes, shapes and
    strides, its other arguments as written (as ``probe.signature`` describes them). None where equal keys may do
    different work (DATA_DEPENDENT operators) or a tensor has no strides (sparse): such calls are never cached."""
    op = id(func)  # operators live as long as torch: their ids are stable, and hash in C (theirs in Python)
    varies = _VARIES.get(op)
    if varies is None:
        varies = _VARIES[op] = op_name(func) in DATA_DEPENDENT
    if varies:
        return None
    try:
        named = tuple([(k, _arg_key(v)) for k, v in sorted(kwargs.items())]) if kwargs else ()
        return (op, tuple([_arg_key(a) for a in args]), named)
    except (RuntimeError, NotImplementedError, TypeError):  # e.g. stride() of a sparse tensor
        return None


_VARIES: dict[int, bool] = {}  # per operator (its id): in DATA_DEPENDENT (looked up once)
