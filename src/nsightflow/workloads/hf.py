"""A HuggingFace causal language model as a workload: prefill, then KV-cached greedy decode.

The model comes from a local checkpoint directory (``model``: config and weights, nothing downloaded)
or from a config (``config``: ``model_type`` and sizes, as ``transformers.AutoConfig.for_model`` takes
them; seeded random weights, no download). Any attention the model uses works: multi-head,
grouped-query or multi-query, through ``attn_implementation`` 'sdpa' or 'eager'. ``transformers`` is an
optional extra: ``pip install -e ".[hf]"``.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from nsightflow.workloads.api import Stage, Workload, WorkloadError, require_sizes, weight_bytes
from nsightflow.workloads.decoder import resolve_device


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise WorkloadError('the HuggingFace workloads need transformers: pip install -e ".[hf]"') from exc
    return transformers


def load_model(
    model: str | None, config: dict[str, Any] | None, dtype: str, device: str, attn_implementation: str, seed: int
) -> torch.nn.Module:
    """A causal LM from a local checkpoint directory or from a config; raises WorkloadError naming the fix."""
    tf = _transformers()
    torch_dtype = getattr(torch, dtype)
    if (model is None) == (config is None):
        raise WorkloadError(
            "give the HuggingFace workload either `model` (a local checkpoint directory) or `config` "
            "(model_type and sizes, e.g. {model_type: llama, hidden_size: 256, num_hidden_layers: 2, "
            "num_attention_heads: 8, num_key_value_heads: 2, intermediate_size: 512, vocab_size: 1024})"
        )
    if model is not None:
        try:
            net = tf.AutoModelForCausalLM.from_pretrained(
                model, dtype=torch_dtype, attn_implementation=attn_implementation, local_files_only=True
            )
        except (OSError, ValueError) as exc:
            raise WorkloadError(
                f"no HuggingFace checkpoint could be loaded from {model!r}: {exc}. Give a local "
                "directory with config.json and the weights (nothing is downloaded)"
            ) from exc
        return net.to(device).eval()
    cfg = dict(config or {})
    model_type = cfg.pop("model_type", None)
    if not model_type:
        raise WorkloadError("a HuggingFace config needs model_type (e.g. llama, qwen2, mistral)")
    try:
        hf_config = tf.AutoConfig.for_model(model_type, **cfg)
    except (KeyError, ValueError) as exc:
        raise WorkloadError(f"HuggingFace config {config}: {exc}") from exc
    torch.manual_seed(seed)
    with torch.device(device):
        net = tf.AutoModelForCausalLM.from_config(hf_config, dtype=torch_dtype, attn_implementation=attn_implementation)
    return net.eval()


def build(
    model: str | None = None,
    config: dict[str, Any] | None = None,
    batch: int = 1,
    prompt: int = 128,
    decode_steps: int = 8,
    dtype: str = "bfloat16",
    device: str = "auto",
    attn_implementation: str = "sdpa",
    seed: int = 0,
) -> Workload:
    """Prefill of ``prompt`` random tokens, then ``decode_steps`` greedy steps with the model's own KV cache."""
    require_sizes(batch=batch, prompt=prompt, decode_steps=decode_steps)
    device = resolve_device(device)
    net: Any = load_model(model, config, dtype, device, attn_implementation, seed)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    tokens = torch.randint(0, net.config.vocab_size, (batch, prompt), generator=gen, device=device)
    # Only the last position's logits pick the next token (as transformers' generate asks for them).
    accepts = inspect.signature(net.forward).parameters
    last_only = {"logits_to_keep": 1} if "logits_to_keep" in accepts else {}
    # The KV cache's name: ``cache`` where forward takes it (transformers 5.24 deprecates ``past_key_values``), else
    # ``past_key_values`` (5.17), in and out.
    cache_arg = "cache" if "cache" in accepts else "past_key_values"
    state: dict[str, Any] = {}

    def setup() -> None:
        state.clear()

    @torch.no_grad()
    def prefill(_: int) -> None:
        out = net(input_ids=tokens, use_cache=True, **last_only)
        state["cache"], state["next"] = out[cache_arg], out.logits[:, -1:].argmax(-1)

    @torch.no_grad()
    def decode(_: int) -> None:
        out = net(input_ids=state["next"], use_cache=True, **{cache_arg: state["cache"]})
        state["cache"], state["next"] = out[cache_arg], out.logits[:, -1:].argmax(-1)

    c = net.config
    params = dict(
        model=model,
        config=config,
        architecture=type(net).__name__,
        batch=batch,
        prompt=prompt,
        decode_steps=decode_steps,
        dtype=dtype,
        device=device,
        attn_implementation=attn_implementation,
        hidden_size=c.hidden_size,
        num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=getattr(c, "num_key_value_heads", c.num_attention_heads),
        vocab_size=c.vocab_size,
        weights_bytes=weight_bytes(net),
    )
    return Workload(
        setup=setup,
        stages=[Stage("prefill", prefill, 1), Stage("decode", decode, decode_steps)],
        device=device,
        dtype=dtype,
        params=params,
    )
