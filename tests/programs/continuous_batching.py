"""A serving loop nsightflow did not write: transformers' continuous batching (``generate_batch``: a paged KV cache
and a scheduler that mixes prefill and decode in each forward) of a small Llama-shaped model built from a config with
random weights, over prompts of mixed lengths; no NVTX range. Used by tests/test_serving.py with config
step_functions naming the engine's per-iteration step."""

import argparse
import json

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--config", required=True, help="the LlamaConfig's fields, as JSON")
p.add_argument("--prompts", required=True, help="the prompts' lengths, as JSON")
p.add_argument("--new", type=int, default=6)
a = p.parse_args()
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(**json.loads(a.config))).eval()
prompts = [[(7 * i + j) % 500 + 1 for j in range(n)] for i, n in enumerate(json.loads(a.prompts))]
gen = GenerationConfig(max_new_tokens=a.new, do_sample=False, eos_token_id=-1, pad_token_id=0)  # never stops early
out = model.generate_batch(inputs=prompts, generation_config=gen, progress_bar=False, warmup=False)
print(f"served {len(out)} requests, {sum(len(o.generated_tokens) for o in out.values())} tokens")
