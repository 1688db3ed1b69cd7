#!/usr/bin/python3
"""An independent, NumPy-only safetensors reader (and a sample writer), written from the format spec
(https://github.com/huggingface/safetensors) rather than from our C++ code, to show by hand that the
files normlab writes are readable by another implementation.

    /usr/bin/python3 scripts/golden/safetensors_reader.py FILE [FILE ...]   # validate, print a summary
    /usr/bin/python3 scripts/golden/safetensors_reader.py --write-sample OUT # tests/data/safetensors/sample

Exit status 0 if every file is valid, 1 otherwise (the reason is printed).
"""
import json
import struct
import sys

import numpy as np

MAX_HEADER_BYTES = 100_000_000
DTYPES = {
    "BOOL": np.dtype("?"),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
}
# Formats NumPy has no type for: read as raw bytes of the right width.
RAW_DTYPES = {"BF16": 2, "F8_E5M2": 1, "F8_E4M3": 1}


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate key in header: {sorted(keys)}")
    return dict(pairs)


def load(path):
    """Returns (metadata, {name: ndarray}) or raises ValueError naming what is wrong."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER_BYTES or n > len(data) - 8:
        raise ValueError(f"header length {n} too large for a {len(data)}-byte file")
    header_text = data[8 : 8 + n].decode("utf-8")
    if not header_text.startswith("{"):
        raise ValueError("header does not start with '{'")
    header = json.loads(header_text, object_pairs_hook=no_duplicates)
    if not isinstance(header, dict):
        raise ValueError("header is not an object")
    buffer = data[8 + n :]
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(
        isinstance(v, str) for v in metadata.values()
    ):
        raise ValueError("__metadata__ must map strings to strings")

    spans = []
    tensors = {}
    for name, info in header.items():
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPES and dtype not in RAW_DTYPES:
            raise ValueError(f"tensor {name!r}: unknown dtype {dtype}")
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"tensor {name!r}: bad shape {shape}")
        begin, end = offsets
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= len(buffer)):
            raise ValueError(f"tensor {name!r}: bad data_offsets {offsets}")
        width = DTYPES[dtype].itemsize if dtype in DTYPES else RAW_DTYPES[dtype]
        count = int(np.prod(shape, dtype=object)) if shape else 1
        if end - begin != count * width:
            raise ValueError(f"tensor {name!r}: {end - begin} bytes for shape {shape} of {dtype}")
        spans.append((begin, end, name))
        raw = buffer[begin:end]
        if dtype in DTYPES:
            tensors[name] = np.frombuffer(raw, dtype=DTYPES[dtype]).reshape(shape)
        else:
            tensors[name] = np.frombuffer(raw, dtype=np.uint8).reshape(list(shape) + [width])

    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise ValueError(f"tensor {name!r}: begins at {begin}, expected {position} (gap/overlap)")
        position = end
    if position != len(buffer):
        raise ValueError(f"buffer has {len(buffer)} bytes, tensors cover {position}")
    return metadata, tensors


def write_sample(path):
    """A valid file laid out unlike ours (metadata last, offsets not in name order, a zero-sized
    tensor, several dtypes), so our reader is tested on more than its own writer's output. The
    values follow formulas that tests/test_safetensors.cpp recomputes."""
    tensors = {
        "weight": np.arange(6, dtype="<f4").reshape(2, 3) * 0.5 - 1.0,  # (2, 3)
        "steps": np.array([3, -7, 1 << 40], dtype="<i8"),  # (3,)
        "mask": np.array([[1, 0], [0, 1], [1, 1]], dtype="u1"),  # (3, 2)
        "empty": np.zeros((0, 4), dtype="<f4"),  # (0, 4)
        "scale": np.array(2.5, dtype="<f4"),  # () scalar
    }
    order = ["steps", "mask", "empty", "weight", "scale"]  # offset order, not sorted by name
    dtype_names = {"<f4": "F32", "<i8": "I64", "|u1": "U8"}
    header = {}
    buffer = b""
    for name in order:
        array = tensors[name]
        raw = array.tobytes()
        header[name] = {
            "data_offsets": [len(buffer), len(buffer) + len(raw)],
            "shape": list(array.shape),
            "dtype": dtype_names[array.dtype.str],
        }
        buffer += raw
    header["__metadata__"] = {"format": "pt", "note": "written by check_safetensors.py"}
    text = json.dumps(header, indent=1).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + buffer)


def main(argv):
    if len(argv) == 3 and argv[1] == "--write-sample":
        write_sample(argv[2])
        load(argv[2])
        print(f"wrote {argv[2]}")
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 1
    status = 0
    for path in argv[1:]:
        try:
            metadata, tensors = load(path)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as e:
            print(f"{path}: INVALID: {type(e).__name__}: {e}")
            status = 1
            continue
        print(f"{path}: OK, {len(tensors)} tensors, metadata {metadata}")
        for name, array in tensors.items():
            flat = array.reshape(-1)
            print(f"  {name}: {array.dtype} {list(array.shape)} first {flat[:4].tolist()}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
