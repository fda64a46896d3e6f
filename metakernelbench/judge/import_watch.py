"""What an evaluation that keeps the judge's uid may have changed in the folders Python imports from.

Without a separate uid the submission can write wherever the judge can, so after each evaluation the
judge looks for changes in those folders (a tripwire, not a wall). Changes are found by inode change
time, which no process can set back. Three things make that exact rather than noisy:

- bytecode caches (``__pycache__``) churn legitimately whenever any process first imports a module,
  so a changed cache file counts only when the import system would load it and it is not what its
  source compiles to;
- a folder's change time also moves when a cache folder is created in it, so a changed folder counts
  only when its entries (cache folders aside) differ from those the judge saw when it started, which
  also catches a file that was deleted;
- at the top of a folder on PYTHONPATH only what would shadow an installed module counts: a module
  file, or a package (a folder with an ``__init__``) created there.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import site
import sys
import sysconfig
from pathlib import Path

__all__ = ["IMPORT_SUFFIXES", "Listings", "changed_since", "import_roots", "listings"]

IMPORT_SUFFIXES = (".py", ".pth", ".so", ".pyc")
CACHE = "__pycache__"
_INITS = tuple("__init__" + s for s in IMPORT_SUFFIXES if s != ".pth")

Listings = dict[str, frozenset[str]]
"""Folder path → the names in it, cache folders aside."""


def import_roots(scope: str = "all") -> list[tuple[Path, bool]]:
    """Where an evaluation imports from, as ``(folder, recursive)``: the site-packages folders and our
    own packages in full; the folders on PYTHONPATH at their top level (a module dropped there would
    shadow an installed one, while their subfolders, e.g. a jobs folder in a checkout, churn legitimately)."""
    import metakernelbench

    deep = {Path(p) for p in (sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")) if p}
    deep |= {Path(p) for p in site.getsitepackages()}
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        deep.add(Path(site.getusersitepackages()))
    if scope == "all":  # our own packages too (``site``: not them, e.g. in a checkout others are editing)
        package = Path(metakernelbench.__file__).resolve().parent
        deep |= {package, *(package.parent / name for name in ("verifier", "problems"))}
    shallow = {Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    roots = [(r.resolve(), True) for r in deep if r.is_dir()]
    roots += [(r.resolve(), False) for r in shallow if r.is_dir() and (r.resolve(), True) not in roots]
    return sorted(set(roots))


def _names(path: str) -> frozenset[str] | None:
    try:
        return frozenset(n for n in os.listdir(path) if n != CACHE)
    except OSError:
        return None


def listings(roots: list[tuple[Path, bool]]) -> Listings:
    """The entries of every folder the watch compares against (once, when the judge starts)."""
    found: Listings = {}

    def walk(path: str, recursive: bool) -> None:
        try:
            with os.scandir(path) as it:  # one read per folder: the entry types come with the names
                entries = [e for e in it if e.name != CACHE]
        except OSError:
            return
        found[path] = frozenset(e.name for e in entries)
        if recursive:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and entry.path not in found:
                    walk(entry.path, True)

    for root, recursive in roots:
        walk(str(root), recursive)
    return found


def _loaded_cache_is_foreign(pyc: str) -> bool:
    """Whether the import system would load this cache file in place of its source, and it does not
    hold what the source compiles to. A file it would not load (another interpreter's tag, a stale
    timestamp or hash, no source beside it, a temporary name) cannot change what runs."""
    if not pyc.endswith(".pyc") or f".{sys.implementation.cache_tag}." not in os.path.basename(pyc):
        return False
    try:
        source = importlib.util.source_from_cache(pyc)
    except ValueError:
        return False
    try:
        with open(pyc, "rb") as f:
            data = f.read()
        with open(source, "rb") as f:
            text = f.read()
        st = os.stat(source)
    except OSError:
        return False
    if data[:4] != importlib.util.MAGIC_NUMBER or len(data) < 16:
        return False
    flags = int.from_bytes(data[4:8], "little")
    if flags & 0b1:  # hash-based: a checked one whose hash is not the source's is recompiled
        if flags & 0b10 and data[8:16] != importlib.util.source_hash(text):
            return False
    elif (int.from_bytes(data[8:12], "little") != int(st.st_mtime) & 0xFFFFFFFF
          or int.from_bytes(data[12:16], "little") != st.st_size & 0xFFFFFFFF):
        return False  # stale: the loader compiles the source instead
    name = os.path.basename(pyc)
    level = name.split(".opt-")[1].split(".")[0] if ".opt-" in name else "0"
    try:
        return marshal.loads(data[16:]) != compile(text, source, "exec", dont_inherit=True,
                                                   optimize=int(level))
    except Exception:  # noqa: BLE001 - unreadable bytecode the loader would still try is not ours
        return True


def changed_since(roots: list[tuple[Path, bool]], since_ns: int, limit: int = 20,
                  before: Listings | None = None) -> list[str]:
    """Paths under ``roots`` changed at or after ``since_ns`` in a way that can change what Python
    imports (see the module's docstring). Without ``before``, a folder whose change time moved counts."""
    found: list[str] = []
    seen: set[tuple[int, int]] = set()

    def folder_changed(path: str) -> bool:
        if before is None:
            return True
        return before.get(path) != _names(path)

    def walk(path: str, recursive: bool, in_cache: bool) -> None:
        try:
            it = os.scandir(path)
        except OSError:
            return
        with it:
            for entry in it:
                if len(found) >= limit:
                    return
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                new = st.st_ctime_ns >= since_ns
                if in_cache:
                    if new and not is_dir and _loaded_cache_is_foreign(entry.path):
                        found.append(entry.path)
                    continue
                if not recursive:
                    if new and (entry.name.endswith(IMPORT_SUFFIXES) or is_dir and any(
                            _ctime(os.path.join(entry.path, i), since_ns) for i in _INITS)):
                        found.append(entry.path)
                    continue
                if new and (not is_dir or entry.name != CACHE and folder_changed(entry.path)):
                    found.append(entry.path)
                if is_dir and (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    walk(entry.path, True, entry.name == CACHE)

    for root, recursive in roots:
        if recursive and _ctime(str(root), since_ns) and folder_changed(str(root)):
            found.append(str(root))
        walk(str(root), recursive, False)
    return found[:limit]


def _ctime(path: str, since_ns: int) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_ctime_ns >= since_ns
    except OSError:
        return False
