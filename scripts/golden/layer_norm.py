#!/usr/bin/python3
"""Golden LayerNorm / RMSNorm data from PyTorch, for tests/test_layer_norm_kernels.cpp.

Run by hand from the repository root:  /usr/bin/python3 scripts/golden/layer_norm.py
Writes tests/data/layernorm/<case>/{x,gamma,beta,dout,y,dx,dgamma,dbeta}.npy (float32) and
meta.json. Deterministic: one torch.Generator per case seeded from the case index.

LayerNorm outputs come from torch.nn.functional.layer_norm and autograd (loss = sum(y * dout)), in
float32 unless meta.json says "reference_dtype": "float64": those cases (a mean of 1e4, constant
rows) are computed in float64 on the same float32 inputs and rounded to float32 at the end, because
float32 PyTorch itself is off there by more than the test tolerance. torch 1.13 has no nn.RMSNorm:
the RMSNorm case uses the formula y = x * rsqrt(mean(x^2) + eps) * gamma under autograd.
"""
import json
import os
import shutil

import numpy as np
import torch
import torch.nn.functional as F

OUT_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "layernorm"))


def layer_norm_case(name, seed, input_shape, normalized_shape, eps, affine=True, dtype=torch.float32,
                    make_x=None, note=""):
    g = torch.Generator().manual_seed(seed)
    x = make_x(g) if make_x else torch.randn(*input_shape, generator=g)
    x = x.to(torch.float32)
    dout = torch.randn(*input_shape, generator=g)
    gamma = 1.0 + 0.1 * torch.randn(*normalized_shape, generator=g)
    beta = 0.1 * torch.randn(*normalized_shape, generator=g)

    xr = x.to(dtype).requires_grad_(True)
    params = []
    if affine:
        gr = gamma.to(dtype).requires_grad_(True)
        br = beta.to(dtype).requires_grad_(True)
        params = [gr, br]
        y = F.layer_norm(xr, normalized_shape, gr, br, eps)
    else:
        y = F.layer_norm(xr, normalized_shape, None, None, eps)
    grads = torch.autograd.grad(y, [xr] + params, dout.to(dtype))

    arrays = {"x": x, "dout": dout, "y": y.detach(), "dx": grads[0]}
    if affine:
        arrays.update({"gamma": gamma, "beta": beta, "dgamma": grads[1], "dbeta": grads[2]})
    meta = {"op": "layer_norm", "input_shape": list(input_shape), "normalized_shape": list(normalized_shape),
            "eps": eps, "affine": affine, "reference_dtype": "float64" if dtype == torch.float64 else "float32",
            "seed": seed, "note": note}
    write_case(name, arrays, meta)


def rms_norm_case(name, seed, input_shape, eps):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*input_shape, generator=g)
    dout = torch.randn(*input_shape, generator=g)
    gamma = 1.0 + 0.1 * torch.randn(input_shape[-1], generator=g)
    xr = x.clone().requires_grad_(True)
    gr = gamma.clone().requires_grad_(True)
    y = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + eps) * gr
    dx, dgamma = torch.autograd.grad(y, [xr, gr], dout)
    meta = {"op": "rms_norm", "input_shape": list(input_shape), "normalized_shape": [input_shape[-1]], "eps": eps,
            "affine": True, "reference_dtype": "float32", "seed": seed,
            "note": "y = x * rsqrt(mean(x^2, -1) + eps) * gamma (no beta)"}
    write_case(name, {"x": x, "dout": dout, "gamma": gamma, "y": y.detach(), "dx": dx, "dgamma": dgamma}, meta)


def write_case(name, arrays, meta):
    case_dir = os.path.join(OUT_DIR, name)
    os.makedirs(case_dir, exist_ok=True)
    for key, tensor in arrays.items():
        np.save(os.path.join(case_dir, key + ".npy"), tensor.detach().to(torch.float32).numpy())
    with open(os.path.join(case_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


def main():
    if os.path.isdir(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    # The BERT-base-like shape of the project's docs: [batch, seq_len, d_model], eps 1e-12.
    layer_norm_case("bert_4x100x512", 1, (4, 100, 512), (512,), 1e-12)
    layer_norm_case("small_2x7x33_eps1e-5", 2, (2, 7, 33), (33,), 1e-5)
    layer_norm_case("two_dims_3x5x6x8", 3, (3, 5, 6, 8), (6, 8), 1e-5,
                    note="normalized over the last two dims: 15 rows of 48")
    layer_norm_case("no_affine_6x40", 4, (6, 40), (40,), 1e-12, affine=False)
    layer_norm_case("odd_width_3x4099", 5, (3, 4099), (4099,), 1e-5)
    # cols = 1: y = beta, dx = 0, dgamma = 0 exactly. float32 PyTorch returns rounding noise there
    # (y = x * scale + shift form, 7e-4 relative off beta), hence the float64 reference.
    layer_norm_case("single_element_5x1", 6, (5, 1), (1,), 1e-5, dtype=torch.float64,
                    note="cols = 1: y = beta, dx = 0")

    def large_mean(g):  # rows with mean 1e4 and std 1: float32 E[x^2]-E[x]^2 would be garbage
        return 1e4 + torch.randn(8, 256, generator=g, dtype=torch.float64)
    layer_norm_case("large_mean_8x256", 7, (8, 256), (256,), 1e-12, dtype=torch.float64, make_x=large_mean,
                    note="mean 1e4, std 1")

    def constant_rows(g):  # var 0: rstd = 1/sqrt(eps) = 1e6, y = beta, dx = rstd * (g - mean(g))
        return (torch.randn(4, 1, generator=g, dtype=torch.float64) * 3.0).expand(4, 64).contiguous()
    layer_norm_case("constant_rows_4x64", 8, (4, 64), (64,), 1e-12, dtype=torch.float64, make_x=constant_rows,
                    note="every row constant: var 0, rstd 1/sqrt(eps)")

    rms_norm_case("rms_norm_3x10x64", 9, (3, 10, 64), 1e-6)

    total = 0
    for root, _, files in os.walk(OUT_DIR):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"wrote {OUT_DIR} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
