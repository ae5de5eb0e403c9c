"""FLOPs of one operator call, from its shapes: the formulas nsightflow owns (attention of any backend with its
causal mask, grouped GEMMs by their offsets, flex attention by its block mask), torch's formula registry for the other
matmul-like operators, zero for the rest; and the class (gemm, attention, other) each operator counts in.

Runs inside the profiled program (the counting pass); torch is imported only where a formula needs it.
"""

from __future__ import annotations

from typing import Any

CLASSES = ("gemm", "attention", "other")
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


def op_name(func: Any) -> str:
    """An operator's name: its aten overload packet's (``mm``), or a higher-order operator's (``flex_attention``),
    which has no packet and reaches a dispatch mode only where the mode accepts such operators."""
    packet = getattr(func, "overloadpacket", None)
    return packet.__name__ if packet is not None else str(func.name())


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


def routed_tokens(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[int]] | None:
    """(the offsets tensor, tokens per group) of a grouped GEMM whose groups run along tokens: an MoE's experts in
    the forward ((T, K) x (G, K, N)), its input gradient (the same layout) and its weight gradient ((K, T) x (T, N),
    groups along T); None for other layouts. Calls that share one offsets tensor (a layer's projections, forward and
    backward) are one routing."""
    a = _named_args(func, args, kwargs)
    x, offs = a["self"], a.get("offs")
    if offs is None or x.dim() != 2 or offs.numel() == 0:
        return None
    ends = [int(e) for e in offs.tolist()]
    return offs, [e - b for b, e in zip([0, *ends[:-1]], ends, strict=True)]


# The largest tile a tensor-core GEMM computes along M or N (Hopper's cuBLAS and CUTLASS kernels: 64 to 256 rows; a
# grouped GEMM's experts each get whole tiles) and an attention kernel along queries or keys (64 to 128): a dimension
# that is not a multiple is padded, and the padding executed (HFU above MFU). Rounding every dimension up to these
# gives the most FLOPs padding can add.
TILE = 256
ATTENTION_TILE = 128


def _up(n: int, tile: int) -> int:
    return -(-n // tile) * tile


def padding(
    name: str,
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    flops: int,
    routed: tuple[Any, list[int]] | None = None,
) -> tuple[int, str] | None:
    """(the FLOPs of a GEMM or attention call with its dimensions rounded up to the largest tiles, its shape written
    out) where that adds FLOPs to ``flops`` (the call's own, attention in full), else None; None too where the shapes
    cannot be read. Evidence for padding, and its bound: no kernel pads beyond the largest tile. ``routed``: a
    grouped GEMM's routed_tokens, where the caller read them already (each read waits for the device)."""
    try:
        if name in ("mm", "_scaled_mm", "bmm", "addmm", "baddbmm"):
            a = _named_args(func, args, kwargs)
            x, w = a["mat1"] if "mat1" in a else a["self"], a["mat2"]
            m, k, n = int(x.shape[-2]), int(x.shape[-1]), int(w.shape[-1])
            padded = flops * _up(m, TILE) * _up(n, TILE) // (m * n)
            shape = f"{name} {m}x{k}x{n}"
        elif name in GROUPED_GEMMS:
            routed = routed if routed is not None else routed_tokens(func, args, kwargs)
            if routed is None:
                return None
            tokens = routed[1]
            used = sum(tokens)
            padded = flops * sum(_up(t, TILE) for t in tokens) // used if used else 0
            busy = [t for t in tokens if t]
            shape = f"{name} {min(busy)} to {max(busy)} tokens an expert" if busy else name
        elif name in ATTENTION_FORWARD or name in ATTENTION_BACKWARD:
            q, kk = (_named_args(func, args, kwargs)[x] for x in ("query", "key"))
            bhsd = (ATTENTION_FORWARD.get(name) or ATTENTION_BACKWARD[name]) == "bhsd"
            sq, sk = (int(q.shape[2]), int(kk.shape[2])) if bhsd else (int(q.shape[1]), int(kk.shape[1]))
            padded = flops * _up(sq, ATTENTION_TILE) * _up(sk, ATTENTION_TILE) // (sq * sk)
            shape = f"{name} {sq} queries x {sk} keys"
        else:
            return None
    except (KeyError, IndexError, AttributeError, TypeError, ValueError, ZeroDivisionError):
        return None
    return (int(padded), shape) if padded > flops else None


# Words in an operator's name that say it does matrix work (a custom op's ``fused_mm``, ``moe_experts``,
# ``_weight_int4pack_mm``): with no formula its FLOPs are missing from the model count, and said to be.
MATRIX_WORDS = frozenset(
    "mm bmm matmul gemm gemv linear conv conv1d conv2d conv3d attention attn einsum moe expert experts sdpa mha "
    "gqa mla".split()
)


def matrix_like(name: str) -> bool:
    """Whether an operator's name says it does matrix work: one of its words (split at ``_`` and ``.``) is in
    :data:`MATRIX_WORDS` or ends in ``mm`` (``addmm``, ``int8mm``; not ``comm``)."""
    words = [w for w in name.lower().replace(".", "_").split("_") if w]
    return any(w in MATRIX_WORDS or (w.endswith("mm") and w != "comm") for w in words)


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
