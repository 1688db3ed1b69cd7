#!/usr/bin/python3
"""Golden data for qk-norm (model.qk_norm) and z-loss (optim.z_loss) from PyTorch.

Run by hand (CI never needs torch):

    /usr/bin/python3 scripts/golden/qk_norm.py [--out tests/data/qk_norm]

qk-norm: one encoder block of normlab's (src/nn/encoder.cpp) written in PyTorch, whose attention
normalizes each head's queries and keys over head_dim before the dot product, as timm's Attention
does (q_norm / k_norm: torch.nn.LayerNorm(head_dim) or an RMSNorm with a weight). For every case it
writes <out>/<case>/:
  meta.json                  hyper-parameters, lengths, parameter names, float32-vs-float64 gaps
  <state_dict key>.npy       every parameter, e.g. layers.0.self_attn.q_norm.weight.npy
  x.npy                      (T, d_model) packed input: the sequences' tokens one after another
  dout.npy                   (T, d_model) loss weights; loss = sum(out * dout)
  out.npy, grad.x.npy, grad.<key>.npy

z-loss: <out>/z_loss/ with logits.npy (N, V), targets.npy (N) int64 (-1 = ignored),
grad.logits.npy (d z_loss / d logits) and meta.json's "z_loss": mean over rows with a target of
logsumexp(logits)^2.

Each case runs in float32 (the golden values) and again in float64 from the same float32 numbers;
meta.json["max_abs_diff_f32_vs_f64"][key] is how far PyTorch's own float32 result is from the
exact one, the C++ test's tolerance scale (tests/test_qk_norm.cpp).
"""
import argparse
import json
import math
import os
import shutil

import numpy as np
import torch

SEED = 20261206
D_MODEL = 16
DIM_FEEDFORWARD = 32


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def make_norm(kind, dim, eps):
    return torch.nn.LayerNorm(dim, eps=eps) if kind == "layernorm" else RMSNorm(dim, eps)


class QkNormAttention(torch.nn.Module):
    """torch.nn.MultiheadAttention's parameters (in_proj_weight, in_proj_bias, out_proj) plus
    q_norm and k_norm over each head's head_dim features."""

    def __init__(self, d, nhead, qk_norm, eps):
        super().__init__()
        self.nhead = nhead
        self.in_proj_weight = torch.nn.Parameter(torch.empty(3 * d, d))
        self.in_proj_bias = torch.nn.Parameter(torch.empty(3 * d))
        self.out_proj = torch.nn.Linear(d, d)
        self.q_norm = make_norm(qk_norm, d // nhead, eps)
        self.k_norm = make_norm(qk_norm, d // nhead, eps)

    def forward(self, x, lengths):  # x (T, d) packed
        d = x.shape[1]
        hd = d // self.nhead
        qkv = x @ self.in_proj_weight.T + self.in_proj_bias
        q = self.q_norm(qkv[:, :d].reshape(-1, self.nhead, hd))
        k = self.k_norm(qkv[:, d:2 * d].reshape(-1, self.nhead, hd))
        v = qkv[:, 2 * d:].reshape(-1, self.nhead, hd)
        outs, start = [], 0
        for length in lengths:  # each sequence attends over its own tokens only
            s = slice(start, start + length)
            qs, ks, vs = q[s].transpose(0, 1), k[s].transpose(0, 1), v[s].transpose(0, 1)  # (H, L, hd)
            weights = torch.softmax(qs @ ks.transpose(1, 2) / math.sqrt(hd), dim=-1)
            outs.append((weights @ vs).transpose(0, 1).reshape(length, d))
            start += length
        return self.out_proj(torch.cat(outs, dim=0))


class Block(torch.nn.Module):
    def __init__(self, case):
        super().__init__()
        d, eps = D_MODEL, case["norm_eps"]
        self.case = case
        self.self_attn = QkNormAttention(d, case["nhead"], case["qk_norm"], eps)
        self.linear1 = torch.nn.Linear(d, DIM_FEEDFORWARD)
        self.linear2 = torch.nn.Linear(DIM_FEEDFORWARD, d)
        if case["norm"] != "none":
            self.norm1 = make_norm(case["norm"], d, eps)
            self.norm2 = make_norm(case["norm"], d, eps)

    def forward(self, x, lengths):
        attn = lambda t: self.self_attn(t, lengths)
        ffn = lambda t: self.linear2(torch.relu(self.linear1(t)))
        if self.case["norm"] == "none":
            h = x + attn(x)
            return h + ffn(h)
        if self.case["placement"] == "post":
            h = self.norm1(x + attn(x))
            return self.norm2(h + ffn(h))
        h = x + attn(self.norm1(x))
        return h + ffn(self.norm2(h))


class Encoder(torch.nn.Module):
    def __init__(self, case):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block(case) for _ in range(case["num_layers"]))

    def forward(self, x, lengths):
        for layer in self.layers:
            x = layer(x, lengths)
        return x


CASES = [
    dict(name="post_ln_qk_layernorm", norm="layernorm", placement="post", qk_norm="layernorm", nhead=4,
         norm_eps=1e-5, num_layers=1, lengths=[5, 1, 7]),
    dict(name="pre_ln_qk_rmsnorm", norm="layernorm", placement="pre", qk_norm="rmsnorm", nhead=2,
         norm_eps=1e-5, num_layers=2, lengths=[4, 6, 2]),
    dict(name="none_qk_layernorm", norm="none", placement="pre", qk_norm="layernorm", nhead=4,
         norm_eps=1e-6, num_layers=1, lengths=[3, 8]),
    dict(name="pre_rms_qk_layernorm", norm="rmsnorm", placement="pre", qk_norm="layernorm", nhead=2,
         norm_eps=1e-5, num_layers=1, lengths=[6, 2, 5]),
]


def init_parameters(model, gen):
    # Non-trivial values everywhere (gammas near 1, biases near 0, weights ~ 1/sqrt(fan_in)) so
    # every term of the backward matters. Queries and keys get a large scale: their logits are then
    # big without qk-norm, and qk-norm is what brings them back.
    with torch.no_grad():
        for key, param in model.named_parameters():
            if key.endswith("norm1.weight") or key.endswith("norm2.weight") or key.endswith("_norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
            elif key.endswith("bias"):
                param.copy_(0.1 * torch.randn(param.shape, generator=gen))
            else:
                scale = 3.0 if key.endswith("in_proj_weight") else 1.0
                param.copy_(scale * torch.randn(param.shape, generator=gen) / math.sqrt(param.shape[1]))


def run(model, x, dout, lengths, dtype):
    model = model.to(dtype)
    x = x.to(dtype).clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    out = model(x, lengths)
    (out * dout.to(dtype)).sum().backward()
    results = {"out": out.detach().clone(), "grad.x": x.grad.detach().clone()}
    for key, param in model.named_parameters():
        results["grad." + key] = param.grad.detach().clone()
    return results


def save(path, tensor):
    np.save(path, np.ascontiguousarray(tensor.detach().cpu().numpy().astype(np.float32)))


def write_case(case, out_dir, gen):
    model = Encoder(case)
    init_parameters(model, gen)
    total = sum(case["lengths"])
    x = torch.randn(total, D_MODEL, generator=gen)
    dout = torch.randn(total, D_MODEL, generator=gen)
    f32 = run(model, x, dout, case["lengths"], torch.float32)
    model64 = Encoder(case)
    model64.load_state_dict(model.state_dict())
    f64 = run(model64, x, dout, case["lengths"], torch.float64)
    directory = os.path.join(out_dir, case["name"])
    os.makedirs(directory)
    params = [key for key, _ in model.named_parameters()]
    for key, param in model.named_parameters():
        save(os.path.join(directory, key + ".npy"), param.float())
    save(os.path.join(directory, "x.npy"), x)
    save(os.path.join(directory, "dout.npy"), dout)
    for key, value in f32.items():
        save(os.path.join(directory, key + ".npy"), value)
    meta = dict(case, d_model=D_MODEL, dim_feedforward=DIM_FEEDFORWARD, activation="relu", parameters=params,
                torch_version=torch.__version__,
                max_abs_diff_f32_vs_f64={k: float((f32[k].double() - f64[k]).abs().max()) for k in f32},
                max_abs_f64={k: float(f64[k].abs().max()) for k in f64})
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)


def write_z_loss(out_dir, gen):
    n, v = 9, 6
    logits = 3.0 * torch.randn(n, v, generator=gen) + 2.0  # log Z well away from 0
    targets = torch.randint(0, v, (n,), generator=gen)
    targets[2] = -1
    targets[7] = -1
    results = {}
    for dtype in (torch.float32, torch.float64):
        z = logits.to(dtype).clone().requires_grad_(True)
        kept = targets != -1
        loss = (torch.logsumexp(z, dim=-1)[kept] ** 2).mean()
        loss.backward()
        results[dtype] = (loss.detach(), z.grad.detach().clone())
    directory = os.path.join(out_dir, "z_loss")
    os.makedirs(directory)
    save(os.path.join(directory, "logits.npy"), logits)
    np.save(os.path.join(directory, "targets.npy"), targets.numpy().astype(np.int64))
    save(os.path.join(directory, "grad.logits.npy"), results[torch.float32][1])
    meta = dict(z_loss=float(results[torch.float32][0]), z_loss_f64=float(results[torch.float64][0]),
                max_abs_diff_f32_vs_f64={
                    "z_loss": abs(float(results[torch.float32][0]) - float(results[torch.float64][0])),
                    "grad.logits": float((results[torch.float32][1].double() - results[torch.float64][1]).abs().max())},
                max_abs_f64={"z_loss": abs(float(results[torch.float64][0])),
                             "grad.logits": float(results[torch.float64][1].abs().max())},
                torch_version=torch.__version__)
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "qk_norm"))
    args = parser.parse_args()
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    gen = torch.Generator().manual_seed(SEED)
    for case in CASES:
        write_case(case, args.out, gen)
    write_z_loss(args.out, gen)
    print(f"wrote {len(CASES)} qk-norm cases and the z-loss case to {args.out}")


if __name__ == "__main__":
    main()
