#!/usr/bin/env python3
"""Load normlab checkpoints into PyTorch modules and check they compute what normlab does.

    /usr/bin/python3 scripts/load_checkpoint_torch.py RUN_DIR... [--normlab build/normlab]

For each run directory:
1. Reads checkpoint.safetensors with a NumPy-only safetensors reader (no `safetensors` package).
2. Builds the encoder from the config in the checkpoint's metadata. model.norm = "layernorm" uses
   torch.nn.TransformerEncoder(Layer) itself (norm_first = placement == "pre", final norm) and
   load_state_dict(strict=False); every other norm uses NormlabEncoderLayer below, the same block
   with that norm, whose every tensor must match the checkpoint's. The norm layer is rebuilt from
   normlab's norm registry, read with `normlab help norms --json`: each entry names its tensors
   (parameters and running statistics) and gives its eval-mode forward as a PyTorch expression, so
   a norm added to normlab (docs/tour.md, "Add your own normalization") needs no change here.
   model.residual (x + f, ReZero, LayerScale, ...) comes from the same JSON's residual registry:
   each scheme's tensors (the block's own, e.g. layers.N.gamma_1) and each sublayer's sum as a
   PyTorch expression of x and f, so a scheme added to normlab ("Add your own residual scheme")
   needs no change here either. A checkpoint whose model.norm is a scheme's old spelling ("rezero")
   is read as model.norm "none" with that scheme, as normlab reads it.
   model.qk_norm = "layernorm" | "rmsnorm" (any model.norm) also uses NormlabEncoderLayer, whose
   self_attn is QkNormAttention below: torch.nn.MultiheadAttention's tensors plus q_norm and k_norm,
   the registry's layernorm / rmsnorm over each head's head_dim features (timm's Attention).
3. Rebuilds the rest of the model (token embedding + sinusoidal or learned positions, per-token or
   mean-pooled head), and runs a padded batch with src_key_padding_mask: the first validation
   sequences of task.valid_file when it is readable, random ones otherwise. The vocabulary comes
   from the checkpoint's metadata ("vocabulary", "labels") when present.
4. Runs `normlab predict --json` on each sequence and compares the predicted classes (by name) and their
   probabilities with PyTorch's; also checks that batching with padding changes nothing.

Exits 1 if a difference exceeds --tolerance.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    """(metadata dict, {name: np.ndarray}) from a safetensors file, with the basic checks."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short")
    (header_len,) = struct.unpack("<Q", data[:8])
    if 8 + header_len > len(data):
        raise ValueError(f"{path}: header length {header_len} past the end of the file")
    header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    buffer = memoryview(data)[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = np.dtype(DTYPES[info["dtype"]]).newbyteorder("<")
        array = np.frombuffer(buffer[begin:end], dtype=dtype).reshape(info["shape"])
        tensors[name] = array.astype(array.dtype.newbyteorder("="))
    return metadata, tensors


def task_vocabularies(config, metadata):
    """(input tokens, output classes, joiner for predict --input) as normlab's data/task.cpp defines them."""
    name = config["task"]["name"]
    digits = [str(d) for d in range(10)]
    if name in ("reverse", "sort"):
        return digits, digits, " "
    if name == "brackets":
        return ["(", ")"], [str(d) for d in range(15)] + ["15+", "!"], ""
    if name == "majority":
        return ["0", "1"], ["0", "1"], " "
    if name in ("sequence_classification", "token_classification"):  # from the training file: metadata only
        return json.loads(metadata["vocabulary"]), json.loads(metadata["labels"]), " "
    characters = ["[MASK]", "[UNK]"] + [chr(b) for b in json.loads(metadata["task_characters"])]
    return characters, characters, ""


def normlab_binary(args):
    """--normlab, else build/normlab next to this script, else normlab on PATH."""
    if args.normlab is not None:
        return args.normlab
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = os.path.join(root, "build", "normlab")
    return binary if os.path.exists(binary) else "normlab"


def registries(binary):
    """({model.norm name: entry}, {model.residual name: entry}) from `normlab help norms --json`:
    normlab's norm and residual registries (include/normlab/nn/norm_registry.hpp, residual_registry.hpp),
    each entry with its PyTorch mapping."""
    out = json.loads(subprocess.run([binary, "help", "norms", "--json"], check=True, capture_output=True,
                                    text=True).stdout)
    return {e["name"]: e for e in out["norms"]}, {e["name"]: e for e in out["residuals"]}


def block_axes(m, residuals):
    """(model.norm, model.residual) of a checkpoint's model section; an old model.norm "rezero"
    (a scheme's spelling from before model.residual) is norm "none" with that scheme."""
    for name, entry in residuals.items():
        if entry["norm_spelling"] and m["norm"] == entry["norm_spelling"]:
            return "none", name
    return m["norm"], m.get("residual", "plain")


def init_value(expression, dim):
    return eval(expression, {"__builtins__": {}, "torch": torch, "math": math, "dim": dim})


class RegistryNorm(torch.nn.Module):
    """A normalization layer rebuilt from its registry entry in eval mode: its tensors (parameters
    and buffers, with their initial values as PyTorch expressions of dim) and its forward as one
    PyTorch expression of x, eps and the tensors. No norm is spelled out here: a norm added to
    normlab's registry loads without a change to this script."""

    def __init__(self, entry, dim, eps):
        super().__init__()
        self.eps = eps
        self.tensor_names = [t["name"] for t in entry["torch"]["tensors"]]
        self.expression = compile(entry["torch"]["forward"], entry["name"] + " forward", "eval")
        for t in entry["torch"]["tensors"]:
            value = init_value(t["init"], dim)
            if t["parameter"]:
                self.register_parameter(t["name"], torch.nn.Parameter(value))
            else:
                self.register_buffer(t["name"], value)

    def forward(self, x):
        scope = {"__builtins__": {}, "torch": torch, "math": math, "x": x, "eps": self.eps, "dim": x.shape[-1]}
        scope.update({name: getattr(self, name) for name in self.tensor_names})
        return eval(self.expression, scope)


def make_norm(entry, dim, eps):
    if not entry["layer"]:
        raise ValueError(f"norm {entry['name']} has no layer")
    return RegistryNorm(entry, dim, eps)


class QkNormAttention(torch.nn.Module):
    """Self-attention whose queries and keys are normalized per head before the dot product
    (model.qk_norm): in_proj_weight, in_proj_bias and out_proj as torch.nn.MultiheadAttention,
    q_norm and k_norm over head_dim. Called like MultiheadAttention in NormlabEncoderLayer."""

    def __init__(self, d, heads, entry, eps):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = torch.nn.Parameter(torch.empty(3 * d, d))
        self.in_proj_bias = torch.nn.Parameter(torch.zeros(3 * d))
        self.out_proj = torch.nn.Linear(d, d)
        self.q_norm = make_norm(entry, d // heads, eps)
        self.k_norm = make_norm(entry, d // heads, eps)

    def forward(self, x, key_padding_mask):  # x (B, L, d); key_padding_mask (B, L), True = padding
        B, L, d = x.shape
        hd = d // self.heads
        qkv = x @ self.in_proj_weight.T + self.in_proj_bias
        split = lambda t: t.reshape(B, L, self.heads, hd)
        q, k, v = split(self.q_norm(split(qkv[..., :d]))), split(self.k_norm(split(qkv[..., d:2 * d]))), split(qkv[..., 2 * d:])
        scores = torch.einsum("bihc,bjhc->bhij", q, k) / math.sqrt(hd)
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        out = torch.einsum("bhij,bjhc->bihc", torch.softmax(scores, dim=-1), v).reshape(B, L, d)
        return self.out_proj(out)


class NormlabEncoderLayer(torch.nn.Module):
    """normlab's encoder block (src/nn/encoder.cpp) with torch's parameter names:
         no norm layer  x = add(x, f(x))
         post           x = norm(add(x, f(x)))        pre  x = add(x, f(norm(x)))
    for f = self-attention, then f = linear2(act(linear1(x))); add is the residual scheme's sum for
    that sublayer (x + f, x + resweight * f, x + gamma_1 * f, ...), its tensors the block's own."""

    def __init__(self, m, registry, residuals):
        super().__init__()
        d = m["d_model"]
        norm, residual = block_axes(m, residuals)
        entry, scheme = registry[norm], residuals[residual]
        self.has_norm, self.post = entry["layer"], m["placement"] == "post"
        self.sums = [compile(s, f"{residual} sum", "eval") for s in scheme["torch"]["sums"]]
        self.scheme_tensors = [t["name"] for t in scheme["torch"]["tensors"]]
        for t in scheme["torch"]["tensors"]:
            self.register_parameter(t["name"], torch.nn.Parameter(init_value(t["init"], d)))
        qk_norm = m.get("qk_norm", "none")
        if qk_norm == "none":
            self.self_attn = torch.nn.MultiheadAttention(d, m["heads"], dropout=0.0, batch_first=True)
            self.attend = lambda t, padding: self.self_attn(t, t, t, key_padding_mask=padding, need_weights=False)[0]
        else:
            self.self_attn = QkNormAttention(d, m["heads"], registry[qk_norm], m["norm_eps"])
            self.attend = lambda t, padding: self.self_attn(t, padding)
        self.linear1 = torch.nn.Linear(d, m["ffn"])
        self.linear2 = torch.nn.Linear(m["ffn"], d)
        self.activation = torch.nn.functional.gelu if m["activation"] == "gelu" else torch.relu
        if self.has_norm:
            self.norm1 = make_norm(entry, d, m["norm_eps"])
            self.norm2 = make_norm(entry, d, m["norm_eps"])

    def add(self, x, f, sublayer):
        scope = {"__builtins__": {}, "torch": torch, "x": x, "f": f}
        scope.update({name: getattr(self, name) for name in self.scheme_tensors})
        return eval(self.sums[sublayer], scope)

    def forward(self, x, padding):
        attn = lambda t: self.attend(t, padding)
        ffn = lambda t: self.linear2(self.activation(self.linear1(t)))
        if not self.has_norm:
            h = self.add(x, attn(x), 0)
            return self.add(h, ffn(h), 1)
        if self.post:
            h = self.norm1(self.add(x, attn(x), 0))
            return self.norm2(self.add(h, ffn(h), 1))
        h = self.add(x, attn(self.norm1(x)), 0)
        return self.add(h, ffn(self.norm2(h)), 1)


class NormlabEncoder(torch.nn.Module):
    def __init__(self, m, registry, residuals):
        super().__init__()
        entry = registry[block_axes(m, residuals)[0]]
        self.layers = torch.nn.ModuleList(NormlabEncoderLayer(m, registry, residuals) for _ in range(m["layers"]))
        pre = m["placement"] == "pre" and m["final_norm"] and entry["layer"]
        self.norm = make_norm(entry, m["d_model"], m["norm_eps"]) if pre else None

    def forward(self, x, src_key_padding_mask):
        for layer in self.layers:
            x = layer(x, src_key_padding_mask)
        return self.norm(x) if self.norm is not None else x


def sinusoidal_table(max_len, dim):
    table = np.zeros((max_len, dim), dtype=np.float32)
    for pos in range(max_len):
        for i in range(0, dim, 2):
            angle = pos / math.pow(10000.0, i / dim)
            table[pos, i] = np.float32(math.sin(angle))
            if i + 1 < dim:
                table[pos, i + 1] = np.float32(math.cos(angle))
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories or checkpoint.safetensors files")
    parser.add_argument("--normlab", default=None, help="normlab binary (default: build/normlab, then PATH)")
    parser.add_argument("--sequences", type=int, default=4, help="sequences in the random batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    failed = [run for run in args.runs if not check_run(run, args)]
    if failed:
        print(f"MISMATCH in {len(failed)} of {len(args.runs)} runs: {', '.join(failed)}")
    sys.exit(1 if failed else 0)


def check_run(run, args):
    path = os.path.join(run, "checkpoint.safetensors") if os.path.isdir(run) else run
    run_dir = os.path.dirname(os.path.abspath(path))
    metadata, tensors = read_safetensors(path)
    config = json.loads(metadata["config"])
    m = config["model"]
    print(f"checkpoint {path}: step {metadata['step']}, {len(tensors)} tensors")
    print(f"  model: d_model {m['d_model']}, heads {m['heads']}, layers {m['layers']}, ffn {m['ffn']}, "
          f"{m['placement']}-{m['norm']}, residual {m.get('residual', 'plain')}, {m['activation']}, eps {m['norm_eps']}, "
          f"{m['positional']} positions, qk_norm {m.get('qk_norm', 'none')}")
    torch.manual_seed(args.seed)
    norm_first = m["placement"] == "pre"
    outside = ("embedding.", "pos_embedding.", "head.", "optim.")
    state = {name: torch.from_numpy(array.copy()) for name, array in tensors.items()}
    if m["norm"] == "layernorm" and m.get("qk_norm", "none") == "none" and m.get("residual", "plain") == "plain":
        layer = torch.nn.TransformerEncoderLayer(
            d_model=m["d_model"], nhead=m["heads"], dim_feedforward=m["ffn"], dropout=0.0,
            activation=m["activation"], layer_norm_eps=m["norm_eps"], batch_first=True, norm_first=norm_first)
        final_norm = torch.nn.LayerNorm(m["d_model"], eps=m["norm_eps"]) if norm_first and m["final_norm"] else None
        encoder = torch.nn.TransformerEncoder(layer, num_layers=m["layers"], norm=final_norm,
                                              enable_nested_tensor=False)
        kind = "torch.nn.TransformerEncoder"
    else:
        registry, residuals = registries(normlab_binary(args))
        norm, residual = block_axes(m, residuals)
        if norm not in registry or residual not in residuals:
            print(f"MISMATCH: model.norm {norm!r} / model.residual {residual!r} not in this normlab's registries "
                  f"({', '.join(registry)}; {', '.join(residuals)})")
            return False
        encoder = NormlabEncoder(m, registry, residuals)
        kind = f"NormlabEncoder ({m['placement']}-{norm}, residual {residual}, qk_norm {m.get('qk_norm', 'none')})"
    encoder.eval()
    encoder_state = {n: t for n, t in state.items() if not n.startswith(outside)}
    # BatchNorm1d also counts batches; normlab does not keep that buffer (momentum is fixed).
    for name, buffer in encoder.state_dict().items():
        if name.endswith("num_batches_tracked"):
            encoder_state[name] = buffer
    result = encoder.load_state_dict(encoder_state, strict=False)
    print(f"  {kind}: load_state_dict: {len(encoder_state)} tensors, missing {sorted(result.missing_keys) or 'none'}, "
          f"unexpected {sorted(result.unexpected_keys) or 'none'}")
    if result.missing_keys or result.unexpected_keys:
        print("MISMATCH: the checkpoint's encoder tensors do not match the module")
        return False
    optim_count = sum(1 for n in state if n.startswith("optim."))
    print(f"  outside the encoder: {', '.join(n for n in state if n.startswith(outside[:3]))}; "
          f"and {optim_count} optimizer tensors")

    # The rest of normlab's EncoderModel: embedding + positions -> encoder -> head.
    embedding = torch.from_numpy(tensors["embedding.weight"])
    if m["positional"] == "learned":
        positions = torch.from_numpy(tensors["pos_embedding.weight"])
    else:
        positions = torch.from_numpy(sinusoidal_table(m["max_len"], m["d_model"]))
    head_w, head_b = torch.from_numpy(tensors["head.weight"]), torch.from_numpy(tensors["head.bias"])
    task = config["task"]["name"]
    per_sequence = task in ("majority", "sequence_classification")
    data_task = task in ("sequence_classification", "token_classification")

    inputs, classes, joiner = task_vocabularies(config, metadata)
    if "vocabulary" in metadata:
        saved = json.loads(metadata["vocabulary"])
        if not data_task and task != "mlm_text" and saved != inputs:
            print(f"MISMATCH: metadata vocabulary {saved} differs from the task's {inputs}")
            return False
        inputs = saved
    if data_task:
        joiner = " "
    first_symbol = 2 if task == "mlm_text" or data_task else 0  # no [MASK]/[UNK]/[PAD] in a sample
    rng = np.random.default_rng(args.seed)
    sequences = []
    valid = config["task"].get("valid_file")
    if valid and os.path.isfile(valid) and task != "mlm_text":
        ids = {t: i for i, t in enumerate(inputs)}
        with open(valid) as f:
            for line in f:
                if len(sequences) == args.sequences or not line.strip():
                    break
                words = json.loads(line)["tokens"]
                words = words.split() if isinstance(words, str) else words
                if len(words) <= m["max_len"]:
                    sequences.append(np.array([ids.get(w, 1 if data_task else 0) for w in words]))
        print(f"  sample: the first {len(sequences)} sequences of {valid}")
    if not sequences:
        lengths = rng.integers(1, config["task"]["max_len"] + 1, size=args.sequences)
        sequences = [rng.integers(first_symbol, len(inputs), size=int(n)) for n in lengths]
        print(f"  sample: {len(sequences)} random sequences")
    lengths = [len(seq) for seq in sequences]
    B, L = len(sequences), int(max(lengths))
    tokens = torch.zeros(B, L, dtype=torch.long)
    padding = torch.ones(B, L, dtype=torch.bool)  # True = padding, as src_key_padding_mask means
    for b, seq in enumerate(sequences):
        tokens[b, : len(seq)] = torch.from_numpy(seq)
        padding[b, : len(seq)] = False

    def forward(tokens, padding):
        x = embedding[tokens] + positions[: tokens.shape[1]].unsqueeze(0)
        with torch.no_grad():
            h = encoder(x, src_key_padding_mask=padding)
        if per_sequence:
            real = (~padding).unsqueeze(-1).float()
            h = (h * real).sum(1) / real.sum(1)
        return h @ head_w.T + head_b

    with torch.no_grad():
        batched = forward(tokens, padding)
        padding_diff = 0.0
        for b, seq in enumerate(sequences):
            alone = forward(torch.from_numpy(seq).unsqueeze(0), torch.zeros(1, len(seq), dtype=torch.bool))[0]
            mine = batched[b] if per_sequence else batched[b, : len(seq)]
            padding_diff = max(padding_diff, (alone - mine).abs().max().item())
    print(f"  torch: padded batch of {B} (lengths {', '.join(map(str, lengths))}) vs each sequence alone: "
          f"max |logit diff| {padding_diff:.3g}")

    binary = normlab_binary(args)
    max_prob_diff, disagreements, compared = 0.0, 0, 0
    for b, seq in enumerate(sequences):
        text = joiner.join(inputs[i] for i in seq)
        out = subprocess.run([binary, "predict", "--run", run_dir, "--input", text, "--json"],
                             check=True, capture_output=True, text=True).stdout
        ours = json.loads(out)
        logits = batched[b] if per_sequence else batched[b, : len(seq)]
        probs = torch.softmax(logits.double(), dim=-1)
        if per_sequence:
            probs = probs.unsqueeze(0)
        torch_classes = probs.argmax(-1).tolist()
        torch_probs = probs.max(-1).values.tolist()
        # predict's one output shape: the tokens read (read_as), the label or tags by name, and
        # the probability of each (one number per sequence, a list per token).
        input_ids = [inputs.index(token) for token in ours["read_as"]]
        if input_ids != seq.tolist():
            sys.exit(f"normlab encoded {text!r} as {input_ids}, expected {seq.tolist()}")
        predicted = [ours["label"]] if per_sequence else ours["tags"]
        probabilities = [ours["probability"]] if per_sequence else ours["probability"]
        for k, (c, p) in enumerate(zip(torch_classes, torch_probs)):
            compared += 1
            disagreements += int(classes[c] != predicted[k])
            max_prob_diff = max(max_prob_diff, abs(p - probabilities[k]))
    print(f"  normlab predict vs torch on the same {B} sequences: {compared} predictions, "
          f"{disagreements} different classes, max |probability diff| {max_prob_diff:.3g}")
    ok = padding_diff <= args.tolerance and max_prob_diff <= args.tolerance and disagreements == 0
    print(f"OK: the checkpoint loads into {kind} and computes the same outputs" if ok
          else f"MISMATCH beyond tolerance {args.tolerance}")
    return ok


if __name__ == "__main__":
    main()
