"""Inductor's two Triton autotuners run on the CPU, with a timing the command line sets: what a profiled run's
slowed timing does to a compiled program's kernel choices (nsightflow.capture.inside.hook_tuning), without a GPU.

``python autotuners.py BEST`` times each candidate as its distance from block size BEST (and 8 warps), runs
``CoordescTuner.autotune`` (coordinate descent from 128 blocks, 4 warps) and ``CachingAutotuner.benchmark_all_configs``
over three configs, and prints their picks and how many candidates it timed, as JSON.
"""

import json
import math
import sys
from types import SimpleNamespace

from torch._inductor.runtime import triton_heuristics
from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner
from torch._inductor.runtime.triton_compat import Config

best_block = int(sys.argv[1])
timed = []


def timing(config):
    timed.append(config.kwargs["XBLOCK"])
    return 1 + abs(math.log2(config.kwargs["XBLOCK"] / best_block)) + 0.1 * abs(config.num_warps - 8)


class Launcher:  # a compiled config's launcher, as the autotuner holds it
    def __init__(self, config):
        self.config = config


tuner = CoordescTuner(name="triton_poi_fused_add_0", size_hints={"x": 65536})
searched = tuner.autotune(timing, Config({"XBLOCK": 128}, num_warps=4, num_stages=1))


class Autotuner(triton_heuristics.CachingAutotuner):
    """Inductor's autotuner over three configs, its launches timed by :func:`timing` (no kernel is compiled)."""

    def __init__(self):  # what benchmark_all_configs reads; CachingAutotuner's own __init__ compiles a kernel
        self.launchers = [Launcher(Config({"XBLOCK": x}, num_warps=4, num_stages=1)) for x in (64, 256, 1024)]
        self.fn = SimpleNamespace(__name__="triton_red_fused_sum_1")
        self.size_hints = {"x": 8, "r0_": 4096}
        self.compile_id, self.is_backward, self.inductor_meta = None, False, {}
        self.coordesc_tuner = CoordescTuner(name="triton_red_fused_sum_1")
        self.reset_to_zero_arg_names = []

    def bench(self, launcher, *args, **kwargs):
        return timing(launcher.config)

    def _close_static_launcher(self, launcher):
        pass


autotuner = Autotuner()
timings = triton_heuristics.CachingAutotuner.benchmark_all_configs(autotuner)
picked = min(timings, key=timings.__getitem__).config
out = {"coordesc": [searched.kwargs["XBLOCK"], searched.num_warps], "configs": picked.kwargs["XBLOCK"]}
print(json.dumps({**out, "timed": len(timed)}))
