"""A PyTorch program of several processes, written as torchrun users write one and with no nsightflow import:
each rank opens its own NVTX ranges (domain ``train`` or ``LLM``) and synchronizes the GPU before a range ends.

``--parallel data``: data-parallel training (DistributedDataParallel: the gradients' all-reduce during backward),
stages ``forward``, ``backward``, ``optimizer``, one step each per iteration; ``--model llama`` trains a HuggingFace
Llama built from a config (random weights, grouped-query attention; needs transformers) instead of the MLP stack.
``--parallel tensor``: tensor-parallel decode (each rank holds a column shard of every first linear and a row shard
of every second one; an all-reduce per layer), stages ``prefill`` and ``decode``.

Run: ``torchrun --nproc_per_node 2 examples/ranks_program.py --parallel data``. Ranks talk over NCCL when each has a
GPU of its own, else over gloo (on the CPU, or ranks sharing one GPU).
"""

import argparse
import contextlib
import os

import nvtx
import torch
import torch.distributed as dist


def layers(hidden: int, count: int, shard: int, device: torch.device, dtype: torch.dtype) -> list[torch.nn.Module]:
    out: list[torch.nn.Module] = []
    for _ in range(count):
        width = 4 * hidden // shard
        out += [torch.nn.Linear(hidden, width), torch.nn.GELU(), torch.nn.Linear(width, hidden)]
    return [m.to(device=device, dtype=dtype) for m in out]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def trained(a: argparse.Namespace, device: torch.device, dtype: torch.dtype):  # noqa: ANN201
    """The model to train and its loss on a fixed batch."""
    if a.model == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=1024,
            hidden_size=a.hidden,
            intermediate_size=4 * a.hidden,
            num_hidden_layers=a.layers,
            num_attention_heads=8,
            num_key_value_heads=2,
            max_position_embeddings=max(2048, a.tokens),
        )
        model = LlamaForCausalLM(config).to(device=device, dtype=dtype)
        ids = torch.randint(0, config.vocab_size, (a.batch, a.tokens), device=device)
        return model, lambda m: m(input_ids=ids, labels=ids).loss
    model = torch.nn.Sequential(*layers(a.hidden, a.layers, 1, device, dtype))
    x = torch.randn(a.batch, a.tokens, a.hidden, device=device, dtype=dtype)
    return model, lambda m: m(x).float().pow(2).mean()


def data_parallel(a: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> None:
    model, loss_of = trained(a, device, dtype)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=device.type == "cuda")

    def step(ranged: bool) -> None:
        def stage(name: str):  # noqa: ANN202
            return nvtx.annotate(name, domain="train") if ranged else contextlib.nullcontext()

        with stage("forward"):
            loss = loss_of(ddp)
            sync(device)
        with stage("backward"):
            loss.backward()
            sync(device)
        with stage("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync(device)

    step(False)  # warm-up: buckets built, kernels loaded
    for _ in range(a.steps):
        step(True)
    if int(os.environ["RANK"]) == 0:  # the first rank alone evaluates, as nanoGPT's master process does
        with torch.no_grad():
            for _ in range(a.evaluate):
                with nvtx.annotate("evaluate", domain="train"):
                    loss_of(model)
                    sync(device)


def tensor_parallel(a: argparse.Namespace, device: torch.device, dtype: torch.dtype, world: int) -> None:
    blocks = layers(a.hidden, a.layers, world, device, dtype)

    def forward(h: torch.Tensor) -> torch.Tensor:
        for i in range(0, len(blocks), 3):
            part = blocks[i + 2](blocks[i + 1](blocks[i](h)))
            dist.all_reduce(part)
            h = h + part
        return h

    prompt = torch.randn(a.batch, a.tokens, a.hidden, device=device, dtype=dtype)
    with torch.no_grad():
        forward(prompt)  # warm-up
        sync(device)
        with nvtx.annotate("prefill", domain="LLM"):
            h = forward(prompt)
            sync(device)
        token = h[:, -1:, :]
        for _ in range(a.steps):
            with nvtx.annotate("decode", domain="LLM"):
                token = forward(token)
                sync(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--parallel", choices=["data", "tensor"], default="data")
    parser.add_argument("--model", choices=["mlp", "llama"], default="mlp", help="what --parallel data trains")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--evaluate", type=int, default=0, help="data parallel: evaluation steps of rank 0 alone")
    parser.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto")
    a = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local % torch.cuda.device_count()}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = a.backend if a.backend != "auto" else "nccl" if cuda and torch.cuda.device_count() >= world else "gloo"
    dtype = torch.bfloat16 if backend == "nccl" else torch.float32
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    torch.manual_seed(rank)
    if a.parallel == "data":
        data_parallel(a, device, dtype)
    else:
        tensor_parallel(a, device, dtype, world)
    dist.barrier()
    dist.destroy_process_group()
    print(
        f"rank {rank} of {world} (pid {os.getpid()}): {a.parallel} parallel, {a.steps} steps on {device} over {backend}"
    )


if __name__ == "__main__":
    main()
