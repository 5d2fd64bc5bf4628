"""Build a dataset folder once, reuse it afterwards.

Why: decoding FEMNIST's JSON takes many seconds and every training process needs the data, so
each loader's output is stored as Arrow under a cache dir (``FEDGS_CACHE``, default
``~/.cache/fedgs``) in a folder named by a key over (loader, each source file's name and
SHA-256, options, format version). Changing a source file's bytes or an option gives a new key,
hence a rebuild; the same bytes copied elsewhere or given new times (a re-synced or mounted
data folder) find the folder already built: keyed on paths and mtimes, each copy was decoded
and stored again (306 MB for the FEMNIST digits). Hashing the whole FEMNIST Parquet set (146 MB)
takes about 0.2 s, once per process. Old folders are left alone and can be deleted by hand at any
time.

Writes are atomic: a build happens in a hidden temp folder next to the final one, which is
renamed into place only when complete, so a crash never leaves a half-written cache, and two
processes building the same key at once both end up with one valid folder.

Private: a dataset folder is decoded data (a node's writers, a run's evaluation writers), so it
is its owner's alone (0700), as is a cache root fedgs creates; another user of the host reads
nothing through it, whatever the source folder's mode. A folder an earlier version left open
(0755) is closed when it is next used.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedgs.data.errors import DataError
from fedgs.data.federated import FORMAT_VERSION, META_FILE
from fedgs.data.files import file_sha256
from fedgs.private_files import close_dir, private_dir

CACHE_ENV = "FEDGS_CACHE"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir`` if given, else ``$FEDGS_CACHE``, else ``~/.cache/fedgs``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fedgs"


def cache_key(loader: str, sources: Sequence[Path], options: Mapping[str, Any]) -> str:
    """Key that changes when a source file's name or bytes, or an option, changes."""
    files = [[path.name, _sha256(path)] for path in sources]
    payload = {
        "loader": loader,
        "format_version": FORMAT_VERSION,
        "sources": sorted(files),
        "options": dict(options),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _sha256(path: Path) -> str:
    """A file's SHA-256, hashed once per process while its inode, size and times stay the same
    (ctime too: a write that restores the mtime still changes it)."""
    try:
        st = path.stat()
        return _sha256_of(
            str(path.resolve()), (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        )
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or err})") from err


@functools.lru_cache(maxsize=4096)
def _sha256_of(path: str, stat_key: tuple[int, int, int, int]) -> str:
    """``stat_key`` only keys the memo: a changed file is hashed again."""
    return file_sha256(Path(path))


def cached_folder(root: Path, loader: str, key: str, build: Callable[[Path], None]) -> Path:
    """The folder for ``key`` under ``root``; ``build(tmp)`` fills it first if it is missing."""
    final = root / f"{loader}-{key[:24]}"
    if (final / META_FILE).is_file():
        close_dir(final)  # one an earlier version left open
        return final
    try:
        private_dir(root, existing=False)  # a root the user named keeps its mode
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))  # 0700
    except OSError as err:
        raise DataError(f"{root}: cannot create the data cache here ({err.strerror})") from err
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / META_FILE).is_file():  # not a concurrent build that won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
