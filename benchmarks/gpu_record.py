"""On the GPU host: record real programs' kernel names and hand-made captures for tests/data, and measure what
each profiler does to a launch-bound step's wall time.

Run from the project root after ``. .gpu-bundle/activate.sh``: ``python3 benchmarks/gpu_record.py OUT_DIR [PART ...]``
Parts (default all):
- ``names``: the corpus programs (CORPUS) in one process, once under nsys and once under ncu (every launch, one
  metric), and ncu's export three times (``--print-kernel-base`` demangled, mangled, function);
- ``handmade``: captures made as the NVTX guide teaches (nsys profile + stats, ncu --nvtx --nvtx-include),
  with nsightflow's default metrics: a training step with fused AdamW, an MoE prefill and decode, the
  built-in decoder with the guide's nested decode ranges;
- ``walltime``: a launch-bound decode (16 layers, batch 1) timed step by step, plain and under each profiler.
Every profiler runs from an argv list; each command and its seconds go to OUT_DIR/commands.log.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from nsightflow import ncu_metrics
from nsightflow.capture.read import ncu_csv

LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 2048,
}
GPT2 = {
    "model_type": "gpt2",
    "n_embd": 256,
    "n_layer": 2,
    "n_head": 4,
    "vocab_size": 4096,
    "n_positions": 256,
    "bos_token_id": 0,
    "eos_token_id": 0,
}
MIXTRAL = {
    "model_type": "mixtral",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 2048,
}
QWEN_MOE = {
    "model_type": "qwen2_moe",
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 2048,
}
TRAIN = {"batch": 2, "seq": 128, "iterations": 1}
TRAINING, HF, DECODER = (
    "nsightflow.workloads.training:build",
    "nsightflow.workloads.hf:build",
    "nsightflow.workloads.decoder:build",
)
DEC = {"batch": 2, "prompt": 128, "decode_steps": 2, "n_layers": 1}
CORPUS = {
    "llama_adamw_fused": (
        TRAINING,
        {**TRAIN, "config": LLAMA, "optimizer": "adamw_fused"},
    ),
    "llama_adamw_foreach": (
        TRAINING,
        {**TRAIN, "config": LLAMA, "optimizer": "adamw_foreach"},
    ),
    "llama_adamw_plain": (
        TRAINING,
        {**TRAIN, "config": LLAMA, "optimizer": "adamw_plain"},
    ),
    "llama_sgd": (TRAINING, {**TRAIN, "config": LLAMA, "optimizer": "sgd"}),
    "gpt2_autocast": (
        TRAINING,
        {**TRAIN, "config": GPT2, "dtype": "float32", "autocast": "bfloat16", "optimizer": "adamw_fused"},
    ),
    "mixtral_train": (TRAINING, {**TRAIN, "config": MIXTRAL, "optimizer": "adamw_fused"}),
    "mixtral_decode": (
        HF,
        {"config": MIXTRAL, "batch": 1, "prompt": 64, "decode_steps": 2},
    ),
    "qwen_moe_train": (TRAINING, {**TRAIN, "config": QWEN_MOE}),
    "sdpa_flash": (DECODER, {**DEC, "sdpa_backend": "flash"}),
    "sdpa_efficient": (DECODER, {**DEC, "sdpa_backend": "efficient"}),
    "sdpa_cudnn": (DECODER, {**DEC, "sdpa_backend": "cudnn"}),
    "sdpa_math": (DECODER, {**DEC, "sdpa_backend": "math"}),
    "inductor": (DECODER, {**DEC, "compile": True}),
    "cuda_graph": (DECODER, {**DEC, "cuda_graph": True}),
    "decoder_train": (TRAINING, {**TRAIN, "n_layers": 1, "optimizer": "adamw_fused"}),
}
NSYS = ["nsys", "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--cuda-graph-trace=node"]
HANDMADE = [sys.executable, "benchmarks/handmade_capture.py"]


def spec(name: str) -> str:
    fn, args = CORPUS.get(name) or HANDMADE_PROGRAMS[name]
    module, function = fn.split(":")
    return f"{name}={module}:{function}:{json.dumps(args)}"


HANDMADE_PROGRAMS = {
    "train": (TRAINING, {**TRAIN, "config": LLAMA, "optimizer": "adamw_fused"}),
    "moe": (HF, {"config": MIXTRAL, "batch": 1, "prompt": 64, "decode_steps": 3}),
    "decoder": (DECODER, {"batch": 2, "prompt": 128, "decode_steps": 4, "n_layers": 2}),
    "launchbound": (
        DECODER,
        {"batch": 1, "prompt": 128, "decode_steps": 16, "n_layers": 16},
    ),
}


def run(out: Path, argv: list[str], name: str, timeout: int = 500) -> str:
    """Run argv, keep its output in OUT/<name>.log; returns the output."""
    t0 = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    text = proc.stdout + proc.stderr
    (out / f"{name}.log").write_text(text)
    with open(out / "commands.log", "a") as fh:
        fh.write(f"{name}: rc {proc.returncode}, {time.time() - t0:.1f} s: {' '.join(argv)[:400]}\n")
    print(f"{name}: rc {proc.returncode}, {time.time() - t0:.1f} s", flush=True)
    return text


def export(out: Path, rep: Path, base: str, stem: str) -> None:
    """ncu's raw CSV export of ``rep`` with kernel names printed on ``base``."""
    argv = ncu_csv.export_argv("ncu", rep) + ["--print-kernel-base", base]
    proc = subprocess.run(argv, capture_output=True, text=True)
    (out / f"{stem}.{base}.raw.csv").write_text(proc.stdout)
    with open(out / "commands.log", "a") as fh:
        fh.write(f"export {stem} {base}: rc {proc.returncode} {proc.stderr[:300]}\n")


def names(out: Path) -> None:
    programs = [spec(n) for n in CORPUS]
    prog = HANDMADE + ["--keep-going", "--prefix-names", "--warmup", "0", *programs]
    run(out, [*NSYS, "--export=sqlite", "--force-overwrite=true", "-o", str(out / "corpus"), *prog], "corpus_nsys")
    (out / "corpus.nsys-rep").unlink(missing_ok=True)
    rep = out / "corpus_ncu"
    run(
        out,
        ["ncu", "--force-overwrite", "--export", str(rep), "--nvtx", "--clock-control=none", "--cache-control=none"]
        + ["--metrics", "gpu__time_duration.sum", *prog],
        "corpus_ncu",
        timeout=330,
    )
    for base in ("demangled", "mangled", "function"):
        export(out, rep.with_suffix(".ncu-rep"), base, "corpus")
    rep.with_suffix(".ncu-rep").unlink(missing_ok=True)


def handmade(out: Path) -> None:
    metrics = ncu_metrics.resolve_metrics("default", [], ncu_metrics.ALL_PRECISIONS, non_tensor=True)
    for name, nest, with_ncu in (("train", False, True), ("moe", True, True), ("decoder", True, False)):
        d = out / f"handmade_{name}"
        d.mkdir()
        prog = HANDMADE + (["--nest"] if nest else []) + [spec(name)]
        run(out, [*NSYS, "--force-overwrite=true", "-o", str(d / "timeline"), *prog], f"{name}_nsys")
        run(
            out,
            ["nsys", "stats", "--report", "nvtx_sum", "--report", "nvtx_kern_sum", "--report", "cuda_gpu_kern_sum"]
            + ["--format", "csv", "--force-export=true", "-o", str(d / "stats"), str(d / "timeline.nsys-rep")],
            f"{name}_stats",
        )
        run(
            out,
            ["nsys", "export", "--type", "sqlite", "-o", str(d / "timeline.sqlite"), str(d / "timeline.nsys-rep")],
            f"{name}_export",
        )
        (d / "timeline.nsys-rep").unlink(missing_ok=True)
        if not with_ncu:
            continue
        rep = out / f"{name}_ncu"
        run(
            out,
            ["ncu", "--force-overwrite", "--export", str(rep), "--nvtx", "--nvtx-include", "regex:LLM@.*/"]
            + ["--clock-control=none", "--metrics", ",".join(metrics), *prog],
            f"{name}_ncu",
        )
        proc = subprocess.run(ncu_csv.export_argv("ncu", rep.with_suffix(".ncu-rep")), capture_output=True, text=True)
        (d / "ncu.raw.csv").write_text(proc.stdout)
        export(out, rep.with_suffix(".ncu-rep"), "mangled", f"handmade_{name}_ncu")
        rep.with_suffix(".ncu-rep").unlink(missing_ok=True)


def walltime(out: Path) -> None:
    prog = HANDMADE + ["--timed", "--warmup", "2", spec("launchbound")]
    start = HANDMADE + ["--timed", "--start-after-timed", "--warmup", "2", spec("launchbound")]
    variants = {
        "plain_a": prog,
        "nsys_full": [*NSYS, "--force-overwrite=true", "-o", str(out / "wt_full"), *prog],
        "nsys_capture_range": [
            *NSYS,
            "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop",
            "--force-overwrite=true",
            "-o",
            str(out / "wt_range"),
            *start,
        ],
        "ncu_idle": [
            "ncu",
            "--profile-from-start",
            "off",
            "--clock-control=none",
            "--metrics",
            "gpu__time_duration.sum",
            *prog,
        ],
        "plain_b": prog,
    }
    rows = {}
    for name, argv in variants.items():
        text = run(out, argv, f"wt_{name}")
        line = next((x for x in text.splitlines() if x.startswith("timed: ")), None)
        rows[name] = json.loads(line[len("timed: ") :])["seconds"] if line else None
    (out / "walltime.json").write_text(json.dumps(rows, indent=1))
    for f in out.glob("wt_*.nsys-rep"):
        f.unlink()
    for name, secs in rows.items():
        if secs:
            dec = sorted(secs["decode"])
            print(
                f"walltime {name}: decode median {dec[len(dec) // 2] * 1e3:.2f} ms, prefill "
                f"{secs['prefill'][0] * 1e3:.2f} ms",
                flush=True,
            )


def main() -> None:
    out = Path(sys.argv[1])
    parts = sys.argv[2:] or ["walltime", "names", "handmade"]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for part in parts:
        globals()[part](out)


if __name__ == "__main__":
    main()
