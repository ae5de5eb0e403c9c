"""Analytic FLOPs and bytes of each operator, tallied per stage.

Why not ``FlopCounterMode`` itself: it decomposes operators it has no formula for (which changes the
kernels that run), its attention formulas assert on grouped-query shapes, and which attention ops it
knows differs between torch versions. Here attention is counted from shapes by this module (any number
of key/value heads, the causal mask, every SDPA backend, forward and backward), the other matmul-like
operators by torch's own formula registry, and every other operator counts zero FLOPs. A formula that
raises is recorded as "not counted" for its stage; it never stops the workload.

Model FLOPs are what the model's maths needs: a causal attention's masked half is subtracted in
``flops_causal_adjusted``; ``flops`` counts attention in full, as FlopCounterMode does.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

from nsightflow.records import AnalyticCounts, StageCount

GEMM_OPS = {
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "_scaled_mm",
    "_grouped_mm",
    "_scaled_grouped_mm",
    "convolution",
    "_convolution",
    "convolution_backward",
    "cudnn_convolution",
    "convolution_overrideable",
    "_slow_conv2d_forward",
}
# SDPA operators (any backend) and the layout of their query/key/value: (b, h, s, d) for the
# _scaled_dot_product_* family, (b, s, h, d) for the lower-level kernels called directly.
ATTENTION_FORWARD = {
    "_scaled_dot_product_flash_attention": "bhsd",
    "_scaled_dot_product_flash_attention_for_cpu": "bhsd",
    "_scaled_dot_product_efficient_attention": "bhsd",
    "_scaled_dot_product_cudnn_attention": "bhsd",
    "_scaled_dot_product_fused_attention_overrideable": "bhsd",
    "_flash_attention_forward": "bshd",
    "_efficient_attention_forward": "bshd",
}
ATTENTION_BACKWARD = {f"{name}_backward": layout for name, layout in ATTENTION_FORWARD.items()}
# Flex attention's higher-order operators (b, h, s, d), counted from their block masks.
FLEX_ATTENTION = {"flex_attention": 1, "flex_attention_backward": 2}
GATHER_OPS = {"embedding", "index_select", "gather", "take", "index", "embedding_bag"}
CLASSES = ("gemm", "attention", "other")
# The tensor-core precision of a GEMM's or attention's inputs (the names of nsightflow.capture.ncu's FLOP counters);
# float32 runs on tensor cores only as TF32, where torch allows it, else on the FMA units ('fp32'). Any other
# dtype is kept by its name.
TENSOR_PRECISIONS = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float64": "fp64_tensor",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8",
}


def op_name(func: Any) -> str:
    """An operator's name: its aten overload packet's (``mm``), or a higher-order operator's (``flex_attention``),
    which has no packet and reaches a dispatch mode only where the mode accepts such operators."""
    packet = getattr(func, "overloadpacket", None)
    return packet.__name__ if packet is not None else str(func.name())


SIMT = "fp32"  # float32 matrix work on the FMA units (without TF32): its FLOPs are SASS counts, not tensor ones
UNKNOWN = "unknown"  # no precision can be told (or one with no FLOP peak, integers): no compute peak is taken


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


def tensor_precision(dtype: str, tf32: bool) -> str:
    """The precision matrix work on inputs of ``dtype`` runs in: a tensor-core one, TF32 for float32 where
    allowed, else 'fp32' (the FMA units); any other dtype keeps its name."""
    if dtype == "float32":
        return "tf32" if tf32 else SIMT
    return TENSOR_PRECISIONS.get(dtype, dtype)


# The dtype a precision's matrix work takes as input (the measured ceiling multiplies in it): TENSOR_PRECISIONS
# inverted (fp8: its first dtype, float8_e4m3fn), and float32 for TF32 and the FMA units.
PRECISION_DTYPE = {"tf32": "float32", SIMT: "float32", **{p: d for d, p in reversed(TENSOR_PRECISIONS.items())}}


@dataclass(frozen=True)
class MatmulPrecision:
    """The precision a run's MFU divides by (a peak's name) and the dtype of its matrix work; where that came
    from ('probe': the probe pass's GEMMs; 'declared': the workload's dtype, where the probe saw no GEMM;
    'fallback': no GEMM at all, float32 for the FMA units' work; 'unknown': nothing tells, or the GEMMs ran in
    a precision with no FLOP peak, such as integers: no compute peak is taken); how the report's diagnostics
    should say it ('warning', 'info', or '' when it is just the declared dtype); and why, in words."""

    precision: str
    dtype: str
    source: Literal["probe", "declared", "fallback", "unknown"]
    level: Literal["warning", "info", ""]
    why: str


def matmul_precision(declared: str | None, stages: dict[str, StageCount] | None) -> MatmulPrecision:
    """The precision of a workload's matrix work, as it ran: that of most GEMM and attention FLOPs in the probe
    pass (``stages``: the analytic count's, nsightflow.records; a tie goes to the declared dtype),
    else the declared dtype's, else float32. A model declared float32 that multiplies under autocast in bf16
    is measured against the bf16 peak: the declared dtype's would put MFU above 100%."""
    by: dict[str, float] = {}
    for rec in (stages or {}).values():
        for p, n in (rec.by_precision or {}).items():
            by[p] = by.get(p, 0) + n
    mine = tensor_precision(declared, tf32=False) if declared else None
    known = {p: n for p, n in by.items() if p in PRECISION_DTYPE and n > 0}
    if known:
        top = max(known, key=lambda p: (known[p], p == mine))
        why = f"{known[top] / sum(by.values()):.0%} of the GEMM and attention FLOPs of the probe pass ran in {top}"
        level: Literal["warning", "info", ""]
        if declared is None:
            level, why = "info", "not declared by the workload: " + why
        elif PRECISION_DTYPE[top] != declared:
            level, why = "warning", f"the workload declares {declared}, but {why}"
        else:  # as declared, or a declared float32 multiplying as TF32
            level, why = ("" if top == mine else "info"), f"the workload declares {declared}; {why}"
        return MatmulPrecision(top, PRECISION_DTYPE[top], "probe", level, why)
    other = sorted(p for p, n in by.items() if p not in PRECISION_DTYPE and n > 0)
    if other:
        why = f"the probe pass's GEMMs ran in {', '.join(other)}, which has no FLOP peak here: no MFU or HFU"
        return MatmulPrecision(UNKNOWN, "float32", "unknown", "warning", why)
    # No count, a stage not counted, or GEMM FLOPs counted without their precisions (an older count): blind.
    blind = stages is None or any(
        rec.not_counted or (not rec.by_precision and any((rec.by_class or {}).get(c) for c in CLASSES[:2]))
        for rec in stages.values()
    )
    seen = "no probe pass counted this launch" if stages is None else "the probe pass saw no GEMM FLOPs"
    if blind and stages is not None:
        missed = "; ".join(w for rec in stages.values() for w in rec.not_counted)
        seen = (
            f"the probe pass could not count every stage ({missed[:300]})"
            if missed
            else "the analytic count does not say which precision its GEMMs ran in"
        )
    if declared is not None:
        return MatmulPrecision(mine or declared, declared, "declared", "", f"declared by the workload ({seen})")
    if blind:
        # Nothing tells which precision the GEMMs ran in: no compute peak is taken (a float32 peak for bf16 work
        # would put MFU at many times 100%); the ceilings are measured in float32, as a reference only.
        why = f"not declared by the workload, and {seen}: no compute peak, so no MFU or HFU; declare its dtype"
        return MatmulPrecision(UNKNOWN, "float32", "unknown", "warning", why)
    why = f"not declared by the workload, and {seen}: its FLOPs run on the FMA units, float32 taken"
    return MatmulPrecision(SIMT, "float32", "fallback", "info", why)


def causal_kept(sq: int, sk: int) -> int:
    """(query, key) pairs a causal mask keeps: query i sees keys 0..i (torch's top-left alignment)."""
    if sq <= sk:
        return sq * (sq + 1) // 2
    return sk * (sk + 1) // 2 + (sq - sk) * sk


def _named_args(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Arguments of an aten call by schema name (positions differ between operators and versions)."""
    names = [a.name for a in func._schema.arguments]
    out = dict(zip(names, args, strict=False))
    out.update(kwargs)
    return out


def attention_flops(name: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int]:
    """(FLOPs in full, FLOPs the causal mask removes) of one SDPA call, from its shapes.

    Forward: Q·Kᵀ and P·V, 2·b·hq·sq·sk·(d + dv). Backward: dV, dP, dQ, dK, twice the forward
    (the score recomputation of flash kernels is an implementation detail, not model work).
    Grouped-query and multi-query attention use the query heads: each query head does its own products.
    """
    a = _named_args(func, args, kwargs)
    layout = ATTENTION_FORWARD.get(name) or ATTENTION_BACKWARD[name]
    q, k, v = a["query"], a["key"], a["value"]
    if layout == "bhsd":
        b, hq, sq, d = q.shape
        sk, dv = k.shape[-2], v.shape[-1]
    else:
        b, sq, hq, d = q.shape
        sk, dv = k.shape[1], v.shape[-1]
    full = 2 * b * hq * sq * sk * (d + dv)
    if name in ATTENTION_BACKWARD:
        full *= 2
    causal = bool(a.get("is_causal", False)) or a.get("custom_mask_type", 0) == 1
    masked = full - full * causal_kept(sq, sk) // (sq * sk) if causal else 0
    return int(full), int(masked)


GROUPED_GEMMS = {"_grouped_mm", "_scaled_grouped_mm"}


def grouped_mm_flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """FLOPs of one grouped GEMM (an MoE's experts in one call), 2·Σ mᵍ·nᵍ·kᵍ over its groups. ``offs`` holds the
    groups' cumulative ends along the dimension the operands share unbatched: rows of a 2-D first operand
    (tokens routed to each expert), columns of a 2-D second, or K when both are 2-D (a weight gradient); without
    it both operands are 3-D, one product per group. Rows past the last end are padding, not work: reading the
    last end waits for the device once per call, in the counting pass only."""
    a = _named_args(func, args, kwargs)
    x, w, offs = a["self"], a["mat2"], a.get("offs")
    used = int(offs[-1].item()) if offs is not None and offs.numel() else None
    if x.dim() == 3 and w.dim() == 3:
        g, m, k = x.shape
        return 2 * g * m * k * int(w.shape[-1])
    if used is None:
        raise ValueError(f"a grouped GEMM of a {x.dim()}-D and a {w.dim()}-D operand needs offs")
    if x.dim() == 2 and w.dim() == 3:  # tokens by expert: (T, K) x (G, K, N)
        return 2 * used * int(x.shape[1]) * int(w.shape[-1])
    if x.dim() == 3 and w.dim() == 2:  # (G, M, K) x (K, N total)
        return 2 * int(x.shape[1]) * int(x.shape[2]) * used
    return 2 * int(x.shape[0]) * int(w.shape[1]) * used  # (M, K total) x (K total, N): groups along K


def _block_mask(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The block mask among a flex attention operator's arguments: the tuple of its block counts and indices,
    ending with its two block sizes and its mask function (BlockMask.as_tuple, whose leading fields vary between
    torch versions)."""
    for a in args:
        if isinstance(a, tuple) and len(a) >= 6 and callable(a[-1]) and isinstance(a[-2], int):
            return a
    raise ValueError("no block mask among flex attention's arguments")


KEPT_CHUNK = 1 << 24  # (query, key) pairs a mask function is evaluated on at once


def flex_kept_pairs(block_mask: tuple[Any, ...], batch: int, heads: int, sq: int, sk: int) -> int:
    """(query, key) pairs a flex attention's mask keeps, over its batch and query heads: full blocks whole,
    partial blocks by the mask function itself, evaluated on their positions (the model's work, not the
    kernels': a partial block is computed whole)."""
    import torch

    tensors = [i for i, x in enumerate(block_mask) if isinstance(x, torch.Tensor)]
    first = tensors[0]
    kv_num, kv_idx = block_mask[first], block_mask[first + 1]
    full_num, full_idx = block_mask[first + 2], block_mask[first + 3]
    qb, kb, mask_mod = block_mask[-3], block_mask[-2], block_mask[-1]
    mb, mh = int(kv_num.shape[0]), int(kv_num.shape[1])  # 1 where the mask is the same for every batch or head
    device = kv_num.device
    kept = 0
    for b in range(mb):
        for h in range(mh):
            for qi in range(int(kv_num.shape[2])):
                q0, q1 = qi * qb, min((qi + 1) * qb, sq)
                if q0 >= sq:
                    break
                if full_num is not None:
                    for j in full_idx[b, h, qi, : int(full_num[b, h, qi])].tolist():
                        kept += (q1 - q0) * max(0, min((j + 1) * kb, sk) - j * kb)
                blocks = kv_idx[b, h, qi, : int(kv_num[b, h, qi])].tolist()
                if not blocks:
                    continue
                q = torch.arange(q0, q1, device=device)[:, None]
                cols = torch.cat([torch.arange(j * kb, min((j + 1) * kb, sk), device=device) for j in blocks])
                bt, ht = torch.tensor(b, device=device), torch.tensor(h, device=device)
                step = max(1, KEPT_CHUNK // (q1 - q0))
                for c in range(0, len(cols), step):
                    part = cols[None, c : c + step]
                    kept += int(torch.broadcast_to(mask_mod(bt, ht, q, part), (q1 - q0, part.shape[1])).sum())
    return kept * (batch // mb) * (heads // mh)


def flex_attention_flops(name: str, args: tuple[Any, ...]) -> tuple[int, int]:
    """(FLOPs in full, FLOPs the block mask removes) of one flex attention call (forward, or backward at twice
    the forward's), as attention_flops counts SDPA's: Q·Kᵀ and P·V over every (query, key) pair, less the pairs
    the mask drops."""
    q, k, v = args[0], args[1], args[2]
    b, hq, sq, d = (int(x) for x in q.shape)
    sk, dv = int(k.shape[-2]), int(v.shape[-1])
    per_pair = 2 * (d + dv) * FLEX_ATTENTION[name]
    full = per_pair * b * hq * sq * sk
    kept = flex_kept_pairs(_block_mask(args), b, hq, sq, sk)
    return full, full - per_pair * kept


def op_class(name: str) -> str:
    """The class of an operator (its aten overload packet's name): gemm, attention or other. The analytic
    count and the measured FLOPs (through the operator that launched each kernel) use the same classes."""
    if name in ATTENTION_FORWARD or name in ATTENTION_BACKWARD or name in FLEX_ATTENTION:
        return "attention"
    return "gemm" if name in GEMM_OPS else "other"


def op_flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> tuple[str, int, int]:
    """(class, FLOPs, FLOPs masked by causality) of one operator; raises when its formula fails."""
    from torch.utils.flop_counter import flop_registry

    name = op_name(func)
    klass = op_class(name)
    if name in FLEX_ATTENTION:
        full, masked = flex_attention_flops(name, args)
        return klass, full, masked
    if klass == "attention":
        full, masked = attention_flops(name, func, args, kwargs)
        return klass, full, masked
    if name in GROUPED_GEMMS:
        return klass, grouped_mm_flops(func, args, kwargs), 0
    formula = flop_registry.get(func.overloadpacket)
    if formula is None:
        return "other", 0, 0
    return klass, int(formula(*args, **kwargs, out_val=out)), 0


def moved_bytes(inputs: list[Any], output: Any, gathers: bool = False) -> int:
    """Bytes an operator touches: each distinct input tensor once, plus new outputs.

    Outputs that alias an input (views, in-place results) add nothing; a lookup (``gathers``)
    reads only as many table bytes as it returns. Re-reads are not counted, so this is a lower
    bound on what the operators must touch; DRAM traffic itself can be lower when an
    intermediate stays in cache. A tensor is told apart by its first byte's address (its storage's
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
        )


class Tally:
    """FLOPs and bytes per stage, fed one operator at a time by the probe pass."""

    def __init__(self) -> None:
        self.stages: dict[str, StageTally] = {}
        self.current: StageTally | None = None
        self._flops: dict[Hashable, tuple[str, int, int]] = {}  # op_flops of calls seen, by call_key
        # per operator (by id): its name, its label in by_op, whether it moves data (views do not), whether it gathers
        self._ops: dict[int, tuple[str, str, bool, bool]] = {}

    def begin(self, stage: str) -> None:
        self.current = self.stages.setdefault(stage, StageTally())
        self.current.steps += 1

    def end(self) -> None:
        self.current = None

    def graph_replay(self) -> None:
        if self.current is not None:
            self.current.graph_replays += 1

    def add(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, key: Hashable | None = None
    ) -> None:
        """Count one operator call; ``key`` (nsightflow.capture.callkey's, where the caller has it) lets equal calls
        reuse the first one's FLOPs: the formulas read shapes only, and a decode step repeats its layers' calls."""
        s = self.current
        if s is None:
            return
        s.calls += 1
        op = self._ops.get(id(func))  # operators live as long as torch; their own hash runs in Python
        if op is None:
            name = op_name(func)
            label = f"aten.{name}" if hasattr(func, "overloadpacket") else name
            op = self._ops[id(func)] = (name, label, not getattr(func, "is_view", False), name in GATHER_OPS)
        name, label, moves, gathers = op
        known = self._flops.get(key) if key is not None else None
        if known is None:
            try:
                known = op_flops(func, args, kwargs, out)
            except Exception as exc:  # a formula that cannot handle these shapes: say so, keep running
                s.failures.setdefault(name, repr(exc)[:300])
                return
            if key is not None:
                self._flops[key] = known
        klass, flops, masked = known
        if klass != "other":
            inputs = input_precisions(name, klass, args)
            s.precisions.update(inputs)
            if inputs and flops:
                s.by_precision[inputs[0]] = s.by_precision.get(inputs[0], 0) + flops
        if flops:
            s.flops += flops
            s.masked += masked
            s.by_class[klass] += flops
            if klass == "attention":
                s.attention_full += flops
            s.by_op[label] = s.by_op.get(label, 0) + flops
        if moves:  # views move no data
            s.bytes += moved_bytes([*args, *kwargs.values()], out, gathers=gathers)

    def failed(self, stages: list[str], why: str) -> None:
        """The counting pass stopped: every stage's count is missing, with the reason."""
        for name in stages:
            self.stages.setdefault(name, StageTally()).stopped = why[:500]

    def result(self) -> AnalyticCounts:
        return AnalyticCounts(
            stages={name: s.record() for name, s in self.stages.items()},
            method="operators seen by a TorchDispatchMode in a pass outside the measured ranges: attention "
            "from shapes (nsightflow.capture.flops), matmul-like operators from torch.utils.flop_counter's "
            "formulas, other operators 0 FLOPs; bytes: each operator's tensors touched once",
        )
