"""A share of the built-in corpus, for measuring held-out accuracy against the amount of text: every k-th document.

The documents of `embryo-mini`'s train.txt are kept in its source order (Brown, Wikipedia, PTB, news), so every k-th
document takes about 1/k of each source. The held-out Brown files are never in train.txt, so a run on a subset is
scored on the same held-out text; copy the full corpus's vocabulary into its run folder first (its `spiece.model`), and
its masked targets are the same pieces as the full run's.

    python bench/corpus_subset.py --every 2 --out runs/corpora/half.txt
    cp figures/mature/run/spiece.model runs/half-8k/ && embryo pretrain --preset tiny-mature --run-dir runs/half-8k --set corpus=runs/corpora/half.txt
"""
import argparse
import json
from pathlib import Path

from embryo.text.corpus import CorpusError, read_corpus, write_corpus
from embryo.text.corpora import CORPORA, fetch


def subset(docs: list, every: int, offset: int = 0) -> list:
    "Every `every`-th document of `docs`, from `offset` on."
    return docs[offset::every]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=int, required=True, help="keep every k-th document (2: half the corpus)")
    p.add_argument("--offset", type=int, default=0, help="the first document kept (0 to every-1)")
    p.add_argument("--corpus", default="embryo-mini", help="a built-in corpus (its train.txt) or a corpus file")
    p.add_argument("--out", required=True, help="the corpus file to write (one sentence a line, documents apart)")
    a = p.parse_args(argv)
    if a.every < 1: p.exit(2, f"{p.prog}: --every {a.every}: keep every k-th document with k of 1 or more\n")
    if not 0 <= a.offset < a.every: p.exit(2, f"{p.prog}: --offset {a.offset}: give an offset from 0 to {a.every - 1}\n")
    src = fetch(a.corpus, verbose=False) / "train.txt" if a.corpus in CORPORA else Path(a.corpus)
    if not src.is_file(): p.exit(2, f"{p.prog}: --corpus {a.corpus}: no such file; give a corpus file or one of {', '.join(CORPORA)}\n")
    try: full = read_corpus(src)
    except CorpusError as e: p.exit(2, f"{p.prog}: --corpus {a.corpus}: {e}\n")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    stats = write_corpus(subset(full, a.every, a.offset), a.out)
    print(json.dumps(dict(corpus=a.corpus, every=a.every, offset=a.offset, out=a.out, **stats,
                          share_of_words=round(stats["words"] / sum(len(s.split()) for d in full for s in d), 4))))


if __name__ == "__main__":
    main()
