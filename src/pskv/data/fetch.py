"""Data sets for pskv's apps: download a pinned PyPI wheel (or Debian package), take a few files, check their sha256.

    pskv data list
    pskv data fetch ml-100k nations

Each data set is a few files inside a wheel on PyPI (`recbole`, `pykeen`, `gensim`). `fetch(name)`
runs `python -m pip download --no-deps --only-binary=:all: PACKAGE==VERSION` into a temporary
directory, opens the wheel as a zip (the package is never installed nor imported), checks each
listed member against the sha256 pinned in data/datasets.py (`DATASETS`), and moves it into
`cache_dir()/NAME/` under its original basename (written to a temporary name, then renamed: a
reader never sees half a file). A file whose digest differs is not cached: `DataError` names it
with both digests. A data set whose files are all cached and verify needs no network. Nothing
here is ever committed: the licence of each data set is its authors' (MovieLens: GroupLens
terms, no redistribution).

Fashion-MNIST comes from Debian's `dataset-fashion-mnist` instead: `apt-get download` (after one
`apt-get update` if the package lists are old) and `dpkg-deb -x` into the temporary directory:
the package is never installed. The same digests and atomic renames apply.

Lapse's toy data (`../shared/data/lapse-toy/`, beside the repository) is found by `lapse_toy_dir()`.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from ..errors import PskvError
from .datasets import DATASETS, Dataset

__all__ = ["DATASETS", "DataError", "Dataset", "cache_dir", "describe", "fetch", "lapse_toy_dir", "verify"]


class DataError(PskvError):
    """A data set cannot be had or read: download failed, checksum mismatch, malformed line."""


# ../shared/data/lapse-toy beside the repository (src/pskv/data/fetch.py is 4 levels down)
SHARED_LAPSE_TOY = Path(__file__).resolve().parents[4] / "shared" / "data" / "lapse-toy"


def cache_dir() -> Path:
    """Where fetched data sets live: $PSKV_DATA_DIR, else $XDG_CACHE_HOME/pskv, else ~/.cache/pskv."""
    if os.environ.get("PSKV_DATA_DIR"):
        return Path(os.environ["PSKV_DATA_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "pskv"
    return Path.home() / ".cache" / "pskv"


def fetch(name: str, *, quiet: bool = False) -> Path:
    """Return the directory holding data set `name`'s files, downloading them first if needed.

    Blocks (a download takes seconds). Safe to call from several processes at once: one downloads
    (a lock file beside the data set's directory) while the others wait, then find the files
    cached. Prints one line per download to stderr unless `quiet`. Raises DataError for an unknown
    name, a failed download or a checksum mismatch."""
    dataset = _dataset(name)
    target = cache_dir() / name
    if all(_cached(target, m, digest) for m, digest in dataset.members.items()) and not dataset.build:
        return target
    target.mkdir(parents=True, exist_ok=True)
    # one download at a time per data set (nodes, test workers)
    with open(target.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = {m: digest for m, digest in dataset.members.items() if not _cached(target, m, digest)}
        if missing:
            _download(name, dataset, target, missing, quiet)
        if dataset.build:  # (derived files: the builder writes what is missing, atomically)
            module, function = dataset.build.split(":")
            getattr(importlib.import_module(f"pskv.data.{module}"), function)(target)
    return target


def _download(name: str, dataset: Dataset, target: Path, missing: dict[str, str], quiet: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="pskv-fetch-") as tmp:
        debian = dataset.package.startswith("deb:")
        if not quiet:
            print(
                f"pskv data: downloading {dataset.package.split(':')[-1]} from "
                f"{'Debian' if debian else 'PyPI'} for {name!r} ({len(missing)} file(s) into {target})",
                file=sys.stderr,
                flush=True,
            )
        if debian:
            root = _download_deb(dataset.package.removeprefix("deb:"), Path(tmp))
            _extract_files(lambda m: (root / m).read_bytes(), root.name, missing, target, dataset)
        elif dataset.package.startswith("sdist:"):
            archive = _download_sdist(dataset.package.removeprefix("sdist:"), Path(tmp))
            with tarfile.open(archive) as tar:

                def read(member: str) -> bytes:
                    file = tar.extractfile(member)  # (KeyError: no such member)
                    if file is None:  # a directory or link: not the file we want
                        raise DataError(
                            f"{archive.name} holds {member!r}, but not as a file; the pinned "
                            f"{dataset.package} changed in its registry? report it to the pskv maintainers"
                        )
                    return file.read()

                _extract_files(read, archive.name, missing, target, dataset)
        else:
            wheel = Path(_download_wheel(dataset.package, Path(tmp), dataset.pip_args))
            _extract(wheel, missing, target, dataset)
    if not quiet:
        print(f"pskv data: {name!r} ready in {target}", file=sys.stderr, flush=True)


def describe() -> list[str]:
    """One line per data set: name, whether it is cached here, its source and what it is."""
    lines = []
    for name, dataset in DATASETS.items():
        target = cache_dir() / name
        here = all((target / f).is_file() for f in dataset.files())
        lines.append(f"{name:<12} {'cached' if here else '-':<7} {dataset.package:<16} {dataset.about}")
    lines.append(f"cache: {cache_dir()} (set PSKV_DATA_DIR to move it)")
    return lines


def verify(path: Path, expected: str) -> None:
    """Raise DataError unless the sha256 of file `path` is `expected`."""
    actual = _sha256_file(path)
    if actual != expected:
        raise DataError(f"{path} has sha256 {actual}, expected {expected}; delete it and fetch again")


def lapse_toy_dir() -> Path:
    """Lapse's toy data: $PSKV_LAPSE_TOY if set, else ../shared/data/lapse-toy beside the repository.

    Raises DataError if neither is a directory."""
    tried = []
    if os.environ.get("PSKV_LAPSE_TOY"):
        tried.append(Path(os.environ["PSKV_LAPSE_TOY"]).expanduser())
    tried.append(SHARED_LAPSE_TOY)
    for path in tried:
        if path.is_dir():
            return path
    raise DataError(
        f"Lapse's toy data is not at {' nor '.join(map(str, tried))}; set PSKV_LAPSE_TOY to "
        "the folder holding kge/, lm/ and mf/ (apps/data of the lapse-ps repository)"
    )


def _dataset(name: str) -> Dataset:
    try:
        return DATASETS[name]
    except KeyError:
        raise DataError(f"unknown data set {name!r}; known: {', '.join(DATASETS)} (see `pskv data list`)") from None


def _cached(target: Path, member: str, digest: str) -> bool:
    path = target / member.rsplit("/", 1)[-1]
    return path.is_file() and _sha256_file(path) == digest  # a corrupt file counts as missing


def _download_wheel(requirement: str, dest: Path, pip_args: tuple[str, ...] = ()) -> Path:
    """`pip download` the one wheel of `requirement` into `dest` and return its path."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        *pip_args,
        "-d",
        str(dest),
        requirement,
    ]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DataError(f"`pip download {requirement}` did not run: {exc}") from None
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise DataError(
            f"`pip download {requirement}` failed (status {proc.returncode}); is PyPI "
            f"reachable and pip configured? its last lines:\n{tail}"
        )
    return wheels[0]


def _download_sdist(requirement: str, dest: Path) -> Path:
    """`pip download` the source archive of `requirement` (a package with no wheel) into `dest`; it is
    opened as a tar file, never built nor installed."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "-d",
        str(dest),
        requirement,
    ]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DataError(f"`pip download {requirement}` did not run: {exc}") from None
    archives = sorted(dest.glob("*.tar.gz"))
    if not archives:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise DataError(
            f"`pip download {requirement}` failed (status {proc.returncode}); is PyPI "
            f"reachable and pip configured? its last lines:\n{tail}"
        )
    return archives[0]


def _extract(wheel: Path, members: dict[str, str], target: Path, dataset: Dataset) -> None:
    """Check and cache `members` of `wheel`; a file whose digest differs is never cached."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            _extract_files(archive.read, wheel.name, members, target, dataset)
    except zipfile.BadZipFile as exc:
        raise DataError(f"{wheel.name} is not a valid wheel ({exc}); retry the fetch") from None


def _extract_files(read, source: str, members: dict[str, str], target: Path, dataset: Dataset) -> None:
    """Check and cache `members`, each `read(member) -> bytes` from `source`; a file whose digest
    differs is never cached."""
    target.mkdir(parents=True, exist_ok=True)
    for member, expected in members.items():
        try:
            data = read(member)
        except (KeyError, FileNotFoundError, AttributeError):
            raise DataError(
                f"{source} has no file {member!r}; the pinned {dataset.package} changed in its "
                "registry? report it to the pskv maintainers"
            ) from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected:
            raise DataError(
                f"{member} from {source} has sha256 {actual}, expected {expected}; "
                f"not cached. Retry `pskv data fetch {dataset.name}`; if it persists "
                "the download is tampered with or the pin is wrong: report it"
            )
        _write_atomic(target / member.rsplit("/", 1)[-1], data)


def _download_deb(requirement: str, dest: Path) -> Path:
    """`apt-get download NAME=VERSION` into `dest` and unpack it there (dpkg-deb -x, nothing is
    installed); returns the unpacked root. Refreshes apt's package lists once if it must."""

    def run(*command: str) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(command, cwd=dest, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DataError(
                f"`{' '.join(command)}` did not run: {exc}; this data set comes from Debian's "
                "archive and needs apt-get and dpkg-deb (a Debian or Ubuntu machine)"
            ) from None

    got = run("apt-get", "download", requirement)
    if got.returncode != 0:  # an old or empty package list: refresh it (as root), then try again
        run("apt-get", "update", "-qq")
        got = run("apt-get", "download", requirement)
    debs = sorted(dest.glob("*.deb"))
    if got.returncode != 0 or not debs:
        raise DataError(
            f"`apt-get download {requirement}` failed (status {got.returncode}): "
            f"{(got.stderr or got.stdout).strip()[-400:]}; run `apt-get update` as root and retry"
        )
    root = dest / "unpacked"
    unpack = run("dpkg-deb", "-x", str(debs[0]), str(root))
    if unpack.returncode != 0:
        raise DataError(f"`dpkg-deb -x {debs[0].name}` failed: {unpack.stderr.strip()[-400:]}; retry the fetch")
    return root


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
