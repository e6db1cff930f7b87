"""Symmetrised word alignments from fast_align itself (Dyer et al. 2013), through the systran-align wheel: the
``--aligner fast_align`` of the ibm1 / ibm2 learners, and the reference tools/bench_lexicon.py compares ours with."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from .counts import EncodedCorpus


def fast_align_links(
    corpus: EncodedCorpus,
    model: int = 2,
    iterations: int = 5,
    p0: float = 0.08,
    tension: float = 4.0,
    optimize_tension: bool = True,
    variational_bayes: bool = False,
    alpha: float = 0.01,
    progress: bool = False,
    batch: int = 10000,
):
    """Symmetrised links from fast_align itself, via the systran-align wheel (``pip install systran-align``)."""
    try:
        import systran_align
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            "--aligner fast_align needs the systran-align package (pip install systran-align==3.5.0)"
        ) from e
    from .ibm import Links

    src = [[corpus.src.vocab[i] for i in corpus.src.sentence(s)] for s in range(corpus.n_pairs)]
    tgt = [[corpus.tgt.vocab[i] for i in corpus.tgt.sentence(s)] for s in range(corpus.n_pairs)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "corpus.txt")
        with open(path, "w", encoding="utf-8") as f:
            for s, t in zip(src, tgt):
                f.write(" ".join(s) + " ||| " + " ".join(t) + "\n")
        fwd, bwd = os.path.join(tmp, "fwd.probs"), os.path.join(tmp, "bwd.probs")
        systran_align.generate_alignment_probabilities(
            path,
            fwd,
            bwd,
            iterations=iterations,
            favor_diagonal=(model == 2),
            diagonal_tension=tension,
            optimize_tension=(model == 2 and optimize_tension),
            variational_bayes=variational_bayes,
            alpha=alpha,
            prob_align_null=p0,
        )
        aligner = systran_align.Aligner(fwd, bwd)
        sent, si, ti = [], [], []
        rng = range(0, corpus.n_pairs, batch)
        if progress:
            from tqdm import tqdm

            rng = tqdm(rng, desc="fast_align: aligning", unit="batch")
        for b in rng:
            out = aligner.align_batch(src[b : b + batch], tgt[b : b + batch])
            for k, res in enumerate(out):
                for i, j in res["alignments"]:
                    sent.append(b + k)
                    si.append(i)
                    ti.append(j)
    return Links(np.asarray(sent, np.int32), np.asarray(si, np.int32), np.asarray(ti, np.int32))
