"""NVTX domain names: the stages' own (the harness's, or a hand-made capture's), nsightflow's probe-pass domains
derived from it, and the domains libraries open for their own calls, which are never a program's stages."""

from __future__ import annotations

DEFAULT_DOMAIN = "nsightflow"

# The automatic stages of a command that opens no NVTX range (nsightflow.capture.inside.hook_auto): followed by
# the hook, never emitted to NVTX.
AUTO_DOMAIN = "nsightflow.auto"

# NVTX domains that libraries open for their own calls (CUB/Thrust, NCCL, cuDNN, cuBLAS): never a program's stages.
LIBRARY_DOMAINS = frozenset({"cccl", "nccl", "cudnn", "cublas", "cublaslt", "cusparse", "cufft", "nvshmem"})


def probe_domain(domain: str) -> str:
    """NVTX domain of the probe pass's step ranges (kept apart from the stages' own domain)."""
    return f"{domain}.probe"


def ops_domain(domain: str) -> str:
    """NVTX domain of the probe pass's operator ranges."""
    return f"{domain}.ops"


def ranks_domain(domain: str) -> str:
    """NVTX domain where every rank of a job of several processes mirrors its stage steps (payload: the step)."""
    return f"{domain}.ranks"


def is_nsightflows_own(domain: str) -> bool:
    """Whether ``domain`` is one of the probe pass's or the ranks' (never a program's stages)."""
    return domain.endswith((".probe", ".ops", ".ranks"))
