#!/usr/bin/env python3
"""Writes data/debian/{train,valid,test}.csv: a real text-classification set from a source every
Debian machine has, the package index. Each row is one package's one-line description (written by
its maintainers, as people write them) and the archive section it is filed in:

  id,text,label
  python3-numpy,Fast array facility to the Python 3 language,python

Ten sections with different subjects: admin, devel, games, net, perl, python, science, sound, text, utils.
A description is kept once: a text that occurs more than once in the index (binary packages built
from one source often share it, sometimes across sections) is left out, so the same text is never
in two splits or under two labels. The split is 80/10/10 by a hash of the package name (SHA-256),
so it does not depend on the index's order and a package keeps its split as the archive changes.

Input: `apt-cache dumpavail` (after `apt-get update`), or a file saved from it:
  python3 scripts/data/make_debian_example.py [DUMPAVAIL_FILE]
The committed files were made from Debian 12 (bookworm) main amd64's index of 2026-12-06.
"""
import collections
import csv
import hashlib
import subprocess
import sys

SECTIONS = ["admin", "devel", "games", "net", "perl", "python", "science", "sound", "text", "utils"]


def records(text):
    record = {}
    for line in text.splitlines():
        if not line.strip():
            if record:
                yield record
            record = {}
        elif not line.startswith((" ", "\t")) and ":" in line:
            key, value = line.split(":", 1)
            record[key] = value.strip()
    if record:
        yield record


def main():
    if len(sys.argv) > 1:
        text = open(sys.argv[1], encoding="utf-8").read()
    else:
        text = subprocess.run(["apt-cache", "dumpavail"], check=True, capture_output=True, text=True).stdout
    rows = {}
    for r in records(text):
        section = r.get("Section", "").split("/")[-1]
        name, description = r.get("Package"), r.get("Description", "")
        if section in SECTIONS and name and description and name not in rows:
            rows[name] = (description, section)
    counts = collections.Counter(d for d, _ in rows.values())
    splits = {"train": [], "valid": [], "test": []}
    for name in sorted(rows):
        description, section = rows[name]
        if counts[description] > 1:
            continue
        bucket = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 10
        splits["train" if bucket < 8 else "valid" if bucket == 8 else "test"].append((name, description, section))
    for split, items in splits.items():
        with open(f"data/debian/{split}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(["id", "text", "label"])
            writer.writerows(items)
        print(f"data/debian/{split}.csv: {len(items)} rows,",
              dict(sorted(collections.Counter(s for _, _, s in items).items())))


if __name__ == "__main__":
    main()
