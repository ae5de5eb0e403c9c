"""Where the serving loop's late first token comes from: the workflow's timed run had its first scheduler iteration
(the prefill of every prompt) take about 1.4 s where the same run made by ``command.timeline`` called from a plain
process took about 0.65 s (docs/benchmarks.md, 2026-11-29). Arms, in turns, each a layer closer to the workflow:

- ``alone``: the command, nothing of nsightflow; ``alone+threads``, ``alone+temp``, ``alone+cwd``: the same with one
  thing a Snakemake job changes (its thread-count variables set to 1; TEMP, TMP and TEMPDIR set to /tmp; a fresh
  working folder);
- ``polled``: the command alone, its process read by Snakemake's own ``benchmark:`` sampler (psutil's memory and CPU
  of the process tree every 0.5 s for the first 15 s, then every 30 s: the timeline job has a ``benchmark:``);
- ``timeline``: ``command.timeline`` called from this process (what the serving test's timed runs do);
- ``job``: the same call made by a one-rule Snakefile's ``script:`` job (Snakemake's job process, its environment
  and working folder, nothing else of the workflow);
- ``replay``: the same call from a plain child process given the last ``job`` arm's environment, in a fresh folder;
- ``workflow``: the workflow's timeline job (a copy of the workflow, its preflight and counter check, to the run's
  manifest).

Each line: the program's own tokens/s and TTFT p50, (hooked arms) its first iterations' walls, and the CUDA driver's
JIT cache entries the arm added (``~/.nv/ComputeCache``) with the source names of the kernels compiled. The answer
(2026-11-29): the folder. cuDNN's SDPA kernel is compiled at run time with the process's working folder in its
debug information, so in a folder where the program never ran the driver's JIT cache misses and the first attention
call compiles it (0.6 to 1.2 s on the H200 host); a second run in the same folder finds it. At the end, what differs
between the arms' programs as the kernel sees them (environment, standard streams, limits, cgroup, CPU and memory
sets, signal masks, nice, scheduling policy), read from /proc while each arm's first program process runs.
``--cwd copy``: ``alone``, ``polled`` and ``timeline`` run in a fresh copy of the workflow's folders (with TEMP, TMP
and TEMPDIR /tmp, as Snakemake sets them in a job). ``--stacks DIR``: every arm's program runs under
benchmarks/sampled.py, its stacks around its first iterations written to ``DIR/<arm>-<round>.jsonl``.

Usage (GPU host, project root, after ``. .gpu-bundle/activate.sh``):
``cd benchmarks && python3 first_token.py --rounds 2 --arms alone,alone+cwd,timeline,job,workflow [--cwd copy]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmark import workflow_copy  # benchmarks/ is on the path of a script run from it

from nsightflow.capture.launch.hostfacts import THREAD_VARS
from nsightflow.workloads import serving

SERVE_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16}
SERVE_1B |= {"num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}
STEPS = {"step_functions": {"iteration": serving.STEP}, "step_inputs": {"iteration": serving.SUMMARY}}
JOB_SCRIPT = """
import json, sys
sys.path.insert(0, {bench!r})
import os
from first_token import timeline
json.dump(dict(os.environ), open(snakemake.params.out + "-env.json", "w"))
json.dump(timeline(snakemake.params.argv, snakemake.params.out), open(snakemake.output[0], "w"))
"""


def serving_argv(device: str, stacks: str = "") -> list[str]:
    """The serving test's program: 64 requests of mixed lengths through transformers' continuous batching
    (``stacks``: its stacks sampled into that file around its first iterations, benchmarks/sampled.py)."""
    sampled = [str(Path(__file__).with_name("sampled.py")), stacks, "_generation_step"] if stacks else []
    argv = [sys.executable, *sampled, "-m", serving.__name__, "--config", json.dumps(SERVE_1B)]
    argv += ["--dtype", "bfloat16", "--device", device, "--requests", "64", "--prompt", "256", "--prompt-spread"]
    return argv + ["192", "--new", "64", "--new-spread", "48"]


def _said(metrics: dict, manifest: dict | None = None) -> dict:
    out = {"tokens_per_s": metrics.get("tokens_per_s"), "ttft_ms_p50": metrics.get("ttft_ms_p50")}
    if manifest is not None:
        walls = (manifest.get("every_wall_s") or {}).get("iteration") or []
        out["first_walls_ms"] = [round(w * 1e3, 1) for w in walls[:3]]
    return out


def timeline(argv: list[str], out: str) -> dict:
    """``command.timeline`` as the serving test calls it, its outputs in ``out``: the program's figures."""
    from nsightflow.capture.launch import command
    from nsightflow.capture.launch.command_call import CommandCall
    from nsightflow.capture.launch.outputs import ProfileOutputs, RunSettings

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    outputs = ProfileOutputs.of(folder / "m.json", folder / "f.json", folder / "c.json", folder / "log")
    call = CommandCall(argv, warmup_steps=0, **STEPS)  # type: ignore[arg-type]
    nsys_bin = shutil.which("nsys") or "nsys"
    command.timeline(nsys_bin, call, folder / "t.nsys-rep", folder / "t.sqlite", outputs, RunSettings({}, {}, 900))
    manifest = json.loads((folder / "m.json").read_text())
    return _said(manifest["program_metrics"], manifest)


# what a Snakemake job sets, one piece at a time (arms ``alone+threads``, ``alone+temp``, ``alone+cwd``)
AS_IN_A_JOB = {
    "threads": dict.fromkeys(THREAD_VARS, "1"),
    "temp": dict.fromkeys(("TEMP", "TMP", "TEMPDIR"), "/tmp"),
}


def alone(argv: list[str], polled: bool = False, env: dict[str, str] | None = None, cwd: str | None = None) -> dict:
    """The command alone; ``polled``: under Snakemake's benchmark sampler, with what each sample took (ms); ``env``
    added to the environment, in ``cwd``."""
    from nsightflow.capture.read.own_metrics import own_metrics

    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})}, cwd=cwd
    )
    took: list[float] = []
    timer = None
    if polled:
        import time

        from snakemake.benchmark import BenchmarkRecord, BenchmarkTimer

        class Timed(BenchmarkTimer):
            def work(self) -> None:
                t0 = time.perf_counter()
                super().work()
                took.append(round((time.perf_counter() - t0) * 1e3, 1))

        timer = Timed(proc.pid, BenchmarkRecord())
        timer.start()
    out, _ = proc.communicate()
    if timer is not None:
        timer.cancel()
    said = _said(own_metrics(out))
    return said | ({"samples": len(took), "sample_ms_max": max(took)} if took else {})


def replay(argv: list[str], tmp: Path, env: dict[str, str]) -> dict:
    """The timeline call in a plain child process given ``env`` (a job's environment) in ``tmp``: whether the
    environment alone makes the job's program slow."""
    code = f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); from first_token import timeline; "
    code += f"print(json.dumps(timeline({argv!r}, {str(tmp / 'out')!r})))"
    env = {k: v for k, v in env.items() if k != "NSIGHTFLOW_JOB"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def job(argv: list[str], tmp: Path) -> dict:
    """The timeline call inside a Snakemake ``script:`` job of a one-rule Snakefile."""
    (tmp / "job.py").write_text(JOB_SCRIPT.format(bench=str(Path(__file__).parent)))
    (tmp / "Snakefile").write_text(
        f'rule go:\n    output:\n        "said.json",\n    params:\n        argv={argv!r},\n'
        f'        out="{tmp}/out",\n    script:\n        "job.py"\n'
    )
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "said.json"], cwd=tmp, check=True,
                   capture_output=True)  # fmt: skip
    return json.loads((tmp / "said.json").read_text())


@contextmanager
def _in(folder: Path | None) -> Iterator[None]:
    """Run the block in a fresh copy of the workflow at ``folder`` with a job's TEMP variables (None: as it is)."""
    if folder is None:
        yield
        return
    workflow_copy(folder, lambda cfg: None)
    before, saved = os.getcwd(), {k: os.environ.get(k) for k in ("TEMP", "TMP", "TEMPDIR")}
    os.chdir(folder)
    os.environ.update(dict.fromkeys(saved, "/tmp"))
    try:
        yield
    finally:
        os.chdir(before)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def workflow(argv: list[str], tmp: Path) -> dict:
    """The workflow's timeline job (preflight and counter check included), to the run's manifest."""
    workload = {"name": "serve", "command": argv, "warmup_steps": 0, **STEPS}
    workflow_copy(tmp, lambda cfg: cfg.update(workloads=[workload], profiler="nsight"))
    from nsightflow.capture.launch.backend import device_label

    counters = f"results/preflight/counters/{device_label('nsight')}.json"
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "results/serve/manifest.json", counters],
                   cwd=tmp, check=True, capture_output=True)  # fmt: skip
    manifest = json.loads((tmp / "results" / "serve" / "manifest.json").read_text())
    return _said(manifest["program_metrics"], manifest)


JIT_CACHE = Path(os.environ.get("CUDA_CACHE_PATH") or Path.home() / ".nv" / "ComputeCache")


def jit_entries() -> set[Path]:
    """The CUDA driver's JIT cache entries (PTX compiled to the GPU's code on load, kept across processes)."""
    return set(JIT_CACHE.glob("*/*/*")) if JIT_CACHE.is_dir() else set()


def jit_names(entries: set[Path]) -> list[str]:
    """The kernels' source names in new JIT cache entries (a ``.cu`` name followed by the folder it was compiled in:
    cuDNN's runtime-compiled kernels carry the process's working folder in their debug information)."""
    names = set()
    for entry in entries:
        text = entry.read_bytes().decode("latin-1")
        names |= {
            m.group(0).split("lgenfe")[0][:160] for m in re.finditer(r"[A-Za-z0-9_]+\.cu/[\x20-\x7e]{0,60}", text)
        }
    return sorted(names)


WATCH = ("SigBlk", "SigIgn", "Cpus_allowed_list", "Mems_allowed_list", "NoNewPrivs", "Seccomp")


def _facts(pid: int) -> dict[str, str]:
    """A process as the kernel sees it (what a parent passes on), its run-specific paths left out."""
    proc = Path(f"/proc/{pid}")
    facts: dict[str, str] = {}
    try:
        for item in (proc / "environ").read_bytes().split(b"\0"):
            key, _, value = item.decode(errors="replace").partition("=")
            value = re.sub(r"/tmp/first-token-[^/:]*", "<run>", value)
            if key and "nsightflow-" not in value:
                facts[f"env {key}"] = value[:120]
        for fd in (0, 1, 2):
            target = os.readlink(proc / "fd" / str(fd))
            facts[f"fd{fd}"] = re.sub(r"\[\d+\]|/tmp/first-token-[^ ]*", "", target)
        for line in (proc / "status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in WATCH:
                facts[key] = value.strip()
        facts["limits"] = " | ".join(" ".join(ln.split()) for ln in (proc / "limits").read_text().splitlines()[1:])
        facts["cgroup"] = (proc / "cgroup").read_text().strip()
        stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        facts["nice"], facts["policy"] = stat[16], stat[38]
    except OSError:
        pass
    return facts


class Watch:
    """Reads the first program process's facts while an arm runs (the timed one: not the program under nsys)."""

    def __init__(self) -> None:
        import threading

        self.found: dict[str, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.stop.is_set() and not self.found:
            for d in Path("/proc").iterdir():
                try:
                    argv = (d / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if d.name.isdigit() and serving.__name__.encode() in argv and b"nsys" not in argv[0]:
                    try:
                        if b"QUADD_" in (d / "environ").read_bytes():  # the program under nsys: not the timed one
                            continue
                    except OSError:
                        continue
                    self.found = _facts(int(d.name))
                    break
            self.stop.wait(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--arms", default="alone,timeline,job,workflow")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cwd", choices=["here", "copy"], default="here")
    ap.add_argument("--stacks", default="", help="a folder: each arm's stacks sampled there (sampled.py)")
    args = ap.parse_args()
    argv = serving_argv(args.device)
    job_env: dict[str, str] = {}
    arms = args.arms.split(",")
    alone(argv)  # the machine's first process reads cold: not counted
    seen: dict[str, dict[str, str]] = {}
    for r in range(args.rounds):
        for arm in arms[r % len(arms) :] + arms[: r % len(arms)]:
            tmp = Path(tempfile.mkdtemp(prefix=f"first-token-{arm}-"))
            place = tmp / "copy" if args.cwd == "copy" and arm in ("alone", "polled", "timeline") else None
            if args.stacks:
                Path(args.stacks).mkdir(parents=True, exist_ok=True)
                argv = serving_argv(args.device, str(Path(args.stacks).resolve() / f"{arm}-{r}.jsonl"))
            cached = jit_entries()
            with _in(place), Watch() as watch:
                if arm in ("alone", "polled"):
                    said = alone(argv, polled=arm == "polled")
                elif arm.startswith("alone+"):
                    what = arm.split("+", 1)[1]
                    said = alone(argv, env=AS_IN_A_JOB.get(what), cwd=str(tmp) if what == "cwd" else None)
                elif arm == "timeline":
                    said = timeline(argv, str(tmp / "out"))
                elif arm == "replay":
                    said = replay(argv, tmp, job_env)
                elif arm == "job":
                    said = job(argv, tmp)
                    job_env = json.loads((tmp / "out-env.json").read_text())
                else:
                    said = workflow(argv, tmp)
            new = jit_entries() - cached
            said |= {"jit_cache_new": len(new), "jit_compiled": jit_names(new)} if new else {}
            print(f"round {r} {arm:9s} {json.dumps(said)}", flush=True)
            seen.setdefault(arm, watch.found)
    keys = sorted({k for f in seen.values() for k in f})
    for key in keys:
        values = {arm: f.get(key) for arm, f in seen.items()}
        if len(set(values.values())) > 1:
            print(f"differs: {key}: {values}")


if __name__ == "__main__":
    main()
