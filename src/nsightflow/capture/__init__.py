"""Capture: running a workload under the profilers and planning what they record. The harness (the program the
profilers launch: warm-up, timed, ranged and probe passes), the analytic count, the nsys and ncu commands and their
exports, the attributed timeline, the capture plan and the check of a capture against it; which backend and device a
host offers. Depends on nsightflow.workloads and the core modules."""
