#!/usr/bin/python3
"""Golden optimizer trajectories from torch.optim, for tests/test_optim.cpp.

Run by hand from the repository root:  /usr/bin/python3 scripts/golden/optim.py
Writes tests/data/optim/:
  weight0.npy (3, 5), bias0.npy (5,)       initial parameters
  grad_weight.npy (S, 3, 5), grad_bias.npy (S, 5)   the fixed gradient fed at each step
  lrs.npy (S,)                             the learning rate used at each step (a warmup ramp)
  <case>_weight.npy (S, 3, 5), <case>_bias.npy (S, 5)   parameters after each step
  meta.json                                hyperparameters of each case
All float32, C order. "weight" is in a group with weight decay and "bias" in a group without, the
way normlab's no_decay_name() splits a model's parameters. The single-tensor (foreach=False) code
path is used: it is the one whose float32 operation order normlab follows.
"""
import json
import os
import shutil

import numpy as np
import torch

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "optim")
STEPS = 5
LRS = [0.02, 0.04, 0.06, 0.05, 0.03]

CASES = {
    "sgd": {"cls": "SGD", "kwargs": {"momentum": 0.9, "weight_decay": 0.01}},
    "adam": {"cls": "Adam", "kwargs": {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}},
    "adamw": {"cls": "AdamW", "kwargs": {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1}},
}


def main():
    g = torch.Generator().manual_seed(1234)
    weight0 = torch.randn(3, 5, generator=g)
    bias0 = 0.5 * torch.randn(5, generator=g)
    # Gradients of varying scale, including a small one, so that the second moment matters.
    grad_weight = torch.randn(STEPS, 3, 5, generator=g) * torch.tensor([1.0, 0.3, 2.0, 0.01, 1.0]).view(STEPS, 1, 1)
    grad_bias = torch.randn(STEPS, 5, generator=g)

    if os.path.isdir(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    os.makedirs(OUT_DIR)

    def save(name, t):
        np.save(os.path.join(OUT_DIR, name + ".npy"), np.ascontiguousarray(t.detach().numpy().astype(np.float32)))

    save("weight0", weight0)
    save("bias0", bias0)
    save("grad_weight", grad_weight)
    save("grad_bias", grad_bias)
    save("lrs", torch.tensor(LRS, dtype=torch.float32))

    meta = {"steps": STEPS, "lrs": LRS, "torch": torch.__version__, "cases": {}}
    for case, spec in CASES.items():
        weight = weight0.clone().requires_grad_(True)
        bias = bias0.clone().requires_grad_(True)
        cls = getattr(torch.optim, spec["cls"])
        groups = [{"params": [weight]}, {"params": [bias], "weight_decay": 0.0}]
        opt = cls(groups, lr=LRS[0], foreach=False, **spec["kwargs"])
        weights, biases = [], []
        for step in range(STEPS):
            for group in opt.param_groups:
                group["lr"] = LRS[step]
            weight.grad = grad_weight[step].clone()
            bias.grad = grad_bias[step].clone()
            opt.step()
            weights.append(weight.detach().clone())
            biases.append(bias.detach().clone())
        save(case + "_weight", torch.stack(weights))
        save(case + "_bias", torch.stack(biases))
        kwargs = dict(spec["kwargs"])
        if "betas" in kwargs:
            kwargs["betas"] = list(kwargs["betas"])
        meta["cases"][case] = {"optimizer": spec["cls"], **kwargs}

    with open(os.path.join(OUT_DIR, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
