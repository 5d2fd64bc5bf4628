"""Reading a source file whole, gzipped or not, with errors that name the file."""

from __future__ import annotations

import gzip
import hashlib
import zlib
from pathlib import Path

from fedgs.data.errors import DataError


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when its name ends in ``.gz``."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise DataError(f"{path}: damaged or truncated gzip file ({err})") from err
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or err})") from err


def file_sha256(path: Path) -> str:
    """The file's SHA-256 (hex): what names a cache entry by content, not by place or time."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
