"""vLLM's scheduler serving a request set, as a command (tests/programs/vllm_engine.py): its steps are the calls of
``vllm_engine:Runner.execute_model`` (config step_functions), each given the scheduler's own batch."""

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_engine  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--lengths", required=True, help="the requests' (prompt, output) lengths, as JSON")
p.add_argument("--blocks", type=int, default=1000)
p.add_argument("--max-tokens", type=int, default=64)
a = p.parse_args()
with tempfile.TemporaryDirectory() as folder:
    scheduler = vllm_engine.scheduler(Path(folder) / "model", a.blocks, a.max_tokens)
    reqs = vllm_engine.requests([tuple(x) for x in json.loads(a.lengths)])
    lost = vllm_engine.serve(scheduler, vllm_engine.Runner(scheduler), reqs)
print(f"served {len(reqs)} requests, {sum(len(r.output_token_ids) for r in reqs)} tokens, {lost} recomputed")
