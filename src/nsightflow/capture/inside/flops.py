"""Analytic FLOPs and bytes of each operator, tallied per stage.

Why not ``FlopCounterMode`` itself: it decomposes operators it has no formula for (which changes the
kernels that run), its attention formulas assert on grouped-query shapes, and which attention ops it
knows differs between torch versions. Each call's FLOPs come from nsightflow.formulas (attention, grouped
GEMMs and flex attention from their shapes and masks, other matmul-like operators by torch's own formula registry,
zero for the rest); this module tallies them, their precisions and bytes per stage. A formula that raises is
recorded as "not counted" for its stage; it never stops the workload.

Model FLOPs are what the model's maths needs: a causal attention's masked half is subtracted in
``flops_causal_adjusted``; ``flops`` counts attention in full, as FlopCounterMode does.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from nsightflow.formulas import (
    CLASSES,
    GROUPED_GEMMS,
    matrix_like,
    op_flops,
    op_name,
    padding,
    routed_tokens,
)
from nsightflow.precisions import tensor_precision
from nsightflow.records import AnalyticCounts, StageCount

GATHER_OPS = {"embedding", "index_select", "gather", "take", "index", "embedding_bag"}
# In-place writes of some elements into a larger tensor (a paged KV cache's index_copy_ of each request's new token):
# the destination counts as the elements written (read too where they are added into), not as its whole size.
SCATTER_OPS = {"index_copy_", "index_add_", "index_put_", "scatter_", "scatter_add_", "scatter_reduce_"}
ADDED_INTO = {"index_add_", "scatter_add_", "scatter_reduce_"}  # read-modify-write of each element written
# Operators that return their input's storage without torch marking them as views (``is_view``): matmul's reshape of
# its product back to the batch's shape. They move nothing; counted, each linear layer's output was counted twice.
UNMARKED_VIEWS = {"_unsafe_view"}


def input_precisions(name: str, klass: str, args: tuple[Any, ...]) -> list[str]:
    """The precision of each input of a GEMM (two operands) or an attention (query, key, value), in order:
    tensor-core ones, or 'fp32' for float32 where TF32 is not allowed; empty for other operators."""
    import torch

    if klass not in ("gemm", "attention"):
        return []
    tensors = [a for a in args if isinstance(a, torch.Tensor)][: 2 if klass == "gemm" else 3]
    # TF32 is a CUDA tensor-core format: torch's allow_tf32 switches say nothing about work on the CPU.
    on_cuda = any(t.is_cuda for t in tensors)
    if "conv" in name:
        tf32 = on_cuda and torch.backends.cudnn.allow_tf32
    else:
        tf32 = on_cuda and (klass == "attention" or torch.backends.cuda.matmul.allow_tf32)
    return [tensor_precision(str(t.dtype).removeprefix("torch."), tf32) for t in tensors]


def moved_bytes(inputs: list[Any], output: Any, gathers: bool = False) -> int:
    """Bytes an operator touches: each distinct input tensor once, plus new outputs.

    Outputs that alias an input (views, in-place results) add nothing; a lookup (``gathers``) reads only as many
    table bytes as it returns (an in-place scatter: :func:`scattered_bytes`). Re-reads are not counted, so this is a
    lower bound on what the operators must touch; DRAM traffic itself can be lower when an intermediate stays in
    cache. A tensor is told apart by its first byte's address (its storage's
    address plus its offset: ``data_ptr``), its storage by that address less its offset.
    """
    from torch import Tensor

    ins = _tensors(inputs, Tensor)
    outs = (
        [output]
        if isinstance(output, Tensor)
        else _tensors(output, Tensor)
        if isinstance(output, (list, tuple))
        else []
    )
    if outs and all(t.numel() == 0 for t in outs):
        return 0  # nothing to produce, nothing read: a GEMM of an empty batch reads no weight either
    total = 0
    seen: set[int] = set()
    if gathers and ins and outs:
        table = ins[0]
        seen.add(table.data_ptr())
        total += min(table.nbytes, sum(t.nbytes for t in outs))
    in_storage = set()
    for t in ins:
        ptr = t.data_ptr()
        if not t.is_meta:
            in_storage.add(ptr - t.storage_offset() * t.element_size())
        if ptr not in seen:
            seen.add(ptr)
            total += t.nbytes
    for t in outs:
        if t.data_ptr() - t.storage_offset() * t.element_size() not in in_storage:
            total += t.nbytes  # (else a view or an in-place result: its bytes were counted as an input)
    return total


def scattered_bytes(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """Bytes an in-place scatter (``SCATTER_OPS``) touches: its indices once, as much of its source as it writes,
    and the destination's elements it writes (read as well where it adds into them). None where how many it writes is
    in the data (a boolean mask's index_put_): the caller then counts the whole destination, as for other operators."""
    import math

    import torch

    dest = args[0]
    if name == "index_put_":
        indices = args[1]
        values = args[2] if len(args) > 2 else kwargs["values"]
        added = bool(args[3] if len(args) > 3 else kwargs.get("accumulate", False))
        given = [t for t in indices if t is not None]
        if not given or any(t.dtype in (torch.bool, torch.uint8) for t in given):
            return None
        picked = math.prod(torch.broadcast_shapes(*(t.shape for t in given)))
        written = picked * math.prod(n for d, n in enumerate(dest.shape) if d >= len(indices) or indices[d] is None)
        read = sum({t.data_ptr(): t.nbytes for t in given}.values())
        source = values
    else:
        index = args[2] if len(args) > 2 else kwargs["index"]
        source = args[3] if len(args) > 3 else kwargs["source" if "source" in kwargs else "src"]
        written = source.numel() if name in ("index_copy_", "index_add_") else index.numel()
        read, added = index.nbytes, name in ADDED_INTO
    if isinstance(source, torch.Tensor):  # (scatter_ may take a number instead)
        read += min(source.nbytes, written * source.element_size())
    return read + written * dest.element_size() * (2 if added else 1)


def _tensors(items: list[Any] | tuple[Any, ...], tensor: type) -> list[Any]:
    """The tensors (instances of ``tensor``) among ``items`` and inside their lists and tuples, in order."""
    found = []
    for x in items:
        if isinstance(x, tensor):
            found.append(x)
        elif isinstance(x, (list, tuple)):
            found += _tensors(x, tensor)
    return found


@dataclass
class StageTally:
    """What the counter sees of one stage, over all its steps, as it goes (its record: nsightflow.records)."""

    steps: int = 0
    calls: int = 0  # operator calls dispatched, views aside (the timeline's probe pass marks as many)
    flops: int = 0
    masked: int = 0
    attention_full: int = 0
    bytes: int = 0
    by_class: dict[str, Any] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    by_op: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, Any] = field(default_factory=dict)  # op -> first error
    graph_replays: int = 0
    stopped: str = ""  # why the counting pass stopped, if it did
    precisions: set[Any] = field(default_factory=set)  # tensor-core precisions of its GEMMs and attentions
    by_precision: dict[str, Any] = field(default_factory=dict)  # their FLOPs, by the precision of the first input
    no_formula: dict[str, int] = field(default_factory=dict)  # operators named like matrix work, no formula: calls
    padded: dict[str, dict[str, Any]] = field(default_factory=dict)  # calls with dimensions not a multiple of a tile
    tile_bound: int = 0  # GEMM and attention FLOPs with every dimension padded to the largest tile: padding's most
    routing: list[list[list[int]]] = field(default_factory=list)  # per step, per routing: tokens per expert
    step_flops: list[int] = field(default_factory=list)  # per step: the model's FLOPs (causal attention's kept part)
    step_bytes: list[int] = field(default_factory=list)  # per step: bytes moved, the lower bound
    # (step, offsets tensor, tokens) of the last routing: the tensor is held, so that while it is compared with, no
    # other (the next layer's offsets) can take its memory and pass for it
    last_offs: tuple[int, Any, list[int]] | None = None

    def record(self) -> StageCount:
        """The stage's entry in analytic_flops.json; FLOPs are None when part of the work was not counted."""
        why = [self.stopped] if self.stopped else []
        if self.failures:
            why.append("a FLOP formula failed for " + "; ".join(f"{op}: {err}" for op, err in self.failures.items()))
        if self.graph_replays:
            why.append(
                f"the stage replays CUDA graphs ({self.graph_replays} replays): the operators inside a graph "
                "run without passing through PyTorch's dispatcher, so they cannot be counted"
            )
        ok = not why
        return StageCount(
            flops=self.flops if ok else None,
            flops_causal_adjusted=self.flops - self.masked if ok else None,
            attention_flops_full=self.attention_full if ok else None,
            causal_masked_flops=self.masked if ok else None,
            by_class=dict(self.by_class) if ok else None,
            bytes_lower_bound=self.bytes if ok else None,
            repeats=self.steps,
            calls=self.calls,
            by_op=dict(self.by_op),
            tensor_precisions=sorted(self.precisions) if ok else None,
            by_precision=dict(self.by_precision),
            graph_replays=self.graph_replays,
            not_counted=why,
            no_formula=dict(self.no_formula),
            padded={k: dict(v) for k, v in self.padded.items()},
            tile_bound=self.tile_bound if ok else None,
            routing=[list(step) for step in self.routing],
            step_flops=list(self.step_flops) if ok else None,
            step_bytes=list(self.step_bytes) if ok else None,
        )

    def route(self, routed: tuple[Any, list[int]] | None) -> None:
        """Record a grouped GEMM's tokens per expert (formulas.routed_tokens), once per routing: calls that share
        its offsets tensor in a row (a layer's projections, their gradients) are one."""
        if routed is None:
            return
        step = self.steps - 1
        offs, tokens = routed
        last = self.last_offs
        # the same offsets (a saved tensor unpacked in the backward is another object over the same memory)
        if last is not None and last[0] == step and last[1].data_ptr() == offs.data_ptr() and last[2] == tokens:
            return
        self.last_offs = (step, offs, tokens)
        while len(self.routing) <= step:
            self.routing.append([])
        self.routing[step].append(tokens)


class Tally:
    """FLOPs and bytes per stage, fed one operator at a time by the probe pass."""

    def __init__(self) -> None:
        self.stages: dict[str, StageTally] = {}
        self.current: StageTally | None = None
        # op_flops of calls seen, and their FLOPs and shape padded to the largest tiles (formulas.padding), by call_key
        self._flops: dict[Hashable, tuple[str, int, int, tuple[int, str] | None]] = {}
        # per operator (by id): its name, its label in by_op, whether it moves data (views do not), whether it gathers
        self._ops: dict[int, tuple[str, str, bool, bool, bool]] = {}

    def begin(self, stage: str) -> None:
        self.current = self.stages.setdefault(stage, StageTally())
        self.current.steps += 1
        self.current.step_flops.append(0)
        self.current.step_bytes.append(0)

    def end(self) -> None:
        if self.current is not None:
            self.current.last_offs = None  # a routing never spans steps: the offsets tensor is let go
        self.current = None

    def graph_replay(self) -> None:
        if self.current is not None:
            self.current.graph_replays += 1

    def add(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, key: Hashable | None = None
    ) -> None:
        """Count one operator call; ``key`` (nsightflow.capture.inside.callkey's, where the caller has it) lets equal
        calls reuse the first one's FLOPs: the formulas read shapes only, and a decode step repeats its layers'
        calls."""
        s = self.current
        if s is None:
            return
        s.calls += 1
        op = self._ops.get(id(func))  # operators live as long as torch; their own hash runs in Python
        if op is None:
            name = op_name(func)
            packet = getattr(func, "overloadpacket", None)
            label = str(packet) if packet is not None else name  # aten.mm, mylib.fused_mm, flex_attention
            moves = not getattr(func, "is_view", False) and name not in UNMARKED_VIEWS
            gathers = name in GATHER_OPS
            op = self._ops[id(func)] = (name, label, moves, gathers, matrix_like(name))
        name, label, moves, gathers, matrix = op
        known = self._flops.get(key) if key is not None else None
        if known is None:
            try:
                klass, flops, masked = op_flops(func, args, kwargs, out)
                routed = routed_tokens(func, args, kwargs) if name in GROUPED_GEMMS else None
                padded = padding(name, func, args, kwargs, flops, routed) if klass != "other" and flops else None
                s.route(routed)
            except Exception as exc:  # a formula that cannot handle these shapes: say so, keep running
                s.failures.setdefault(name, repr(exc)[:300])
                return
            known = (klass, flops, masked, padded)
            if key is not None:
                self._flops[key] = known
        klass, flops, masked, padded = known
        if klass == "other" and not flops and matrix:
            s.no_formula[label] = s.no_formula.get(label, 0) + 1
        if klass != "other":
            s.tile_bound += padded[0] if padded is not None else flops
        if padded is not None:
            entry = s.padded.setdefault(label, {"calls": 0, "flops": 0, "padded": 0, "shape": padded[1]})
            entry["calls"] += 1
            entry["flops"] += flops
            entry["padded"] += padded[0]
        if klass != "other":
            inputs = input_precisions(name, klass, args)
            s.precisions.update(inputs)
            if inputs and flops:
                s.by_precision[inputs[0]] = s.by_precision.get(inputs[0], 0) + flops
        if flops:
            s.flops += flops
            s.masked += masked
            if s.step_flops:
                s.step_flops[-1] += flops - masked
            s.by_class[klass] += flops
            if klass == "attention":
                s.attention_full += flops
            s.by_op[label] = s.by_op.get(label, 0) + flops
        if moves:  # views move no data
            moved = None
            if name in SCATTER_OPS:
                try:
                    moved = scattered_bytes(name, args, kwargs)
                except Exception:  # arguments of another form than the schema's: the whole destination counts
                    moved = None
            if moved is None:
                moved = moved_bytes([*args, *kwargs.values()], out, gathers=gathers)
            s.bytes += moved
            if s.step_bytes:
                s.step_bytes[-1] += moved

    def failed(self, stages: list[str], why: str) -> None:
        """The counting pass stopped: every stage's count is missing, with the reason."""
        for name in stages:
            self.stages.setdefault(name, StageTally()).stopped = why[:500]

    def result(self) -> AnalyticCounts:
        return AnalyticCounts(
            stages={name: s.record() for name, s in self.stages.items()},
            method="operators seen by a TorchDispatchMode in a pass outside the measured ranges: attention, "
            "grouped GEMMs and flex attention from shapes and masks (nsightflow.formulas), matmul-like "
            "operators from torch.utils.flop_counter's formulas (register_flop_formula adds yours), other "
            "operators 0 FLOPs (those named like matrix work listed as no_formula); bytes: each operator's tensors "
            "touched once (a lookup's table and an in-place scatter's destination: the elements read or written)",
        )
