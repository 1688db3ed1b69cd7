#!/usr/bin/env python3
"""Load a normlab checkpoint into torch.nn.TransformerEncoder and check it computes what normlab does.

    /usr/bin/python3 scripts/load_checkpoint_torch.py runs/reverse [--normlab build/normlab]

1. Reads checkpoint.safetensors with a NumPy-only safetensors reader (no `safetensors` package).
2. Builds torch.nn.TransformerEncoder(Layer) from the config stored in the checkpoint's metadata
   (d_model, heads, ffn, layers, activation, norm_eps, norm_first = placement == "pre", final norm)
   and loads the encoder weights with load_state_dict(strict=False); the tensors that are not part
   of a TransformerEncoder (embedding, positions, head, optimizer state) are listed.
3. Rebuilds the rest of the model around it (token embedding + sinusoidal or learned positions,
   classification head) and runs a random padded batch with src_key_padding_mask.
4. Runs `normlab predict --json` on each sequence and compares the predicted classes and their
   probabilities with PyTorch's; also checks that batching with padding changes nothing.

Only norm = "layernorm" maps onto torch's layers (torch has no RMSNorm/DyT/ReZero encoder layer in
1.13). Exits 1 if a difference exceeds --tolerance.
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
    characters = ["[MASK]", "[UNK]"] + [chr(b) for b in json.loads(metadata["task_characters"])]
    return characters, characters, ""


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
    parser.add_argument("run", help="run directory or checkpoint.safetensors")
    parser.add_argument("--normlab", default=None, help="normlab binary (default: build/normlab, then PATH)")
    parser.add_argument("--sequences", type=int, default=4, help="sequences in the random batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()

    path = os.path.join(args.run, "checkpoint.safetensors") if os.path.isdir(args.run) else args.run
    run_dir = os.path.dirname(os.path.abspath(path))
    metadata, tensors = read_safetensors(path)
    config = json.loads(metadata["config"])
    m = config["model"]
    print(f"checkpoint {path}: step {metadata['step']}, {len(tensors)} tensors")
    print(f"  model: d_model {m['d_model']}, heads {m['heads']}, layers {m['layers']}, ffn {m['ffn']}, "
          f"{m['placement']}-{m['norm']}, {m['activation']}, eps {m['norm_eps']}, {m['positional']} positions")
    if m["norm"] != "layernorm":
        sys.exit(f"norm = {m['norm']}: only layernorm maps onto torch.nn.TransformerEncoderLayer")

    torch.manual_seed(args.seed)
    norm_first = m["placement"] == "pre"
    layer = torch.nn.TransformerEncoderLayer(
        d_model=m["d_model"], nhead=m["heads"], dim_feedforward=m["ffn"], dropout=0.0,
        activation=m["activation"], layer_norm_eps=m["norm_eps"], batch_first=True, norm_first=norm_first)
    final_norm = torch.nn.LayerNorm(m["d_model"], eps=m["norm_eps"]) if norm_first and m["final_norm"] else None
    encoder = torch.nn.TransformerEncoder(layer, num_layers=m["layers"], norm=final_norm,
                                          enable_nested_tensor=False)
    encoder.eval()

    state = {name: torch.from_numpy(array.copy()) for name, array in tensors.items()}
    result = encoder.load_state_dict(state, strict=False)
    extras = sorted(result.unexpected_keys)
    print(f"  load_state_dict(strict=False): {len(state) - len(extras)} tensors loaded, "
          f"missing {sorted(result.missing_keys) or 'none'}")
    model_extras = [n for n in extras if not n.startswith("optim.")]
    optim_extras = [n for n in extras if n.startswith("optim.")]
    print(f"  not part of TransformerEncoder: {', '.join(model_extras)}; and {len(optim_extras)} optimizer tensors")
    if result.missing_keys:
        sys.exit("missing encoder tensors: the checkpoint does not match the config")

    # The rest of normlab's EncoderModel: embedding + positions -> encoder -> head.
    embedding = torch.from_numpy(tensors["embedding.weight"])
    if m["positional"] == "learned":
        positions = torch.from_numpy(tensors["pos_embedding.weight"])
    else:
        positions = torch.from_numpy(sinusoidal_table(m["max_len"], m["d_model"]))
    head_w, head_b = torch.from_numpy(tensors["head.weight"]), torch.from_numpy(tensors["head.bias"])
    per_sequence = config["task"]["name"] == "majority"

    inputs, _, joiner = task_vocabularies(config, metadata)
    first_symbol = 2 if config["task"]["name"] == "mlm_text" else 0  # no [MASK]/[UNK] in random text
    rng = np.random.default_rng(args.seed)
    lengths = rng.integers(1, config["task"]["max_len"] + 1, size=args.sequences)
    sequences = [rng.integers(first_symbol, len(inputs), size=int(n)) for n in lengths]
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

    binary = args.normlab
    if binary is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        binary = os.path.join(root, "build", "normlab")
        if not os.path.exists(binary):
            binary = "normlab"
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
        if ours["input_ids"] != seq.tolist():
            sys.exit(f"normlab encoded {text!r} as {ours['input_ids']}, expected {seq.tolist()}")
        for k, (c, p) in enumerate(zip(torch_classes, torch_probs)):
            compared += 1
            disagreements += int(c != ours["predicted_ids"][k])
            max_prob_diff = max(max_prob_diff, abs(p - ours["probability"][k]))
    print(f"  normlab predict vs torch on the same {B} sequences: {compared} predictions, "
          f"{disagreements} different classes, max |probability diff| {max_prob_diff:.3g}")
    ok = padding_diff <= args.tolerance and max_prob_diff <= args.tolerance and disagreements == 0
    print("OK: the checkpoint loads into torch.nn.TransformerEncoder and computes the same outputs" if ok
          else f"MISMATCH beyond tolerance {args.tolerance}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
