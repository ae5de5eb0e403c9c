"""Every column of a run's tables (``stages.csv``, ``kernels.csv``), in one registry: its name, the header a page
shows, how a cell is written, what it means, and which backends fill it. The analysis writes the tables in this
order and refuses a column the registry lacks (nsightflow.analysis.runfiles); the pages take headers, formats and
definitions from here (nsightflow.report.pages); a test checks that every column a backend produces is registered
and every registered column is produced somewhere (tests/test_columns.py).

Formats (nsightflow.report.tables.FORMATS): text, count, ms, ns_as_ms, flop, bytes, pct, flop_rate, byte_rate,
intensity, bool.
"""

from __future__ import annotations

from dataclasses import dataclass

NSIGHT, TORCH, CAPTURES = "nsight", "torch", "captures"
ALL = frozenset({NSIGHT, TORCH, CAPTURES})
COUNTERS = frozenset({NSIGHT, CAPTURES})  # where ncu's counters can exist
HOST_RUN = frozenset({NSIGHT, TORCH})  # where nsightflow ran the program
NSIGHT_ONLY = frozenset({NSIGHT})


@dataclass(frozen=True)
class Column:
    """One column of a run's table."""

    name: str
    header: str
    fmt: str
    definition: str = ""  # the header's tooltip and, with ``term``, a glossary entry
    backends: frozenset[str] = ALL  # the backends that fill it (possibly empty for a stage or kernel)
    shown: bool = True  # a column of the page's table (else only in the CSV)
    term: str = ""  # the glossary's name for it, where the glossary explains it


STAGES: tuple[Column, ...] = (
    Column("stage", "stage", "text"),
    Column("range_instances", "ranges", "count", "NVTX (or record_function) ranges of the stage: its steps"),
    Column(
        "wall_ms",
        "wall ms",
        "ms",
        "the stage's steady steps as the program runs them, summed (no profiler collecting): a callable's each "
        "synchronized, a command's ranges on the GPU's clock; captures made elsewhere: their annotated ranges'",
        term="wall",
    ),
    Column(
        "wall_profiled_ms",
        "wall under profiler ms",
        "ms",
        "the same steps inside their NVTX (or record_function) ranges under the profiler, which adds time to every "
        "launch (nsys about 30 µs on an H200): what the timeline shows, not what the program takes",
        term="wall under profiler",
    ),
    Column(
        "pace_ms",
        "pace ms / step",
        "ms",
        "a command's steady steps that the stage's next step follows: the median time from one's start to the next's "
        "(timed run, the GPU's clock), the program's time between its ranges included: its own time per step or token",
        HOST_RUN,
        term="pace",
    ),
    Column(
        "gpu_busy_ms",
        "busy ms",
        "ms",
        "time the GPU was running the stage's kernels, from the timeline; on a CPU, the operators' time, or where "
        "torch.profiler's slowing puts that above the program's wall, their share of the profiled steps applied to "
        "the wall: never above it; busy / wall well below 1 means the host (Python, launches, dispatch) sets the pace",
        term="busy",
    ),
    Column(
        "comm_ms",
        "communication ms",
        "ms",
        "time of the stage's communication kernels (NCCL), part of its busy time; ncu never profiles them (a "
        "replayed collective deadlocks its peers), so coverage is the share of the rest",
        COUNTERS,
        shown=False,
    ),
    Column("kernels", "kernels", "count", "distinct kernels (or operators) of the stage", shown=False),
    Column("classes", "launch classes", "count", "classes of identical launches profiled", COUNTERS),
    Column("profiled_launches", "launches profiled", "count", "launches ncu profiled for the stage", COUNTERS),
    Column(
        "coverage",
        "coverage",
        "pct",
        "share of the stage's busy time whose kernels have ncu counters (scaled from representative launches "
        "where identical launches were profiled once)",
        COUNTERS,
        term="coverage",
    ),
    Column("flops_measured", "FLOPs (ncu)", "flop", "FLOPs the device executed: tensor pipes and FMA units", COUNTERS),
    Column("flops_tensor_measured", "tensor FLOPs (per kernel)", "flop", "FLOPs of the tensor pipes", COUNTERS),
    Column(
        "flops_measured_gemm",
        "GEMM FLOPs (ncu)",
        "flop",
        "measured FLOPs of the kernels launched by matmul-like operators, by attention operators, and by every other "
        "operator, as the probe pass saw each kernel's operator (kernels launched outside any operator, e.g. by "
        "CUDA-graph replays or compiled graphs, are in none of the three): beside the model's GEMM and attention "
        "FLOPs, they show where executed work differs from the model's (causal attention computes whole tiles on "
        "the diagonal; elementwise kernels execute FLOPs the model count leaves out)",
        COUNTERS,
        term="GEMM / attention / other FLOPs (ncu)",
    ),
    Column("flops_measured_attention", "attention FLOPs (ncu)", "flop", backends=COUNTERS),
    Column("flops_measured_other", "other FLOPs (ncu)", "flop", backends=COUNTERS),
    Column(
        "flops_measured_unattributed",
        "FLOPs outside operators (ncu)",
        "flop",
        "FLOPs of kernels no operator launched (CUDA-graph replays, compiled code)",
        COUNTERS,
    ),
    Column("flops_analytic", "FLOPs (model, full attention)", "flop", "the model's FLOPs with attention in full"),
    Column("flops_analytic_causal", "FLOPs (model)", "flop", "the model's FLOPs, causal attention's kept part only"),
    Column("flops_analytic_gemm", "of which GEMM", "flop"),
    Column("flops_analytic_attention", "of which attention", "flop"),
    Column("flops_analytic_other", "of which other", "flop", shown=False),
    Column(
        "flops_not_counted",
        "FLOPs without a formula (ncu)",
        "flop",
        "tensor FLOPs executed by kernels of operators the model count has no FLOP formula for (an operator it gave "
        "no FLOPs whose kernels ran on the tensor pipes): MFU leaves them out; not_counted_ops names them",
        COUNTERS,
        term="FLOPs without a formula",
    ),
    Column(
        "not_counted_ops",
        "operators without a formula",
        "text",
        "operators whose FLOPs the model count leaves out: named like matrix work with no formula (counting pass), "
        "or whose kernels executed tensor FLOPs (ncu); a formula registered with "
        "torch.utils.flop_counter.register_flop_formula counts them",
        shown=False,
    ),
    Column(
        "executed_over_model", "executed / model", "intensity", "FLOPs executed over the model's (HFU / MFU)", COUNTERS
    ),
    Column("dram_bytes_measured", "DRAM bytes (ncu)", "bytes", "bytes read and written in device memory", COUNTERS),
    Column("mfu_wall", "MFU on wall", "pct", "model FLOPs per second of wall time, over the compute peak"),
    Column(
        "mfu_busy",
        "MFU on busy",
        "pct",
        "model FLOP utilisation: the model's FLOPs (counted from shapes: GEMMs and attention, causal part only) per "
        "second of busy (or wall) time, over the peak",
        term="MFU",
    ),
    Column("hfu_wall", "HFU on wall", "pct", "executed FLOPs per second of wall time, over the peak", COUNTERS),
    Column(
        "hfu_busy",
        "HFU on busy",
        "pct",
        "hardware FLOP utilisation: FLOPs the device executed (ncu's tensor and FMA counters, padding and "
        "recomputation included) per second, over the peak; where the FLOPs outside the tensor pipes were not "
        "collected (ncu.non_tensor_flops), the tensor pipes' FLOPs alone",
        COUNTERS,
        term="HFU",
    ),
    Column(
        "dram_bw_util_busy",
        "DRAM BW util on busy",
        "pct",
        "bytes read and written in device memory (ncu) per second of busy time, over the peak bandwidth",
        COUNTERS,
        term="DRAM BW util",
    ),
    Column("dram_bw_util_wall", "DRAM BW util on wall", "pct", "the same per second of wall time", COUNTERS),
    Column(
        "bytes_analytic",
        "bytes touched (operators)",
        "bytes",
        "bytes of every operator's tensors, each touched once: a lower bound of memory traffic",
    ),
    Column(
        "bw_util_busy_model",
        "BW util on busy (operator bytes)",
        "pct",
        "on torch.profiler: bytes of every operator's tensors, each touched once (a lower bound of memory traffic), "
        "per second of busy time, over the measured copy rate",
        term="BW util (operator bytes)",
    ),
    Column("mfu_busy_ceiling", "MFU on busy vs measured ceiling", "pct", "MFU against the measured matmul rate"),
    Column(
        "mfu_wall_datasheet",
        "MFU on wall vs datasheet",
        "pct",
        "model FLOPs per second of wall time over the datasheet's dense peak of the precision (H100 SXM bf16: "
        "989 TFLOP/s), the denominator Megatron-LM, torchtitan and the Llama 3 paper divide by: compare published "
        "MFU figures with this one; MFU on wall divides by the peak this device's own clocks give",
        term="MFU vs datasheet",
    ),
    Column("mfu_busy_datasheet", "MFU on busy vs datasheet", "pct", "the same per second of busy time"),
    Column(
        "dram_bw_util_busy_ceiling",
        "DRAM BW util vs measured copy",
        "pct",
        "DRAM bandwidth against the measured copy rate",
        COUNTERS,
    ),
    Column("flops_tensor_ranges", "tensor FLOPs (range replay)", "flop", "from ncu.ranges' range results", COUNTERS),
    Column("dram_bytes_ranges", "DRAM bytes (range replay)", "bytes", "from ncu.ranges' range results", COUNTERS),
    Column("busy_over_wall", "busy / wall", "pct", "busy time over wall time"),
    Column(
        "memory_allocated_peak",
        "peak memory allocated",
        "bytes",
        "the most device memory torch's caching allocator had allocated to tensors during one of the stage's steps "
        "(a callable's timed run; a command's run under nsys: as the program runs)",
        term="peak memory",
    ),
    Column(
        "memory_reserved_peak",
        "peak memory reserved",
        "bytes",
        "the most device memory the caching allocator held from the driver during one of the stage's steps (allocated "
        "plus its cache): what the program needs free",
    ),
    Column(
        "memory_rss_peak",
        "peak resident memory (host)",
        "bytes",
        "the process's peak resident memory during one of the stage's steps (Linux's high-water mark, reset before "
        "each step): on a CPU, its tensors, Python and libraries together",
    ),
    Column(
        "expert_gemm_ms",
        "expert GEMMs ms",
        "ms",
        "time of the stage's grouped GEMMs (a mixture of experts' expert GEMMs; operator time on a CPU)",
        term="expert GEMMs",
    ),
    Column("expert_gemm_share", "expert share", "pct", "the expert GEMMs' share of the stage's busy time"),
    Column(
        "expert_gemm_flop_rate",
        "expert GEMM rate",
        "flop_rate",
        "the expert GEMMs' FLOPs per second of their own time: measured tensor FLOPs (ncu), or the model's on the "
        "torch backend",
    ),
    Column(
        "expert_imbalance",
        "expert imbalance",
        "intensity",
        "tokens of the busiest expert over the mean, averaged over the stage's routings (1: balanced); the busiest "
        "expert's GEMM sets a grouped GEMM's pace (experts.csv: every routing)",
        term="expert imbalance",
    ),
    Column("diverges", "wall ≫ busy", "bool", "busy / wall below report.divergence"),
    Column(
        "bound",
        "bound",
        "text",
        "what bounds the stage, from its own numbers (nsightflow.analysis.bounds): launch/host (device busy under "
        "half the wall time), compute or memory (the unit at half its peak or more on busy time), latency (busy, "
        "neither unit near its peak), unknown (the numbers to decide were not measured)",
        term="bound",
    ),
    Column("bound_why", "why", "text", "the numbers that decided the bound", shown=False),
)

KERNELS: tuple[Column, ...] = (
    Column("stage", "stage", "text"),
    Column("domain", "NVTX domain", "text", "the stage range's NVTX domain", frozenset({TORCH, CAPTURES}), False),
    Column("rank", "#", "count", "rank by busy time within the stage"),
    Column("selected", "top-N", "bool", "in the report's focus (select.top_n, select.coverage)"),
    Column("kernel", "kernel", "text", "the kernel's demangled name (an operator's name on the CPU)"),
    Column("instances", "launches", "count"),
    Column("range_instances", "ranges", "count", shown=False),
    Column("launches_per_range", "per step", "count"),
    Column("classes", "classes", "count", "classes of identical launches", frozenset({NSIGHT, CAPTURES})),
    Column("sampled_launches", "profiled", "count", "launches ncu profiled", COUNTERS),
    Column("total_ns", "busy ms", "ns_as_ms"),
    Column("avg_ns", "avg ms", "ns_as_ms", shown=False),
    Column("share", "share of stage", "pct", "share of the stage's busy time"),
    Column("cumulative_share", "cumulative share", "pct", shown=False),
    Column("flops", "FLOPs", "flop", backends=COUNTERS, shown=False),
    Column("flops_per_launch", "FLOPs / launch", "flop", backends=COUNTERS),
    Column("flops_tensor", "tensor FLOPs", "flop", backends=COUNTERS, shown=False),
    Column("flops_tensor_per_launch", "tensor FLOPs / launch", "flop", backends=COUNTERS),
    Column("dram_bytes", "DRAM bytes", "bytes", backends=COUNTERS, shown=False),
    Column("dram_bytes_per_launch", "DRAM / launch", "bytes", backends=COUNTERS),
    Column("l2_bytes", "L2 bytes", "bytes", backends=COUNTERS, shown=False),
    Column("l2_bytes_per_launch", "L2 / launch", "bytes", backends=COUNTERS),
    Column("l1_bytes", "L1 bytes", "bytes", backends=COUNTERS, shown=False),
    Column("l1_bytes_per_launch", "L1 / launch", "bytes", backends=COUNTERS),
    Column("arithmetic_intensity", "FLOP / DRAM byte", "intensity", backends=COUNTERS),
    Column("achieved_flops_per_s", "achieved", "flop_rate", backends=COUNTERS),
    Column("achieved_dram_bytes_per_s", "achieved DRAM", "byte_rate", backends=COUNTERS, shown=False),
    Column("compute_utilisation", "of compute peak", "pct", backends=COUNTERS),
    Column("dram_utilisation", "of DRAM peak", "pct", backends=COUNTERS),
)

RANKS: tuple[Column, ...] = (
    Column("stage", "stage", "text"),
    Column("rank", "rank", "count", "the process's rank in the job (RANK, or its torch.distributed rank)"),
    Column("pid", "process", "count", "the rank's process id in the timeline's run", shown=False),
    Column("device", "device", "text", "the device the rank computed on"),
    Column("steps", "steps", "count", "the rank's steps of the stage (its NVTX ranges)"),
    Column("wall_ms", "wall ms", "ms", "the rank's steps as the program runs them (the timed run, no profiler)"),
    Column("wall_ms_per_step", "wall ms / step", "ms", "the rank's wall over its own steps: ranks compare by it"),
    Column("gpu_busy_ms", "busy ms", "ms", "time the device ran the rank's steady steps' kernels", NSIGHT_ONLY),
    Column("compute_ms", "compute ms", "ms", "busy time of kernels other than communication", NSIGHT_ONLY),
    Column("comm_ms", "communication ms", "ms", "busy time of communication (NCCL) kernels", NSIGHT_ONLY),
    Column("comm_overlapped_ms", "overlapped ms", "ms", "communication hidden behind the rank's compute", NSIGHT_ONLY),
    Column(
        "comm_exposed_ms",
        "exposed ms",
        "ms",
        "communication time with no compute kernel of the rank running: on the critical path",
        NSIGHT_ONLY,
        term="exposed communication",
    ),
    Column("comm_wait_ms", "waiting ms", "ms", "collective time beyond its shortest rank's: waiting", NSIGHT_ONLY),
    Column("launches", "launches", "count", "kernel launches of the rank in the stage", NSIGHT_ONLY),
    Column("comm_launches", "comm launches", "count", "communication kernel launches", NSIGHT_ONLY),
    Column("slowest", "slowest", "bool", "the rank with the longest wall per step in the stage"),
    Column("profiled", "captured", "bool", "the rank whose stages ncu captured (config rank:)"),
)

EXPERTS: tuple[Column, ...] = (
    Column("stage", "stage", "text"),
    Column("step", "step", "count", "the stage's step (0 first) in the counting pass, warm-up steps included"),
    Column(
        "layer",
        "routing",
        "count",
        "the step's k-th routing: one offsets tensor its grouped GEMMs share (an MoE layer of a forward pass)",
    ),
    Column("experts", "experts", "count", "experts (groups) of the grouped GEMMs"),
    Column("tokens", "tokens", "count", "tokens routed: each token once per expert it went to (top-k)"),
    Column("tokens_max", "most", "count", "tokens of the busiest expert"),
    Column("tokens_mean", "mean", "intensity", "tokens per expert on average"),
    Column("tokens_min", "fewest", "count", "tokens of the idlest expert"),
    Column("idle_experts", "idle", "count", "experts that got no token"),
    Column("imbalance", "imbalance", "intensity", "most over mean (1: balanced)"),
    Column("tokens_per_expert", "tokens per expert", "text", "every expert's tokens, in order", shown=False),
)

STEPS: tuple[Column, ...] = (
    Column("stage", "stage", "text"),
    Column("step", "step", "count", "the stage's step (0 first) in the program's timed run, set-apart steps included"),
    Column("steady", "steady", "bool", "profiled and counted (not warm-up, not outside the workload's window)"),
    Column("wall_ms", "wall", "ms", "the step's wall time in the program's timed run"),
    Column("pace_ms", "pace", "ms", "from its start to its stage's next step's, where that comes next (see pace)"),
    Column("flops_model", "model FLOPs", "flop", "the step's model FLOPs from its operators' shapes (steady steps)"),
    Column("bytes_model", "model bytes", "bytes", "bytes its operators move, the lower bound (steady steps)"),
    Column("mfu_wall", "MFU on wall", "pct", "the step's model FLOPs per second of its wall time, over the peak"),
    Column("bw_util_wall_model", "bandwidth on wall", "pct", "its model bytes per second of wall, over the peak"),
    Column("busy_ms", "GPU busy", "ms", "its kernels' time on the GPU under nsys (steady steps)", COUNTERS),
    Column(
        "flops_tensor_measured", "tensor FLOPs (ncu)", "flop", "ncu's, scaled where it sampled other steps", COUNTERS
    ),
    Column("dram_bytes_measured", "DRAM bytes (ncu)", "bytes", "ncu's, scaled where it sampled other steps", COUNTERS),
    Column(
        "dram_bw_util_busy", "DRAM on busy", "pct", "its DRAM bytes per second of busy time, over the peak", COUNTERS
    ),
    Column(
        "mix", "batch mix", "text", "decode-only (by batch size), prefill-only, prefill-heavy or mixed; else its inputs"
    ),
    Column("inputs", "inputs", "text", "the step's inputs as its step_inputs function summarised them ('?': unread)"),
)

# the run page's steady steps by stage and batch mix (nsightflow.analysis.steps.mix_table); not a CSV of its own
MIXES: tuple[Column, ...] = (
    Column("stage", "stage", "text"),
    next(c for c in STEPS if c.name == "mix"),
    Column("steps", "steps", "count", "the mix's steady steps"),
    Column("wall_ms_median", "wall a step (median)", "ms"),
    Column("pace_ms_median", "pace a step (median)", "ms", "the median of its steps' paces"),
    Column("wall_ms_total", "wall (all)", "ms"),
    Column("flops_model_per_step", "model FLOPs a step", "flop"),
    Column("mfu_wall", "MFU on wall", "pct", "its model FLOPs over its summed wall, over the compute peak"),
    Column("bw_util_wall_model", "model bandwidth on wall", "pct", "its operators' bytes over its wall, over the peak"),
    Column("busy_ms_total", "GPU busy (all)", "ms", "its steps' kernels under nsys (empty unless all)", COUNTERS),
    Column("flops_tensor_measured_per_step", "tensor FLOPs a step (ncu)", "flop", backends=COUNTERS),
    Column(
        "dram_bw_util_busy", "DRAM on busy (ncu)", "pct", "its DRAM bytes over its busy time, over the peak", COUNTERS
    ),
)

TABLES = {"stages": STAGES, "kernels": KERNELS, "ranks": RANKS, "experts": EXPERTS, "steps": STEPS, "mixes": MIXES}


def names(table: str) -> list[str]:
    """The registered columns of ``table`` (a key of :data:`TABLES`), in the order the CSV holds them."""
    return [c.name for c in TABLES[table]]


def column(table: str, name: str) -> Column:
    return next(c for c in TABLES[table] if c.name == name)


def glossary() -> list[tuple[str, str]]:
    """(term, definition) of every column the glossary explains, in table order."""
    return [(c.term, c.definition) for table in TABLES.values() for c in table if c.term]
