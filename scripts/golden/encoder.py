#!/usr/bin/python3
"""Golden data for the Transformer encoder from PyTorch's nn.TransformerEncoder(Layer).

Run by hand (CI never needs torch):

    /usr/bin/python3 scripts/golden/encoder.py [--out tests/data/encoder]

For every case it writes tests/data/encoder/<case>/:
  meta.json                 hyper-parameters, lengths, float32-vs-float64 discrepancies
  <state_dict key>.npy      every parameter, e.g. layers.0.self_attn.in_proj_weight.npy
  x.npy                     (B, Tmax, d_model) padded input; padding rows hold junk, not zeros
  lengths.npy               (B,) int64
  src_key_padding_mask.npy  (B, Tmax) float32, 1.0 = padding (PyTorch True), 0.0 = real
  dout.npy                  (B, Tmax, d_model) loss weights, zero at padding; loss = sum(out * dout)
  out.npy                   (B, Tmax, d_model) encoder output, padding rows zeroed
  grad.x.npy                (B, Tmax, d_model) d loss / d x, padding rows exactly zero
  grad.<state_dict key>.npy d loss / d parameter

All arrays are C-contiguous float32 except lengths (int64). Values come from PyTorch in float32;
a second pass in float64 with the same (float32-representable) parameters and inputs measures how
far the float32 results are from the exact ones, recorded in meta.json["max_abs_diff_f32_vs_f64"].

Semantics worth knowing on the C++ side:
- activation "gelu" is PyTorch's exact erf GELU (F.gelu, approximate='none').
- LayerNorm uses the biased variance and eps inside the square root.
- src_key_padding_mask is passed to PyTorch as bool; a float mask would be *added* to the scores.
- a padded query row attends to real keys of its sequence only and is garbage; it is zeroed here.
"""
import argparse
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn as nn

SEED = 20240601
D_MODEL = 16
DIM_FEEDFORWARD = 32


def make_cases():
    cases = []
    for norm_first in (False, True):
        for activation in ("relu", "gelu"):
            for eps in (1e-5, 1e-12):
                name = "{}_{}_eps{:.0e}_L1".format("pre" if norm_first else "post", activation, eps)
                cases.append(dict(name=name, nhead=4, activation=activation, norm_first=norm_first,
                                  layer_norm_eps=eps, num_layers=1, final_norm=False,
                                  lengths=[5, 1, 7]))
    cases.append(dict(name="post_relu_eps1e-05_L2_nhead2", nhead=2, activation="relu",
                      norm_first=False, layer_norm_eps=1e-5, num_layers=2, final_norm=False,
                      lengths=[6, 3, 2]))
    cases.append(dict(name="pre_gelu_eps1e-05_L2_finalnorm", nhead=4, activation="gelu",
                      norm_first=True, layer_norm_eps=1e-5, num_layers=2, final_norm=True,
                      lengths=[4, 7, 1]))
    # Small-variance tokens (0.5 + 1e-3 * noise: var ~1e-6 per token) where eps 1e-5 vs 1e-12 changes
    # the outputs by O(1), so a layer that ignored the configured eps fails. Pre: norm1 sees x
    # itself. Post: the attention output is scaled down 1000x so norm1 sees a small-variance sum.
    for norm_first, activation, eps in ((True, "relu", 1e-5), (True, "gelu", 1e-12),
                                        (False, "gelu", 1e-5), (False, "relu", 1e-12)):
        name = "{}_{}_eps{:.0e}_smallvar".format("pre" if norm_first else "post", activation, eps)
        cases.append(dict(name=name, nhead=4, activation=activation, norm_first=norm_first,
                          layer_norm_eps=eps, num_layers=1, final_norm=False, lengths=[3, 6, 2],
                          small_variance=True))
    return cases


def build_model(case, gen):
    layer = nn.TransformerEncoderLayer(
        d_model=D_MODEL, nhead=case["nhead"], dim_feedforward=DIM_FEEDFORWARD, dropout=0.0,
        activation=case["activation"], layer_norm_eps=case["layer_norm_eps"], batch_first=True,
        norm_first=case["norm_first"])
    final_norm = nn.LayerNorm(D_MODEL, eps=case["layer_norm_eps"]) if case["final_norm"] else None
    # enable_nested_tensor=False keeps the plain padded path and the `layers.N.` / `norm.` keys.
    model = nn.TransformerEncoder(layer, case["num_layers"], norm=final_norm,
                                  enable_nested_tensor=False)
    # nn.TransformerEncoder deep-copies the layer, so every layer starts identical: redraw all of
    # them. PyTorch zero-initialises the attention biases and LayerNorm is (1, 0); non-trivial
    # values make every gradient term of the backward pass matter.
    with torch.no_grad():
        for key, param in model.named_parameters():
            shape = param.shape
            if key.endswith("norm1.weight") or key.endswith("norm2.weight") or key == "norm.weight":
                param.copy_(1.0 + 0.1 * torch.randn(shape, generator=gen))
            elif key.endswith("bias"):
                param.copy_(0.1 * torch.randn(shape, generator=gen))
            else:
                fan_in = shape[1]
                param.copy_(torch.randn(shape, generator=gen) / math.sqrt(fan_in))
        if case.get("small_variance") and not case["norm_first"]:
            for key, param in model.named_parameters():
                if "out_proj" in key:
                    param.mul_(1e-3)
    model.train()  # training mode: see forbid_fast_paths()
    return model


def make_inputs(case, gen):
    lengths = case["lengths"]
    batch, t_max = len(lengths), max(lengths)
    real = torch.zeros(batch, t_max, dtype=torch.bool)
    for b, length in enumerate(lengths):
        real[b, :length] = True
    # Padding rows get large finite junk: if padding leaked anywhere, outputs would move a lot.
    # (NaN junk would poison PyTorch itself: 0 * NaN through the masked attention weights.)
    junk = 50.0 * (2.0 * torch.rand(batch, t_max, D_MODEL, generator=gen) - 1.0)
    tokens = torch.randn(batch, t_max, D_MODEL, generator=gen)
    if case.get("small_variance"):
        tokens = 0.5 + 1e-3 * tokens
    x = torch.where(real[:, :, None], tokens, junk)
    dout = torch.randn(batch, t_max, D_MODEL, generator=gen) * real[:, :, None]
    padding_mask = ~real
    return x, dout, padding_mask


def forbid_fast_paths():
    """Make PyTorch's fused inference kernels raise if they are ever reached.

    torch 1.13 has no torch.backends.mha.set_fastpath_enabled. nn.TransformerEncoderLayer.forward
    and nn.MultiheadAttention.forward take the fused path (torch._transformer_encoder_layer_fwd /
    torch._native_multi_head_attention) only in eval mode with grad disabled or no parameter
    requiring grad. We run in training mode with requires_grad inputs, so the composite slow path
    (the plain math the C++ code reimplements) runs; this guard proves it, and
    check_against_numpy() checks the math independently.
    """
    def refuse(*args, **kwargs):
        raise RuntimeError("fused MHA/encoder fast path was used; golden data would be invalid")
    for name in ("_transformer_encoder_layer_fwd", "_native_multi_head_attention"):
        if hasattr(torch, name):
            setattr(torch, name, refuse)


def run(model, x, dout, padding_mask, dtype):
    model = model.to(dtype)
    x = x.to(dtype).clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    out = model(x, src_key_padding_mask=padding_mask)
    loss = (out * dout.to(dtype)).sum()
    loss.backward()
    grads = {"x": x.grad.detach().clone()}
    for key, param in model.named_parameters():
        grads[key] = param.grad.detach().clone()
    return out.detach().clone(), grads


# ---------------------------------------------------------------------------------------------
# Independent float64 numpy forward, per sequence over its real tokens only (the packed layout
# the C++ code uses). Agreement with PyTorch proves both the semantics and that padding is inert.

def np_layer_norm(x, weight, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def np_gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def np_self_attention(x, p, prefix, nhead):
    tokens, d = x.shape
    head_dim = d // nhead
    qkv = x @ p[prefix + "in_proj_weight"].T + p[prefix + "in_proj_bias"]  # (T, 3d)
    q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
    heads = []
    for h in range(nhead):
        cols = slice(h * head_dim, (h + 1) * head_dim)
        scores = q[:, cols] @ k[:, cols].T / math.sqrt(head_dim)  # (T, T)
        scores = scores - scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        heads.append(weights @ v[:, cols])
    attn = np.concatenate(heads, axis=1)
    return attn @ p[prefix + "out_proj.weight"].T + p[prefix + "out_proj.bias"]


def np_encoder_sequence(x, p, case):
    eps = case["layer_norm_eps"]
    act = np_gelu if case["activation"] == "gelu" else (lambda a: np.maximum(a, 0.0))
    for n in range(case["num_layers"]):
        pre = "layers.{}.".format(n)

        def ln(y, which):
            return np_layer_norm(y, p[pre + which + ".weight"], p[pre + which + ".bias"], eps)

        def sa(y):
            return np_self_attention(y, p, pre + "self_attn.", case["nhead"])

        def ff(y):
            hidden = act(y @ p[pre + "linear1.weight"].T + p[pre + "linear1.bias"])
            return hidden @ p[pre + "linear2.weight"].T + p[pre + "linear2.bias"]

        if case["norm_first"]:
            x = x + sa(ln(x, "norm1"))
            x = x + ff(ln(x, "norm2"))
        else:
            x = ln(x + sa(x), "norm1")
            x = ln(x + ff(x), "norm2")
    if case["final_norm"]:
        x = np_layer_norm(x, p["norm.weight"], p["norm.bias"], eps)
    return x


def check_against_numpy(case, params64, x64, out64):
    worst = 0.0
    for b, length in enumerate(case["lengths"]):
        ref = np_encoder_sequence(x64[b, :length], params64, case)
        worst = max(worst, float(np.abs(ref - out64[b, :length]).max()))
    if worst > 1e-10:
        sys.exit("{}: numpy float64 reference disagrees with torch by {:.3e}".format(case["name"], worst))
    return worst


def check_directional_derivative(model64, x64, dout64, padding_mask, grads64, gen, step=1e-6):
    """Central difference of the float64 loss along one random direction vs sum(grad * dir).

    Small-variance cases curve on the scale of their 1e-3 spread and need a smaller step."""
    real = (~padding_mask)[:, :, None].double()
    dirs = {"x": torch.randn(x64.shape, generator=gen, dtype=torch.float64) * real}
    for key, param in model64.named_parameters():
        dirs[key] = torch.randn(param.shape, generator=gen, dtype=torch.float64)
    predicted = sum(float((grads64[key] * d).sum()) for key, d in dirs.items())
    params = dict(model64.named_parameters())
    originals = {key: p.detach().clone() for key, p in params.items()}

    def loss_at(sign):
        with torch.no_grad():
            for key, p in params.items():
                p.copy_(originals[key] + sign * step * dirs[key])
            out = model64(x64 + sign * step * dirs["x"], src_key_padding_mask=padding_mask)
            return float((out * dout64).sum())

    measured = (loss_at(+1.0) - loss_at(-1.0)) / (2.0 * step)
    with torch.no_grad():
        for key, p in params.items():
            p.copy_(originals[key])
    rel = abs(measured - predicted) / max(1.0, abs(predicted))
    return rel


def save(path, array):
    np.save(path, np.ascontiguousarray(array))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "data", "encoder"))
    args = parser.parse_args()
    out_root = os.path.normpath(args.out)

    torch.set_num_threads(1)  # one thread: bit-identical files on every rerun
    forbid_fast_paths()
    if os.path.isdir(out_root):
        shutil.rmtree(out_root)
    os.makedirs(out_root)

    print("{:34s} {:>9s} {:>9s} {:>9s} {:>9s} {:>9s}".format(
        "case", "out", "grad.x", "grad.par", "np-ref", "fd-rel"))
    for index, case in enumerate(make_cases()):
        gen = torch.Generator().manual_seed(SEED + index)
        model = build_model(case, gen)
        x, dout, padding_mask = make_inputs(case, gen)
        real = (~padding_mask)[:, :, None]

        out32, grads32 = run(model, x, dout, padding_mask, torch.float32)
        params32 = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model64 = model  # .to() is in place for modules: keep float32 copies above first
        out64, grads64 = run(model64, x, dout, padding_mask, torch.float64)

        # Padding must be inert: zero gradient into padding rows (exactly, since the masked
        # attention weights are exactly 0 and dout is 0 there) ...
        for name, g in (("float32", grads32["x"]), ("float64", grads64["x"])):
            leaked = float((g * (~real)).abs().max())
            if leaked != 0.0:
                sys.exit("{}: {} grad.x is {:.3e} at padding".format(case["name"], name, leaked))
        # ... and other junk in the padding must not change real rows.
        x_other = torch.where(real, x, -x)
        out_other, _ = run(model64, x_other, dout, padding_mask, torch.float64)
        moved = float(((out_other - out64) * real).abs().max())
        if moved != 0.0:
            sys.exit("{}: real outputs moved by {:.3e} when padding junk changed".format(case["name"], moved))

        params64_np = {k: v.detach().double().numpy() for k, v in model64.state_dict().items()}
        np_diff = check_against_numpy(case, params64_np, x.double().numpy(), out64.numpy())
        fd_rel = check_directional_derivative(model64, x.double(), dout.double(), padding_mask,
                                              grads64, gen, 1e-9 if case.get("small_variance") else 1e-6)
        if fd_rel > 1e-6:
            sys.exit("{}: finite-difference check failed, rel {:.3e}".format(case["name"], fd_rel))

        diffs = {"out": float(((out32.double() - out64) * real).abs().max())}
        for key in grads32:
            diffs["grad." + key] = float((grads32[key].double() - grads64[key]).abs().max())
        max_abs = {"out": float((out64 * real).abs().max())}
        for key in grads64:
            max_abs["grad." + key] = float(grads64[key].abs().max())

        case_dir = os.path.join(out_root, case["name"])
        os.makedirs(case_dir)
        for key, value in params32.items():
            save(os.path.join(case_dir, key + ".npy"), value.numpy().astype(np.float32))
        save(os.path.join(case_dir, "x.npy"), x.numpy().astype(np.float32))
        save(os.path.join(case_dir, "lengths.npy"), np.array(case["lengths"], dtype=np.int64))
        save(os.path.join(case_dir, "src_key_padding_mask.npy"), padding_mask.numpy().astype(np.float32))
        save(os.path.join(case_dir, "dout.npy"), dout.numpy().astype(np.float32))
        save(os.path.join(case_dir, "out.npy"), (out32 * real).numpy().astype(np.float32))
        for key, g in grads32.items():
            save(os.path.join(case_dir, "grad." + key + ".npy"), g.numpy().astype(np.float32))

        meta = {
            "d_model": D_MODEL,
            "nhead": case["nhead"],
            "dim_feedforward": DIM_FEEDFORWARD,
            "activation": case["activation"],
            "norm_first": case["norm_first"],
            "layer_norm_eps": case["layer_norm_eps"],
            "num_layers": case["num_layers"],
            "final_norm": case["final_norm"],
            "small_variance": bool(case.get("small_variance", False)),
            "batch": len(case["lengths"]),
            "lengths": case["lengths"],
            "parameters": list(params32.keys()),
            "loss": "sum(out * dout)",
            "seed": SEED + index,
            "torch_version": torch.__version__,
            "max_abs_diff_f32_vs_f64": diffs,
            "max_abs_f64": max_abs,
        }
        with open(os.path.join(case_dir, "meta.json"), "w") as f:
            json.dump(meta, f, indent=2)
            f.write("\n")

        param_diff = max(v for k, v in diffs.items() if k not in ("out", "grad.x"))
        print("{:34s} {:9.2e} {:9.2e} {:9.2e} {:9.2e} {:9.2e}".format(
            case["name"], diffs["out"], diffs["grad.x"], param_diff, np_diff, fd_rel))

    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(out_root) for f in files)
    print("columns: max |f32 - f64| of out, grad.x, max over parameter grads; |numpy f64 - torch f64| "
          "of out; relative error of a float64 directional finite difference")
    print("wrote {} ({:.0f} KiB)".format(out_root, total / 1024))
    if total >= 2 * 1024 * 1024:
        sys.exit("golden data exceeds 2 MB")


if __name__ == "__main__":
    main()
