"""One optimizer step of the MLP under PyTorch's DistributedDataParallel over
gloo (CPU), as bench/zero_step.lua times zorch's: same model, global batch,
Adam, gradient clipping 1.0; the slowest rank's mean step time as a JSON line.
    python3 bench/torch_ddp.py NAME WORLD IN HIDDEN OUT BATCH STEPS
WORLD 1 is a plain step in one process (no process group, no DDP);
ZORCH_BENCH_PRECISION=bf16 runs forward and backward under bf16 autocast with
float32 weights and optimizer, as zorch's Engine{precision = "bf16"} keeps a
float32 master copy (the name gains "_bf16").
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, args, port):
    name, i, h, o, batch, steps = args
    bf16 = os.environ.get("ZORCH_BENCH_PRECISION") == "bf16"
    if world > 1:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(i, h), torch.nn.ReLU(), torch.nn.Linear(h, o))
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-4)
    x, y = torch.randn(batch // world, i), torch.randn(batch // world, o)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.mse_loss(ddp(x).float(), y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()

    step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    per = torch.tensor([(time.perf_counter() - t0) / steps], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(per, op=dist.ReduceOp.MAX)
    if rank == 0:
        kind = "_ddp_gloo" if world > 1 else ""
        print(json.dumps({"name": f"torch/{name}{kind}_ranks{world}{'_bf16' if bf16 else ''}", "value": per.item() * 1e6,
                          "unit": "us"}))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    name, world = sys.argv[1], int(sys.argv[2])
    args = (name,) + tuple(int(a) for a in sys.argv[3:8])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if world == 1:
        run(0, 1, args, 0)
    else:
        mp.spawn(run, args=(world, args, 29500 + os.getpid() % 1000), nprocs=world)
