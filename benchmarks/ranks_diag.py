"""GPU-host diagnosis for several ranks under ncu: a data-parallel step (NCCL all-reduce in backward) where only the
rank named by DIAG_RANK opens a cudaProfilerStart/Stop window around its backward; run by torchrun under ncu
--profile-from-start off, with and without a kernel-name filter that leaves NCCL out (benchmarks/ranks_diag.sh)."""

import os

import torch
import torch.distributed as dist

rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
device = torch.device(f"cuda:{local % torch.cuda.device_count()}")
torch.cuda.set_device(device)
backend = "nccl" if torch.cuda.device_count() >= int(os.environ["WORLD_SIZE"]) else "gloo"
dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
dtype = torch.bfloat16 if backend == "nccl" else torch.float32
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(device, dtype)
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if backend == "nccl" else None)
x = torch.randn(4, 64, 512, device=device, dtype=dtype)
for i in range(3):
    loss = ddp(x).float().pow(2).mean()
    torch.cuda.synchronize()
    mine = i == 2 and rank == int(os.environ.get("DIAG_RANK", "0"))
    if mine:
        torch.cuda.profiler.start()
    loss.backward()
    torch.cuda.synchronize()
    if mine:
        torch.cuda.profiler.stop()
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} done over {backend}", flush=True)
