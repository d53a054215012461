"""Outputs that never lose the user's data: atomic writes, and no output onto an input.

Every report, diff and annotated trace leaves through `write_atomic`: the bytes go to a temporary
file in the target's directory, are flushed and fsynced, and replace the target with `os.replace`.
A failed write (a full disk, no permission) removes the temporary file and leaves the previous file
untouched. A target that is not a regular file (`/dev/null`, a terminal) is written directly: it
holds nothing to lose and cannot be renamed over.

`refuse_inputs` compares outputs with inputs by (st_dev, st_ino), so a hard link, a symlink or
another spelling of an input's path is caught before anything is analysed or written.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import UsageError


def _ident(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def input_files(path: str | Path) -> list[Path]:
    """The files an input path stands for: the file itself, or every file directly in a directory
    (a run directory's rank files, and anything beside them)."""
    p = Path(path)
    try:
        if p.is_dir():
            return [c for c in p.iterdir() if c.is_file()]
    except OSError:
        return []
    return [p]


def refuse_inputs(outputs, inputs) -> None:
    """A UsageError (exit 2) naming both paths when an output is an input or another output."""
    seen: dict[tuple[int, int], str] = {}
    for i in inputs:
        if i is None or str(i) in ("", "-"):
            continue
        for f in input_files(i):
            key = _ident(f)
            if key is not None:
                seen.setdefault(key, str(f))
    outs: dict[object, str] = {}
    for o in outputs:
        if o is None or str(o) in ("", "-"):
            continue
        try:
            st = os.stat(o)
        except (OSError, ValueError):
            st = None  # not there yet: it cannot be an input, but two outputs can still name it
        if st is not None and not stat.S_ISREG(st.st_mode):
            continue  # /dev/null and friends: nothing of the user's is kept there
        key = (st.st_dev, st.st_ino) if st is not None else os.path.realpath(o)
        if key in seen:
            raise UsageError(
                f"{o}: this output is the input {seen[key]} (the same file); writing it would destroy the input",
                hint="choose another output path",
            )
        if key in outs:
            raise UsageError(f"{o}: this output is also the output {outs[key]}", hint="give each output its own path")
        outs[key] = str(o)


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so that `path` holds either its old bytes or all the new ones.
    A symlink is written through, as open() would: its target is replaced and the link kept.
    Raises UsageError naming the path and the cause."""
    p = Path(os.path.realpath(path))
    try:
        st = os.stat(p)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            with open(p, "wb") as fh:
                fh.write(data)
        except OSError as e:
            raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}; the previous file is unchanged") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
