#!/usr/bin/env python3
"""The PyTorch side of models/fashion_mnist.lua: the same MLP and CNN, the same
normalisation and the same batches (the shuffle order is derived from the seed
with zorch.data's generator, reimplemented here).

  # the first steps' losses from zorch's initial weights:
  build/zorch models/fashion_mnist.lua --model mlp --no-shuffle --limit 320 --batch-size 64 \\
      --save-init init.safetensors --print-steps 5 --epochs 1
  python3 models/fashion_mnist_torch.py --model mlp --init init.safetensors --limit 320 \\
      --batch-size 64 --steps 5
  # a state dict zorch saved, loaded into the PyTorch model and tested:
  python3 models/fashion_mnist_torch.py --model cnn --check fashion_mnist.safetensors
  # the whole training from zorch's initial weights, on zorch's batches (shuffled
  # with the same seed), with the same Adam and cosine schedule:
  build/zorch models/fashion_mnist.lua --model mlp --epochs 5 --save-init init.safetensors
  python3 models/fashion_mnist_torch.py --model mlp --init init.safetensors --train --epochs 5

Needs torch and safetensors; reads the IDX files itself (gzip + struct).
"""
import argparse
import gzip
import json
import math
import struct
import time

import torch
from safetensors.torch import load_file

MEAN, STD = 0.2860, 0.3530
DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    zero, kind, nd = struct.unpack(">HBB", raw[:4])
    assert zero == 0 and kind == 0x08, f"{path}: not a uint8 IDX file"
    dims = struct.unpack(f">{nd}I", raw[4:4 + 4 * nd])
    data = torch.frombuffer(bytearray(raw[4 + 4 * nd:]), dtype=torch.uint8)
    return data.reshape(dims)


def load_split(folder, prefix, limit=0):
    x = read_idx(f"{folder}/{prefix}-images-idx3-ubyte.gz")
    y = read_idx(f"{folder}/{prefix}-labels-idx1-ubyte.gz").long()
    if limit:
        x, y = x[:limit], y[:limit]
    return x.reshape(-1, 1, 28, 28), y


def normalize(x):
    # as data.normalize in zorch: float32, minus the mean, over the std (pixel units)
    return (x.float() - MEAN * 255) / (STD * 255)


def build(kind, dropout=0.0):
    nn = torch.nn
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(dropout), nn.Linear(128, 10))


MASK = (1 << 64) - 1


def zorch_order(n, seed, epoch):
    """The 0-based order of data.DataLoader's shuffle of n samples in epoch
    `epoch` (1-based) with `seed`: a 64-bit LCG with an xorshift output drives a
    Fisher-Yates shuffle from the end (lua/data.lua, rng and DataLoader:order)."""
    s = (((seed * 1000003 + epoch) * 6364136223846793005 + 1442695040888963407) & MASK) | 1
    idx = list(range(n))
    for i in range(n - 1, 0, -1):  # Lua's i = n .. 2, here 0-based
        s = (s * 6364136223846793005 + 1442695040888963407) & MASK
        x = s ^ (s >> 29)
        j = (x >> 1) % (i + 1)
        idx[i], idx[j] = idx[j], idx[i]
    return torch.tensor(idx, dtype=torch.long)


def train(model, x, y, tx, ty, a):
    """fashion_mnist.lua's loop: the same batches, optimizer and per-epoch
    learning rate; prints the mean train loss and the test accuracy each epoch.
    Returns the final test accuracy and the loss of every step."""
    opt = (torch.optim.Adam(model.parameters(), lr=a.lr, weight_decay=a.weight_decay) if a.optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay))
    crit = torch.nn.CrossEntropyLoss()
    acc, losses = 0.0, []
    for epoch in range(1, a.epochs + 1):
        lr = a.lr * 0.5 * (1 + math.cos(math.pi * (epoch - 1) / a.epochs)) if a.schedule == "cosine" else a.lr
        for g in opt.param_groups:
            g["lr"] = lr
        order = zorch_order(len(x), a.seed, epoch) if a.shuffle else torch.arange(len(x))
        model.train()
        total, n, t0 = 0.0, 0, time.time()
        for start in range(0, len(x), a.batch_size):
            rows = order[start:start + a.batch_size]
            loss = crit(model(normalize(x[rows])), y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            total, n = total + losses[-1], n + 1
        acc = accuracy(model, tx, ty)
        print(f"Epoch {epoch} train loss: {total / n:.4f}  test accuracy: {100 * acc:.2f}%  "
              f"({time.time() - t0:.1f}s)", flush=True)
    return acc, losses


def first_losses(model, x, y, steps, batch_size, lr, optimizer="adam", momentum=0.9):
    """Losses of the first `steps` optimizer steps over x, y in order."""
    opt = (torch.optim.Adam(model.parameters(), lr=lr) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum))
    crit = torch.nn.CrossEntropyLoss()
    model.train()
    losses, start = [], 0
    while len(losses) < steps:
        if start >= len(x):
            start = 0
        xb, yb = normalize(x[start:start + batch_size]), y[start:start + batch_size]
        start += batch_size
        loss = crit(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def bench(model, x, y, a):
    """fashion_mnist.lua --bench: the best of a.bench rounds (after a warm-up) of one
    training step and one inference (eval, no grad) on the first batch."""
    xb, yb = normalize(x[:a.batch_size]), y[:a.batch_size]
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    crit = torch.nn.CrossEntropyLoss()
    best_train = best_infer = float("inf")
    for r in range(a.bench + 1):
        model.train()
        t0 = time.perf_counter()
        loss = crit(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        t1 = time.perf_counter()
        model.eval()
        with torch.no_grad():
            model(xb).argmax(1)
        t2 = time.perf_counter()
        if r > 0:
            best_train, best_infer = min(best_train, t1 - t0), min(best_infer, t2 - t1)
    name = f"fashion_mnist_{a.model}_b{a.batch_size}_t{torch.get_num_threads()}"
    for what, t in (("train", best_train), ("infer", best_infer)):
        print(json.dumps({"name": f"torch/{name}_{what}", "value": float(f"{a.batch_size / t:.4g}"),
                          "unit": "images/s"}), flush=True)


@torch.no_grad()
def accuracy(model, x, y):
    model.eval()
    correct = 0
    for i in range(0, len(x), 500):
        correct += (model(normalize(x[i:i + 500])).argmax(1) == y[i:i + 500]).sum().item()
    return correct / len(x)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--data", default=DATA)
    p.add_argument("--init", help="start from this state dict (fashion_mnist.lua --save-init)")
    p.add_argument("--check", help="load this state dict (fashion_mnist.lua --save) and print the test accuracy")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--train", action="store_true", help="train as fashion_mnist.lua does, testing each epoch")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--schedule", choices=["cosine", "constant"], default="cosine")
    p.add_argument("--seed", type=int, default=0, help="the shuffle's seed (fashion_mnist.lua --seed)")
    p.add_argument("--no-shuffle", dest="shuffle", action="store_false", help="keep the file's order")
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bench", type=int, default=0, help="time N rounds of a training step and an inference, print JSON")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model = build(a.model)
    if a.check:
        # strict: every name of the PyTorch model, buffers included, must be in the file
        model.load_state_dict(load_file(a.check))
        tx, ty = load_split(a.data, "t10k")
        print(f"test accuracy {100 * accuracy(model, tx, ty):.2f}%")
        return
    if a.init:
        model.load_state_dict(load_file(a.init))
    x, y = load_split(a.data, "train", a.limit)
    if a.bench:
        bench(model, x, y, a)
        return
    if a.train:
        tx, ty = load_split(a.data, "t10k", a.test_limit)
        t0 = time.time()
        acc, _ = train(model, x, y, tx, ty, a)
        print(f"done: {a.model}, {a.epochs} epochs in {time.time() - t0:.1f}s, test accuracy {100 * acc:.2f}%")
        return
    for i, loss in enumerate(first_losses(model, x, y, a.steps, a.batch_size, a.lr, a.optimizer), 1):
        print(f"step {i} loss {loss:.8f}")


if __name__ == "__main__":
    main()
