#!/usr/bin/env python3
"""Lists C++ function definitions longer than a limit (default 80 lines, opening to closing brace).

    python3 scripts/check/long_functions.py [--limit N] [--exclude DIR] PATH...

Prints `lines  file:line  name` for each, longest first, then a count. A heuristic reader, not a
compiler: it strips comments, strings and character literals, tracks brace depth, and takes a `{`
as a function body when it opens at namespace or class scope right after a parameter list (`)`,
optionally followed by const/noexcept/override/final/a trailing return type/a member initializer
list). Lambdas and local classes count toward the function that holds them.
"""
import argparse
import os
import re
import sys

QUALIFIER_TAIL = re.compile(
    r"\)\s*(?:const\s*)?(?:&{1,2}\s*)?(?:noexcept(?:\s*\([^)]*\))?\s*)?(?:override\s*|final\s*)*"
    r"(?:->\s*[\w:<>,\s\*&]+)?\s*$")


def strip(text):
    """Blanks comments and literals, keeping newlines so that line numbers hold."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if m:
                end = ")" + m.group(1) + '"'
                j = text.find(end, i)
                j = n if j < 0 else j + len(end)
                out.append('""' + "".join(ch if ch == "\n" else " " for ch in text[i + 2:j]))
                i = j
            else:
                out.append(c)
                i += 1
        elif c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum()) and text[i - 1] not in "uUL":
                out.append(" ")  # digit separator 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    text = strip(open(path, encoding="utf-8", errors="replace").read())
    # scope stack: each entry is 'ns' (namespace/class/struct/enum/extern/other) or 'fn'
    stack = []
    results = []
    start = 0  # where the current declaration's text starts
    line_of = lambda pos: text.count("\n", 0, pos) + 1
    i = 0
    fn_depth = None
    fn_start = None
    fn_name = None
    while i < len(text):
        c = text[i]
        if c in ";}" and fn_depth is None:
            if c == "}" and stack:
                stack.pop()
            start = i + 1
        elif c == "}" and fn_depth is not None:
            stack.pop()
            if len(stack) == fn_depth:
                results.append((line_of(i) - line_of(fn_start) + 1, line_of(fn_start), fn_name))
                fn_depth = None
                start = i + 1
        elif c == "{":
            if fn_depth is None:
                head = text[start:i]
                flat = " ".join(head.split())
                is_fn = False
                if ")" in flat and not re.search(r"\b(namespace|class|struct|union|enum)\b[^()]*$", flat):
                    tail = flat
                    # a member initializer list: cut it off at the first ') :' that follows the params
                    m = re.search(r"\)\s*(?:noexcept\s*)?:\s*[\w:]+\s*[({]", flat)
                    if m:
                        tail = flat[:m.start() + 1]
                    is_fn = bool(QUALIFIER_TAIL.search(tail)) and not re.match(r"^\s*(=|return)\b", flat)
                    if re.search(r"=\s*[\w:<>]*\s*\(?[^()]*\)?\s*$", flat) and "operator" not in flat:
                        is_fn = is_fn and not re.search(r"=[^=]*$", flat.split("(")[0])
                if is_fn:
                    name = re.search(r"([~\w:]+(?:operator\s*\S+)?)\s*\(", flat)
                    fn_name = name.group(1) if name else flat[:40]
                    fn_depth = len(stack)
                    fn_start = i
                stack.append("fn" if is_fn else "ns")
                if not is_fn:
                    start = i + 1
            else:
                stack.append("in")
        i += 1
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--exclude", action="append", default=[], help="skip paths under this folder")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    files = []
    for p in args.paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, f) for f in names if f.endswith((".cpp", ".hpp"))]
        else:
            files.append(p)
    excluded = [os.path.normpath(e) + os.sep for e in args.exclude]
    rows = []
    for f in sorted(files):
        if any(os.path.normpath(f).startswith(e) for e in excluded):
            continue
        for length, line, name in functions(f):
            if length > args.limit:
                rows.append((length, f"{f}:{line}", name))
    rows.sort(key=lambda r: -r[0])
    for length, where, name in rows:
        print(f"{length:5d}  {where}  {name}")
    print(f"{len(rows)} functions over {args.limit} lines")


if __name__ == "__main__":
    sys.exit(main())
