"""Line counts of a revision's traceinspect package: total, largest files and largest functions (AST).

python bench/loc.py [REV]          # default HEAD; e.g. `python bench/loc.py d65bea2^` for before issue 12
"""

from __future__ import annotations

import ast
import subprocess
import sys


def main(rev: str = "HEAD", top: int = 5) -> None:
    ls = subprocess.check_output(["git", "ls-tree", "-r", "--name-only", rev, "traceinspect"], text=True)
    files = [f for f in ls.split() if f.endswith(".py")]
    sizes, funcs = [], []
    for f in files:
        src = subprocess.check_output(["git", "show", f"{rev}:{f}"], text=True)
        sizes.append((src.count("\n"), f))
        for n in ast.walk(ast.parse(src)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((n.end_lineno - n.lineno + 1, f"{f}:{n.name}"))
    sizes.sort(reverse=True)
    funcs.sort(reverse=True)
    short = lambda f: f.split("traceinspect/", 1)[1]  # noqa: E731
    print(f"{rev}: {sum(s for s, _ in sizes)} lines in {len(sizes)} files")
    print("largest files:", ", ".join(f"{short(f)} {s}" for s, f in sizes[:top]))
    print("largest functions:", ", ".join(f"{short(f)} {s}" for s, f in funcs[:top]))


if __name__ == "__main__":
    main(*sys.argv[1:2])
