"""Finding, checking and downloading data set files.

A data set is a few named files. They are looked for, in order, in: the directory passed by the caller, the
directory in the data set's environment variable, tinygrad's cache (`helpers.cache_dir()/datasets/<name>`), and
system directories where a distribution package installs them. The first place holding every file wins; each
file is checked against its known checksum. When no place has them, they are downloaded into the cache (with a
progress bar) from a URL base that an environment variable or the caller can override. If that fails too, the
error lists every place looked and how to get the files.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tinygrad.helpers import atomic_write, cache_dir


class DatasetError(RuntimeError):
    """Data set files that are missing, damaged or of an unexpected version."""


@dataclass(frozen=True)
class DataFiles:
    name: str  # also the cache sub-directory
    checksums: Mapping[str, str]  # file name -> "sha256:<hex>" or "md5:<hex>"
    dir_env: str  # environment variable naming a directory that holds the files
    url_env: str  # environment variable overriding the download URL base
    url_base: str
    system_dirs: Sequence[str] = ()
    how_to_get: str = ""


def digest_of(path: pathlib.Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: pathlib.Path, expected: str | None) -> None:
    """Raise DatasetError unless the file has the expected "algorithm:hex" digest (None: not checked)."""
    if expected is None:
        return
    algorithm, _, want = expected.partition(":")
    got = digest_of(path, algorithm)
    if got != want.lower():
        raise DatasetError(f"{path} ({path.stat().st_size} bytes) has {algorithm} {got}, expected {want}: the file is "
                           f"damaged, truncated or a different version. Delete it so that it is fetched again, or "
                           f"pass checksums={{{path.name!r}: None}} if it is your own file")


def search_dirs(spec: DataFiles, directory: str | os.PathLike | None) -> list[tuple[str, pathlib.Path]]:
    """(why, directory) for every place to look, in order."""
    places: list[tuple[str, pathlib.Path]] = []
    if directory is not None:
        places.append(("the directory argument", pathlib.Path(directory)))
    if os.environ.get(spec.dir_env):
        places.append((f"${spec.dir_env}", pathlib.Path(os.environ[spec.dir_env])))
    places.append(("the tinygrad cache", cache_dir() / "datasets" / spec.name))
    places.extend(("a system data directory", pathlib.Path(d)) for d in spec.system_dirs)
    return places


def locate(spec: DataFiles, directory: str | os.PathLike | None = None, download: bool = True,
           url_base: str | None = None, checksums: Mapping[str, str | None] | None = None) -> pathlib.Path:
    """The directory holding all of `spec`'s files (each verified), downloading them into the cache if need be."""
    sums: dict[str, str | None] = {**spec.checksums, **(checksums or {})}
    looked = []
    for why, place in search_dirs(spec, directory):
        present = [f for f in sums if (place / f).is_file()]
        if len(present) == len(sums):
            for f in sums:
                verify(place / f, sums[f])
            return place
        looked.append(f"  {place} ({why}): " + (f"has {len(present)} of the {len(sums)} files" if present
                                                else "no files" if place.is_dir() else "does not exist"))
    base = url_base or os.environ.get(spec.url_env) or spec.url_base
    if download:
        target = cache_dir() / "datasets" / spec.name
        try:
            for f in sums:
                if not (target / f).is_file():
                    fetch(f"{base.rstrip('/')}/{f}", target / f, sums[f])
                else:
                    verify(target / f, sums[f])
            return target
        except (urllib.error.URLError, OSError, ValueError) as e:
            looked.append(f"  download from {base} failed: {e}")
    else:
        looked.append("  download: switched off (download=False)")
    raise DatasetError(f"the {spec.name} files {sorted(sums)} were not found. Looked in:\n" + "\n".join(looked) +
                       f"\nTo get them: {spec.how_to_get}put the files in a directory and set ${spec.dir_env} to it "
                       f"(or pass directory=...), or let them download (set ${spec.url_env} to a mirror's URL base "
                       f"if {spec.url_base} is not reachable)")


def fetch(url: str, dest: pathlib.Path, checksum: str | None) -> None:
    """Download `url` to `dest` with a progress bar; the file appears only complete and verified."""
    from tqdm import tqdm

    dest.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(url, timeout=30) as response:
        total = int(response.headers.get("Content-Length") or 0) or None
        with atomic_write(dest) as out:
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name) as bar:
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    bar.update(len(block))
            if total is not None and out.tell() != total:
                raise DatasetError(f"download of {url} stopped at {out.tell()} of {total} bytes")
            out.flush()
            verify(pathlib.Path(out.name), checksum)
