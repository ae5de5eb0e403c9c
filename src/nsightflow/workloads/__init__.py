"""Workloads: the user's API (``Workload``, ``Stage``, nsightflow.workloads.api) and the built-in programs (the
decoder, HuggingFace causal LMs, training steps). Depends on nothing else of nsightflow's but its errors."""

from nsightflow.workloads.api import Stage, Workload, WorkloadError, build_workload

__all__ = ["Stage", "Workload", "WorkloadError", "build_workload"]
