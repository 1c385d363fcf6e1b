"""The one writer for every file trainsim writes: trace, baseline, profile, report pages and figures, sbatch script.

``check_output_path`` runs before any work (a one-hour plan must not end in "directory does not exist"):
the target must not be a directory, its parent must exist, be a directory and be writable. ``write_atomic``
then writes a temporary file in the same directory and renames it over the target (``os.replace`` is atomic
on POSIX within one file system), so a failure at any point leaves the old file, or nothing, never half a file.
Every refusal is one SpecError line naming the field.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .errors import SpecError


def check_output_path(path: str | os.PathLike, field: str,
                      inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
    """``path`` if a file can be written there and it is none of the command's ``inputs`` (a trace or profile
    written over the scenario, model or measurements it was made from would destroy them); a SpecError saying
    why not otherwise."""
    p = Path(path)
    if str(path) == "-":
        raise SpecError(field, "'-' (standard output) is not written to: give a file name")
    if str(path) == "" or p.name in ("", ".", ".."):
        raise SpecError(field, f"{str(path)!r} is not a file name")
    if p.is_symlink() and not p.exists():
        raise SpecError(field, f"{p} is a link to {os.readlink(p)}, which does not exist")
    for given in inputs:
        if given and Path(given).exists() and p.exists() and os.path.samefile(p, given):
            raise SpecError(field, f"{p} is one of this command's inputs ({given}): write elsewhere")
    if p.is_dir():
        raise SpecError(field, f"{p} is a directory")
    if p.exists() and not p.is_file():
        raise SpecError(field, f"{p} exists and is not a regular file")
    parent = p.parent
    if not parent.exists():
        raise SpecError(field, f"directory does not exist: {parent}")
    if not parent.is_dir():
        raise SpecError(field, f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecError(field, f"no permission to write in {parent}")
    if p.exists() and not os.access(p, os.W_OK):
        raise SpecError(field, f"no permission to write {p}")
    return p


def check_output_dir(path: str | os.PathLike, field: str) -> Path:
    """A directory to write several files into: it exists, or its parent does and is writable (it is created)."""
    p = Path(path)
    if str(path) == "":
        raise SpecError(field, "'' is not a directory name")
    if p.is_symlink() and not p.exists():
        raise SpecError(field, f"{p} is a link to {os.readlink(p)}, which does not exist")
    if p.exists():
        if not p.is_dir():
            raise SpecError(field, f"{p} exists and is not a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise SpecError(field, f"no permission to write in {p}")
        return p
    parent = p.parent
    if not parent.is_dir():
        raise SpecError(field, f"directory does not exist: {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecError(field, f"no permission to write in {parent}")
    return p


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: str | os.PathLike, data: str | bytes, field: str, mode: int | None = None) -> Path:
    """Write ``data`` (text is UTF-8) to ``path`` through a temporary file and a rename; SpecError on failure.
    ``mode`` sets the permission bits (default: as ``open`` would, 0o666 less the umask)."""
    p = check_output_path(path, field)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = -1, ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        with os.fdopen(fd, "wb") as fh:
            fd = -1
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _default_mode() if mode is None else mode)
        os.replace(tmp, p)
        tmp = ""
    except OSError as e:
        raise SpecError(field, f"cannot write {p}: {e.strerror or type(e).__name__}") from None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return p
