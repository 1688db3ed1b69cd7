#!/usr/bin/python3
"""Golden data from PyTorch for every norm kind and for the whole EncoderModel.

Run by hand (CI never needs torch):

    /usr/bin/python3 scripts/golden_norms.py [--out tests/data/norms]

Writes one safetensors file per case (read by tests/test_golden_norms.cpp):

  norm_<kind>_*.safetensors   one normalization layer, forward and backward, over one or more
                              steps (BatchNorm: several training steps, running statistics after
                              each, then an eval step)
  positions_<d>.safetensors   the sinusoidal position table
  model_<kind>_<placement>_*  a whole EncoderModel: token embedding, positions, encoder layers with
                              that norm and placement, token or mean-pooled sequence head; forward
                              logits and the gradient of every parameter

Inside a file:
  F32 tensors  inputs exactly as the C++ side uses them: "param.<name>" (the module's
               named_parameters names), "buffer.<name>", "x.<step>", "dout.<step>", "tokens" (I64)
  F64 tensors  the reference, computed by PyTorch in float64 from those float32 inputs:
               "ref.out.<step>", "ref.grad.x.<step>", "ref.grad.<param>.<step>",
               "ref.buffer.<name>.<step>" (model files have no step suffix)
  __metadata__ {"meta": JSON} with the case's settings and, for every reference, "noise": the
               largest |float32 PyTorch - float64 PyTorch| of the same computation. The C++ test
               allows a small multiple of that noise: a tolerance that tracks what float32 can do,
               not one picked by hand.

PyTorch 1.13 has modules for LayerNorm and BatchNorm1d (used as is); RMSNorm and DyT are written
out in torch ops (ScaleNorm too: g * x / sqrt(||x||^2 + eps)); ReZero is x + alpha * f(x). PowerNorm is Algorithm 1 of Shen et al. 2020 as a
torch.autograd.Function (its backward is the paper's approximation, not autograd's derivative):
the forward divides by the running quadratic mean, the backward subtracts grad_ema * xhat and
updates grad_ema. Its cases come after the others, and ScaleNorm's after those, so adding them
left every earlier file as it was. Attention is torch's F.multi_head_attention_forward
run on each sequence alone (the packed layout the C++ code uses); the mean-pooled head averages each
sequence's tokens.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

SEED = 20250115


# ------------------------------------------------------------------------------ safetensors writer

DTYPE_NAMES = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64"}


def write_safetensors(path, tensors, meta):
    """Deterministic file: tensors ordered by element size (largest first), then by name."""
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    order = sorted(arrays, key=lambda k: (-arrays[k].dtype.itemsize, k))
    header = {"__metadata__": {"meta": json.dumps(meta, sort_keys=True)}}
    offset = 0
    for key in order:
        nbytes = arrays[key].nbytes
        header[key] = {"dtype": DTYPE_NAMES[arrays[key].dtype], "shape": list(arrays[key].shape),
                       "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for key in order:
            f.write(arrays[key].astype(arrays[key].dtype.newbyteorder("<")).tobytes())


def f32(t):
    return t.detach().to(torch.float32).numpy()


def f64(t):
    return t.detach().to(torch.float64).numpy()


def noise(a32, a64):
    return float((a32.detach().double() - a64.detach()).abs().max()) if a64.numel() else 0.0


# ------------------------------------------------------------------------------ the norms in torch

def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def dyt(x, alpha, weight, bias):
    return weight * torch.tanh(alpha * x) + bias


def scale_norm(x, g, eps):
    """ScaleNorm (Nguyen & Salazar 2019): g * x / ||x||, eps inside the square root like normlab's."""
    return g * x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)


class PowerNormFunction(torch.autograd.Function):
    """PowerNorm, Shen et al. 2020 Algorithm 1; momentum = 1 - alpha. running_phi (psi^2) and
    grad_ema (nu) are updated in place: phi by the training forward, nu by the training backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_phi, grad_ema, momentum, eps, training):
        rstd = torch.rsqrt(running_phi + eps)  # the statistic of the steps before this one
        xhat = x * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.grad_ema, ctx.momentum, ctx.training = grad_ema, momentum, training
        if training:
            running_phi.mul_(1 - momentum).add_(momentum * (x * x).mean(0))
        return xhat * weight + bias

    @staticmethod
    def backward(ctx, dout):
        xhat, rstd, weight = ctx.saved_tensors
        g = dout * weight
        dx = rstd * g
        if ctx.training:
            nu, m = ctx.grad_ema, ctx.momentum
            dx = rstd * (g - nu * xhat)
            nu.copy_(nu * (1 - m * (xhat * xhat).mean(0)) + m * (g * xhat).mean(0))
        return dx, (dout * xhat).sum(0), dout.sum(0), None, None, None, None, None


def apply_norm(kind, p, prefix, x, eps, buffers, training):
    """p: parameters by name; buffers: BatchNorm / PowerNorm running statistics by name (updated in
    place)."""
    if kind == "layernorm":
        return F.layer_norm(x, (x.shape[-1],), p[prefix + "weight"], p[prefix + "bias"], eps)
    if kind == "rmsnorm":
        return rms_norm(x, p[prefix + "weight"], eps)
    if kind == "batchnorm":
        return F.batch_norm(x, buffers[prefix + "running_mean"], buffers[prefix + "running_var"],
                            p[prefix + "weight"], p[prefix + "bias"], training=training, momentum=0.1,
                            eps=eps)
    if kind == "powernorm":
        return PowerNormFunction.apply(x, p[prefix + "weight"], p[prefix + "bias"], buffers[prefix + "running_phi"],
                                       buffers[prefix + "grad_ema"], 0.1, eps, training)
    if kind == "dyt":
        return dyt(x, p[prefix + "alpha"], p[prefix + "weight"], p[prefix + "bias"])
    if kind == "scalenorm":
        return scale_norm(x, p[prefix + "g"], eps)
    raise ValueError(kind)


def norm_buffers(kind, prefix, d, dtype):
    """A new layer's running statistics, as the C++ layers start them."""
    if kind == "batchnorm":
        return {prefix + "running_mean": torch.zeros(d, dtype=dtype), prefix + "running_var": torch.ones(d, dtype=dtype)}
    if kind == "powernorm":
        return {prefix + "running_phi": torch.ones(d, dtype=dtype), prefix + "grad_ema": torch.zeros(d, dtype=dtype)}
    return {}


def norm_param_shapes(kind, d):
    if kind in ("layernorm", "batchnorm", "powernorm"):
        return {"weight": (d,), "bias": (d,)}
    if kind == "rmsnorm":
        return {"weight": (d,)}
    if kind == "dyt":
        return {"alpha": (1,), "weight": (d,), "bias": (d,)}
    if kind == "scalenorm":
        return {"g": (1,)}
    return {}


def random_norm_params(kind, d, gen):
    out = {}
    for name, shape in norm_param_shapes(kind, d).items():
        if name == "weight":
            out[name] = 1.0 + 0.2 * torch.randn(shape, generator=gen)
        elif name == "alpha":
            out[name] = 0.6 + 0.1 * torch.randn(shape, generator=gen)
        elif name == "g":  # ScaleNorm's length, init sqrt(d)
            out[name] = math.sqrt(d) * (1.0 + 0.1 * torch.randn(shape, generator=gen))
        else:
            out[name] = 0.2 * torch.randn(shape, generator=gen)
    return out


# ------------------------------------------------------------------------------ norm-layer cases

def run_norm_steps(kind, eps, params, steps, dtype):
    """Runs the steps in `dtype`; returns per step out, grads, buffers after the step."""
    p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in params.items()}
    d = steps[0]["x"].shape[-1]
    buffers = norm_buffers(kind, "", d, dtype)
    results = []
    for step in steps:
        for t in p.values():
            t.grad = None
        x = step["x"].to(dtype).clone().requires_grad_(True)
        out = apply_norm(kind, p, "", x, eps, buffers, step["training"])
        (out * step["dout"].to(dtype)).sum().backward()
        r = {"out": out.detach().clone(), "grad.x": x.grad.detach().clone()}
        for k, t in p.items():
            r["grad." + k] = t.grad.detach().clone()
        if kind in ("batchnorm", "powernorm"):
            for k, t in buffers.items():
                r["buffer." + k] = t.detach().clone()
        results.append(r)
    return results


def norm_case(name, kind, eps, steps, gen, out_dir):
    d = steps[0]["x"].shape[-1]
    params = random_norm_params(kind, d, gen)
    r32 = run_norm_steps(kind, eps, params, steps, torch.float32)
    r64 = run_norm_steps(kind, eps, params, steps, torch.float64)
    tensors, noises = {}, {}
    for k, v in params.items():
        tensors["param." + k] = f32(v)
    for i, step in enumerate(steps):
        tensors["x.{}".format(i)] = f32(step["x"])
        tensors["dout.{}".format(i)] = f32(step["dout"])
        for k in r64[i]:
            key = "ref.{}.{}".format(k, i)
            tensors[key] = f64(r64[i][k])
            noises[key] = noise(r32[i][k], r64[i][k])
    meta = {"kind": kind, "eps": eps, "d": d, "steps": [{"training": s["training"]} for s in steps],
            "noise": noises, "torch_version": torch.__version__}
    write_safetensors(os.path.join(out_dir, name + ".safetensors"), tensors, meta)
    return max(noises.values())


def rows(gen, n, d, scale=1.0, shift=0.0):
    return shift + scale * torch.randn(n, d, generator=gen)


def norm_cases(gen, out_dir):
    d = 16
    report = []

    def step(x, training=True):
        return {"x": x, "dout": torch.randn(x.shape, generator=gen), "training": training}

    for kind, eps in (("layernorm", 1e-5), ("rmsnorm", 1e-6), ("dyt", 0.0)):
        name = "norm_{}".format(kind)
        # rows of very different scales and offsets: per-token statistics must not mix
        x = torch.cat([rows(gen, 4, d), rows(gen, 4, d, 5.0, 2.0), rows(gen, 4, d, 0.3, -1.0)])
        report.append((name, norm_case(name, kind, eps, [step(x)], gen, out_dir)))
    # small variance (std 1e-3 around 0.5): var ~1e-6 is below eps = 1e-5, so eps shapes the
    # output; the same input with eps 1e-12 gives a clearly different result
    for kind in ("layernorm", "rmsnorm"):
        for eps in (1e-5, 1e-12):
            name = "norm_{}_smallvar_eps{:.0e}".format(kind, eps)
            scale = 1e-3
            shift = 0.5 if kind == "layernorm" else 0.0  # RMSNorm: mean square ~1e-6
            x = rows(gen, 6, d, scale, shift)
            report.append((name, norm_case(name, kind, eps, [step(x)], gen, out_dir)))
    # BatchNorm: three training steps of different batch sizes (running statistics move each time,
    # unbiased variance), then an eval step that uses them
    for eps in (1e-5,):
        steps = [step(rows(gen, 9, d, 2.0, 1.0)), step(rows(gen, 5, d, 0.5, -2.0)),
                 step(rows(gen, 14, d, 1.0, 0.3)), step(rows(gen, 6, d, 1.5, 0.0), training=False)]
        report.append(("norm_batchnorm", norm_case("norm_batchnorm", "batchnorm", eps, steps, gen, out_dir)))
    return report


# ------------------------------------------------------------------------------ positions

def positions_case(max_len, d, out_dir):
    """The table of Vaswani et al. in the form of the PyTorch tutorial, extended to odd d."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div[: d // 2])
    name = "positions_{}x{}".format(max_len, d)
    meta = {"max_len": max_len, "d": d, "noise": {"ref.table": 0.0}}
    write_safetensors(os.path.join(out_dir, name + ".safetensors"), {"ref.table": f64(pe)}, meta)
    return name, 0.0


# ------------------------------------------------------------------------------ whole models

def sinusoidal(max_len, d, dtype):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div[: d // 2])
    return pe.to(torch.float32).to(dtype)  # the C++ table is float32


def model_param_shapes(cfg):
    d, ffn = cfg["d_model"], cfg["ffn"]
    shapes = {}
    for n in range(cfg["layers"]):
        pre = "layers.{}.".format(n)
        shapes[pre + "self_attn.in_proj_weight"] = (3 * d, d)
        shapes[pre + "self_attn.in_proj_bias"] = (3 * d,)
        shapes[pre + "self_attn.out_proj.weight"] = (d, d)
        shapes[pre + "self_attn.out_proj.bias"] = (d,)
        shapes[pre + "linear1.weight"] = (ffn, d)
        shapes[pre + "linear1.bias"] = (ffn,)
        shapes[pre + "linear2.weight"] = (d, ffn)
        shapes[pre + "linear2.bias"] = (d,)
        for which in ("norm1", "norm2"):
            for k, s in norm_param_shapes(cfg["norm"], d).items():
                shapes[pre + which + "." + k] = s
        if cfg["norm"] == "rezero":
            shapes[pre + "resweight"] = (1,)
        if cfg.get("residual") == "layerscale":
            shapes[pre + "gamma_1"] = (d,)
            shapes[pre + "gamma_2"] = (d,)
    if has_final_norm(cfg):
        for k, s in norm_param_shapes(cfg["norm"], d).items():
            shapes["norm." + k] = s
    shapes["embedding.weight"] = (cfg["vocab"], d)
    if cfg["positional"] == "learned":
        shapes["pos_embedding.weight"] = (cfg["max_len"], d)
    shapes["head.weight"] = (cfg["classes"], d)
    shapes["head.bias"] = (cfg["classes"],)
    return shapes


def has_final_norm(cfg):
    return cfg["placement"] == "pre" and cfg["final_norm"] and cfg["norm"] not in ("rezero", "none")


def random_model_params(cfg, gen):
    params = {}
    for name, shape in model_param_shapes(cfg).items():
        leaf = name.rsplit(".", 1)[-1]
        is_norm = ".norm" in name or name.startswith("norm.")
        if leaf == "resweight":
            params[name] = 0.5 + 0.1 * torch.randn(shape, generator=gen)
        elif leaf.startswith("gamma_"):  # LayerScale's lambda, init 0.1
            params[name] = 0.1 + 0.05 * torch.randn(shape, generator=gen)
        elif leaf == "alpha":
            params[name] = 0.6 + 0.1 * torch.randn(shape, generator=gen)
        elif is_norm and leaf == "g":  # ScaleNorm's length, init sqrt(d)
            params[name] = math.sqrt(cfg["d_model"]) * (1.0 + 0.1 * torch.randn(shape, generator=gen))
        elif is_norm and leaf == "weight":
            params[name] = 1.0 + 0.2 * torch.randn(shape, generator=gen)
        elif leaf.endswith("bias"):
            params[name] = 0.1 * torch.randn(shape, generator=gen)
        elif name in ("embedding.weight", "pos_embedding.weight"):
            params[name] = torch.randn(shape, generator=gen)
        else:
            params[name] = torch.randn(shape, generator=gen) / math.sqrt(shape[1])
    return params


def model_forward(cfg, p, buffers, tokens, lengths):
    d, kind = cfg["d_model"], cfg["norm"]
    eps = cfg["eps"]
    dtype = p["embedding.weight"].dtype
    positions = torch.cat([torch.arange(n) for n in lengths])
    x = p["embedding.weight"][tokens]
    if cfg["positional"] == "learned":
        x = x + p["pos_embedding.weight"][positions]
    else:
        x = x + sinusoidal(cfg["max_len"], d, dtype)[positions]
    act = F.gelu if cfg["activation"] == "gelu" else F.relu
    offsets = np.concatenate([[0], np.cumsum(lengths)])

    for n in range(cfg["layers"]):
        pre = "layers.{}.".format(n)

        def attn(h):
            outs = []
            for b in range(len(lengths)):
                seq = h[offsets[b]:offsets[b + 1]][:, None, :]  # (L, 1, d)
                out, _ = F.multi_head_attention_forward(
                    seq, seq, seq, d, cfg["heads"], p[pre + "self_attn.in_proj_weight"],
                    p[pre + "self_attn.in_proj_bias"], None, None, False, 0.0,
                    p[pre + "self_attn.out_proj.weight"], p[pre + "self_attn.out_proj.bias"],
                    training=True, need_weights=False)
                outs.append(out[:, 0, :])
            return torch.cat(outs)

        def ffn(h):
            return F.linear(act(F.linear(h, p[pre + "linear1.weight"], p[pre + "linear1.bias"])),
                            p[pre + "linear2.weight"], p[pre + "linear2.bias"])

        def norm(h, which):
            return apply_norm(kind, p, pre + which + ".", h, eps, buffers, True)

        def add(h, f, k):  # the residual scheme: x + f, or LayerScale's x + gamma_k * f
            if cfg.get("residual") == "layerscale":
                return h + f * p[pre + "gamma_{}".format(k)]
            return h + f

        if kind == "none":
            x = add(x, attn(x), 1)
            x = add(x, ffn(x), 2)
        elif kind == "rezero":
            x = x + attn(x) * p[pre + "resweight"]
            x = x + ffn(x) * p[pre + "resweight"]
        elif cfg["placement"] == "post":
            x = norm(add(x, attn(x), 1), "norm1")
            x = norm(add(x, ffn(x), 2), "norm2")
        else:
            x = add(x, attn(norm(x, "norm1")), 1)
            x = add(x, ffn(norm(x, "norm2")), 2)
    if has_final_norm(cfg):
        x = apply_norm(kind, p, "norm.", x, eps, buffers, True)
    if cfg["head"] == "sequence":
        x = torch.stack([x[offsets[b]:offsets[b + 1]].mean(0) for b in range(len(lengths))])
    return F.linear(x, p["head.weight"], p["head.bias"])


def run_model(cfg, params, tokens, lengths, dout, dtype):
    p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in params.items()}
    buffers = {}
    for name in params:
        if name.endswith(".weight") and (".norm" in name or name.startswith("norm.")):
            buffers.update(norm_buffers(cfg["norm"], name[: -len("weight")], cfg["d_model"], dtype))
    out = model_forward(cfg, p, buffers, torch.tensor(tokens), lengths)
    (out * dout.to(dtype)).sum().backward()
    r = {"out": out.detach().clone()}
    for k, t in p.items():
        r["grad." + k] = t.grad.detach().clone()
    for k, t in buffers.items():
        r["buffer." + k] = t.detach().clone()
    return r


def check_layernorm_against_torch_modules(cfg, params, tokens, lengths):
    """The layernorm models, written out above, against nn.TransformerEncoderLayer itself."""
    if cfg["norm"] != "layernorm" or cfg.get("residual", "plain") != "plain" or cfg["layers"] == 0:
        return
    d = cfg["d_model"]
    layer = torch.nn.TransformerEncoderLayer(d, cfg["heads"], cfg["ffn"], dropout=0.0, activation=cfg["activation"],
                                             layer_norm_eps=cfg["eps"], norm_first=cfg["placement"] == "pre")
    final = torch.nn.LayerNorm(d, eps=cfg["eps"]) if has_final_norm(cfg) else None
    encoder = torch.nn.TransformerEncoder(layer, cfg["layers"], norm=final, enable_nested_tensor=False).double()
    encoder.train()
    state = {k: params[k].double() for k in encoder.state_dict()}
    encoder.load_state_dict(state)
    p64 = {k: v.double() for k, v in params.items()}
    # the written-out model without its head and pooling, on a padded batch with the mask
    cut = dict(cfg, head="token")
    positions = torch.cat([torch.arange(n) for n in lengths])
    x = p64["embedding.weight"][torch.tensor(tokens)]
    x = x + (p64["pos_embedding.weight"][positions] if cfg["positional"] == "learned"
             else sinusoidal(cfg["max_len"], d, torch.float64)[positions])
    t_max, batch = max(lengths), len(lengths)
    padded = torch.zeros(t_max, batch, d, dtype=torch.float64)
    mask = torch.ones(batch, t_max, dtype=torch.bool)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for b in range(batch):
        padded[: lengths[b], b] = x[offsets[b]:offsets[b + 1]]
        mask[b, : lengths[b]] = False
    with torch.no_grad():
        ref = encoder(padded, src_key_padding_mask=mask)
        ours_logits = model_forward(cut, p64, {}, torch.tensor(tokens), lengths)
        head_w, head_b = p64["head.weight"], p64["head.bias"]
        ref_logits = torch.cat([F.linear(ref[: lengths[b], b], head_w, head_b) for b in range(batch)])
    worst = float((ours_logits - ref_logits).abs().max())
    if worst > 1e-10:
        sys.exit("{}: written-out encoder disagrees with nn.TransformerEncoder by {:.3e}".format(cfg, worst))


def model_case(name, cfg, lengths, gen, out_dir):
    params = random_model_params(cfg, gen)
    tokens = [int(t) for t in torch.randint(0, cfg["vocab"], (sum(lengths),), generator=gen)]
    rows_out = len(lengths) if cfg["head"] == "sequence" else sum(lengths)
    dout = torch.randn(rows_out, cfg["classes"], generator=gen)
    check_layernorm_against_torch_modules(cfg, params, tokens, lengths)
    r32 = run_model(cfg, params, tokens, lengths, dout, torch.float32)
    r64 = run_model(cfg, params, tokens, lengths, dout, torch.float64)
    tensors = {"param." + k: f32(v) for k, v in params.items()}
    tensors["tokens"] = np.array(tokens, dtype=np.int64)
    tensors["dout"] = f32(dout)
    noises = {}
    for k in r64:
        tensors["ref." + k] = f64(r64[k])
        noises["ref." + k] = noise(r32[k], r64[k])
    meta = dict(cfg, lengths=lengths, noise=noises, torch_version=torch.__version__)
    write_safetensors(os.path.join(out_dir, name + ".safetensors"), tensors, meta)
    return max(noises.values())


def model_cases(gen, out_dir):
    report = []
    base = dict(d_model=8, heads=2, layers=1, ffn=16, activation="gelu", eps=1e-5, final_norm=True,
                vocab=11, classes=5, max_len=16, positional="sinusoidal", head="token")
    # Embedding + positions + head alone (no layers): each way of adding positions, each head.
    for positional, head in (("sinusoidal", "token"), ("learned", "sequence")):
        cfg = dict(base, layers=0, norm="none", placement="pre", positional=positional, head=head)
        name = "model_embed_head_{}_{}".format(positional, head)
        report.append((name, model_case(name, cfg, [5, 1, 7], gen, out_dir)))
    # Every norm kind x placement; heads, activations and positions alternate so each is covered.
    index = 0
    for kind in ("layernorm", "rmsnorm", "batchnorm", "dyt", "rezero", "none"):
        for placement in ("post", "pre"):
            cfg = dict(base, norm=kind, placement=placement,
                       activation="gelu" if index % 2 == 0 else "relu",
                       head="sequence" if index % 3 == 1 else "token",
                       positional="learned" if index % 4 == 2 else "sinusoidal",
                       layers=2 if kind in ("layernorm", "batchnorm") and placement == "pre" else 1)
            name = "model_{}_{}".format(kind, placement)
            report.append((name, model_case(name, cfg, [5, 1, 7] if index % 2 else [4, 6, 2], gen, out_dir)))
            index += 1
    return report


def powernorm_cases(gen, out_dir):
    """PowerNorm: three training steps of different batch sizes and scales (running_phi and
    grad_ema move each time, so steps 2 and 3 test the approximate gradient with nu != 0), then an
    eval step; and a whole model per placement."""
    d = 16
    report = []

    def step(x, training=True):
        return {"x": x, "dout": torch.randn(x.shape, generator=gen), "training": training}

    steps = [step(rows(gen, 9, d, 2.0, 1.0)), step(rows(gen, 5, d, 0.5, -2.0)),
             step(rows(gen, 14, d, 1.0, 0.3)), step(rows(gen, 6, d, 1.5, 0.0), training=False)]
    report.append(("norm_powernorm", norm_case("norm_powernorm", "powernorm", 1e-5, steps, gen, out_dir)))
    base = dict(d_model=8, heads=2, layers=2, ffn=16, activation="gelu", eps=1e-5, final_norm=True,
                vocab=11, classes=5, max_len=16, positional="sinusoidal", head="token", norm="powernorm")
    for placement, head in (("post", "sequence"), ("pre", "token")):
        cfg = dict(base, placement=placement, head=head)
        name = "model_powernorm_{}".format(placement)
        report.append((name, model_case(name, cfg, [5, 1, 7], gen, out_dir)))
    return report


def scalenorm_cases(gen, out_dir):
    """ScaleNorm, added after the others (so every earlier file stayed as it was): one layer on rows
    of very different lengths, and a whole model per placement."""
    d = 16
    x = torch.cat([rows(gen, 4, d), rows(gen, 4, d, 5.0, 2.0), rows(gen, 4, d, 0.3, -1.0)])
    steps = [{"x": x, "dout": torch.randn(x.shape, generator=gen), "training": True}]
    report = [("norm_scalenorm", norm_case("norm_scalenorm", "scalenorm", 1e-5, steps, gen, out_dir))]
    base = dict(d_model=8, heads=2, layers=2, ffn=16, activation="gelu", eps=1e-5, final_norm=True,
                vocab=11, classes=5, max_len=16, positional="sinusoidal", head="token", norm="scalenorm")
    for placement, head in (("post", "sequence"), ("pre", "token")):
        cfg = dict(base, placement=placement, head=head)
        name = "model_scalenorm_{}".format(placement)
        report.append((name, model_case(name, cfg, [5, 1, 7], gen, out_dir)))
    return report


def layerscale_cases(gen, out_dir):
    """LayerScale (x + gamma_k * f, gamma_k per feature), added after the others: a whole
    LayerNorm model per placement, one block (the files stay under the size limit)."""
    base = dict(d_model=8, heads=2, layers=1, ffn=16, activation="gelu", eps=1e-5, final_norm=True,
                vocab=11, classes=5, max_len=16, positional="sinusoidal", head="token", norm="layernorm",
                residual="layerscale")
    report = []
    for placement, head in (("post", "sequence"), ("pre", "token")):
        cfg = dict(base, placement=placement, head=head)
        name = "model_layerscale_{}".format(placement)
        report.append((name, model_case(name, cfg, [5, 1, 7], gen, out_dir)))
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "norms"))
    args = parser.parse_args()
    out_dir = os.path.normpath(args.out)
    torch.set_num_threads(1)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    gen = torch.Generator().manual_seed(SEED)
    report = norm_cases(gen, out_dir)
    report.append(positions_case(50, 16, out_dir))
    report.append(positions_case(12, 7, out_dir))
    report += model_cases(gen, out_dir)
    report += powernorm_cases(gen, out_dir)
    report += scalenorm_cases(gen, out_dir)
    report += layerscale_cases(gen, out_dir)
    for name, worst in report:
        print("{:40s} max |f32 - f64| {:9.2e}".format(name, worst))
    total = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    print("wrote {} files to {} ({:.0f} KiB)".format(len(report), out_dir, total / 1024))
    if total >= 400 * 1024:
        sys.exit("golden data exceeds 400 KiB")


if __name__ == "__main__":
    main()
