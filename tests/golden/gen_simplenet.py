#!/usr/bin/env python3
"""PyTorch's side of the SimpleNet parity test: initial weights, data, and the
weights after 200 Adam steps with gradient clipping 1.0 (batch 64, data in
order), written as safetensors files beside this script:

  simplenet_init.safetensors   fc1.weight, fc1.bias, fc2.weight, fc2.bias
  simplenet_data.safetensors   X (640, 10), Y (640, 2)
  simplenet_final.safetensors  the weights after training

tests/lua/test_parity.lua trains models/simple_net.lua from the same start and
compares. Usage: python3 tests/golden/gen_simplenet.py  (needs torch, safetensors)
"""
import os

import torch
from safetensors.torch import save_file

torch.manual_seed(7)
here = os.path.dirname(os.path.abspath(__file__))


class SimpleNet(torch.nn.Module):
    def __init__(self, i, h, o):
        super().__init__()
        self.fc1 = torch.nn.Linear(i, h)
        self.fc2 = torch.nn.Linear(h, o)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


model = SimpleNet(10, 20, 2)
X, Y = torch.randn(640, 10), torch.randn(640, 2) * 3
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(here, "simplenet_init.safetensors"))
save_file({"X": X, "Y": Y}, os.path.join(here, "simplenet_data.safetensors"))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
crit = torch.nn.MSELoss()
steps = 0
while steps < 200:
    for b in range(0, 640, 64):
        loss = crit(model(X[b:b + 64]), Y[b:b + 64])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        steps += 1
        if steps == 200:
            break
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(here, "simplenet_final.safetensors"))
print("final loss", loss.item())
