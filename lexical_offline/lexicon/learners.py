"""One learner class per lexicon method, each with a dataclass config of its own options, and ``LEARNERS``, the
registry that maps ``--method`` to the class.

A learner turns an encoded corpus into sparse (input type x output type) scores; builder.build_lexicon does what
every method shares (min_count, top_k, the fallback, the temperature, provenance). The mathematics lives in
simple.py, pmi.py, ibm.py, bayes.py, alignments.py and fast_align.py, imported when a learner runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Dict, Optional, Type

import scipy.sparse as sp

from .counts import Cooccurrence, EncodedCorpus, link_counts

ALIGNERS = ("ours", "fast_align")


@dataclass
class LearnedScores:
    """What a learner returns. ``filter_counts`` is what min_count applies to (``scores`` itself where the scores
    are counts; None where the learner applied min_count already); ``params`` and ``stats`` go into the
    provenance, in order."""

    scores: sp.spmatrix
    filter_counts: Optional[sp.spmatrix]
    params: Dict[str, object] = field(default_factory=dict)
    stats: Dict[str, object] = field(default_factory=dict)
    links: Any = None  # ibm.Links of the aligners (--write-alignments)


@dataclass
class SimpleConfig:
    epsilon: int = 3  # C3 threshold on |{v': suff(v', w)}| (eq. 20)

    @classmethod
    def from_args(cls, args) -> "SimpleConfig":
        return cls(epsilon=args.epsilon)


@dataclass
class PmiConfig:
    @classmethod
    def from_args(cls, args) -> "PmiConfig":
        return cls()


@dataclass
class IbmConfig:
    aligner: str = "ours"  # ours, or fast_align itself (systran-align)
    symmetrization: str = "intersect"
    iterations: int = 5
    p0: float = 0.08  # NULL alignment probability (Model 2)
    tension: float = 4.0  # initial diagonal tension (Model 2)
    optimize_tension: bool = True
    variational_bayes: bool = False
    vb_alpha: float = 0.01

    def __post_init__(self):
        if self.aligner not in ALIGNERS:
            raise ValueError(f"aligner must be 'ours' or 'fast_align', got {self.aligner!r}")

    @classmethod
    def from_args(cls, args) -> "IbmConfig":
        return cls(
            aligner=args.aligner,
            symmetrization=args.symmetrize,
            iterations=args.iterations,
            p0=args.p0,
            tension=args.tension,
            optimize_tension=not args.no_optimize_tension,
            variational_bayes=args.variational_bayes,
            vb_alpha=args.vb_alpha,
        )


@dataclass
class BayesConfig:
    alpha: float = 2.0  # description-length prior p(l) ∝ exp(-alpha |l|)
    gamma: float = 0.95
    kappa: float = 0.1
    burn_in: int = 1000
    thin: int = 10
    samples: int = 500  # recorded samples per chain
    chains: int = 5
    seed: int = 0

    @classmethod
    def from_args(cls, args) -> "BayesConfig":
        return cls(
            alpha=args.alpha,
            gamma=args.gamma,
            kappa=args.kappa,
            burn_in=args.burn_in,
            thin=args.thin,
            samples=args.samples,
            chains=args.chains,
            seed=args.seed,
        )


@dataclass
class AlignmentsConfig:
    alignments: Any = None  # a Pharaoh file path, or per-pair [(i, j), ...] link lists
    alignments_name: str = "<alignments>"

    @classmethod
    def from_args(cls, args) -> "AlignmentsConfig":
        return cls(alignments=args.alignments)


@dataclass
class DictionaryConfig:
    dictionary: Optional[str] = None  # a TSV of word pairs or CC-CEDICT (dictionary.py)
    dictionary_format: str = "auto"  # auto, tsv, cedict
    dictionary_orientation: str = "auto"  # auto, as-is, reversed
    subword_style: str = "auto"  # auto, none, bpe, sentencepiece

    @classmethod
    def from_args(cls, args) -> "DictionaryConfig":
        return cls(
            dictionary=args.dictionary,
            dictionary_format=args.dictionary_format,
            dictionary_orientation=args.dictionary_orientation,
            subword_style=args.subword_style,
        )


class Learner:
    """Base class: ``Config`` is the dataclass of the method's options, ``score_doc`` says what a score is."""

    name: ClassVar[str]
    Config: ClassVar[Type]
    score_doc: ClassVar[str]

    def __init__(self, config=None):
        self.config = self.Config() if config is None else config
        if not isinstance(self.config, self.Config):
            raise TypeError(f"method {self.name!r} takes a {self.Config.__name__}, got {type(self.config).__name__}")

    @property
    def needs_cooccurrence(self) -> bool:
        return True

    def learn(
        self, corpus: EncodedCorpus, cooc: Optional[Cooccurrence], *, min_count: int, threads: int, progress: bool
    ) -> LearnedScores:
        raise NotImplementedError


class SimpleLearner(Learner):
    """Akyurek & Andreas (2021), section 4.2, eqs. 15-20."""

    name, Config = "simple", SimpleConfig
    score_doc = "score = #(v,w), sentence-level co-occurrence count, kept where C3 holds; L = softmax(score/tau)"

    def learn(self, corpus, cooc, *, min_count, threads, progress):
        from .simple import simple_scores

        scores, stats = simple_scores(cooc, self.config.epsilon)
        return LearnedScores(scores, scores, dict(epsilon=self.config.epsilon), dict(stats))  # score = #(v, w)


class PmiLearner(Learner):
    """Eq. 13: shifted pointwise mutual information."""

    name, Config = "pmi", PmiConfig
    score_doc = (
        "score = pmi(v;w) + log #(v) = log(|D| #(v,w) / #(w)) (a per-row shift of eq. 13); L = softmax(score/tau)"
    )

    def learn(self, corpus, cooc, *, min_count, threads, progress):
        from .pmi import pmi_scores

        scores, stats = pmi_scores(cooc)
        return LearnedScores(scores, cooc.counts, {}, dict(stats))


class BayesLearner(Learner):
    """Frank et al. (2007), eq. 14, Metropolis-Hastings."""

    name, Config = "bayes", BayesConfig
    score_doc = "score = posterior probability that (v,w) is in the lexicon; L = softmax(score/tau)"

    def learn(self, corpus, cooc, *, min_count, threads, progress):
        from .bayes import bayes_scores

        c = self.config
        scores, stats = bayes_scores(
            corpus,
            cooc,
            alpha=c.alpha,
            gamma=c.gamma,
            kappa=c.kappa,
            burn_in=c.burn_in,
            thin=c.thin,
            samples=c.samples,
            chains=c.chains,
            seed=c.seed,
            min_count=min_count,
            threads=threads,
            progress=progress,
        )
        params = dict(
            alpha=c.alpha,
            gamma=c.gamma,
            kappa=c.kappa,
            burn_in=c.burn_in,
            thin=c.thin,
            samples_per_chain=c.samples,
            chains=c.chains,
            seed=c.seed,
        )
        return LearnedScores(scores, None, params, dict(stats))  # candidates were restricted to #(v, w) >= min_count


class IbmLearner(Learner):
    """fast_align's Model 2 / Model 1 in both directions, symmetrised; score = link counts (eq. 12)."""

    Config = IbmConfig
    model: ClassVar[int]
    score_doc = "score = number of symmetrised links between v and w (eq. 12); L = softmax(score/tau)"

    @property
    def needs_cooccurrence(self) -> bool:
        return self.config.aligner == "ours"

    def learn(self, corpus, cooc, *, min_count, threads, progress):
        c, model = self.config, self.model
        params: Dict[str, object] = dict(
            model=model,
            aligner=c.aligner,
            symmetrization=c.symmetrization,
            iterations=c.iterations,
            p0=c.p0,
            variational_bayes=c.variational_bayes,
        )
        if model == 2:
            params.update(initial_tension=c.tension, optimize_tension=c.optimize_tension)
        if c.variational_bayes:
            params.update(vb_alpha=c.vb_alpha)
        if c.aligner == "ours":
            from .ibm import align_corpus

            run = align_corpus(
                corpus,
                model=model,
                symmetrization=c.symmetrization,
                iterations=c.iterations,
                p0=c.p0,
                tension=c.tension,
                optimize_tension=c.optimize_tension,
                variational_bayes=c.variational_bayes,
                alpha=c.vb_alpha,
                threads=threads,
                structure=cooc.counts,
                progress=progress,
            )
            links, stats = run.links, dict(run.stats)
        else:
            from .fast_align import fast_align_links

            if c.symmetrization != "intersect":
                params["symmetrization"] = "fast_align's own (systran-align returns only symmetrised links)"
            links = fast_align_links(
                corpus,
                model=model,
                iterations=c.iterations,
                p0=c.p0,
                tension=c.tension,
                optimize_tension=c.optimize_tension,
                variational_bayes=c.variational_bayes,
                alpha=c.vb_alpha,
                progress=progress,
            )
            stats = dict(links=len(links))
        scores = link_counts(corpus, links.sent, links.src, links.tgt).astype("float64")
        return LearnedScores(scores, scores, params, stats, links)


class Ibm1Learner(IbmLearner):
    name, model = "ibm1", 1


class Ibm2Learner(IbmLearner):
    name, model = "ibm2", 2


class AlignmentsLearner(Learner):
    """Eq. 12 from a given Pharaoh alignment (fast_align, eflomal, awesome-align, ...)."""

    name, Config = "alignments", AlignmentsConfig
    score_doc = "score = number of given links between v and w (eq. 12); L = softmax(score/tau)"

    @property
    def needs_cooccurrence(self) -> bool:
        return False

    def learn(self, corpus, cooc, *, min_count, threads, progress):
        from .alignments import links_from_pharaoh, read_pharaoh

        alignments, name = self.config.alignments, self.config.alignments_name
        if alignments is None:
            raise ValueError("method 'alignments' needs alignments= (a Pharaoh file or per-pair link lists)")
        if isinstance(alignments, (str, os.PathLike)):
            name = str(alignments)
            alignments = read_pharaoh(name)
        links = links_from_pharaoh(alignments, corpus, name)
        scores = link_counts(corpus, links.sent, links.src, links.tgt).astype("float64")
        return LearnedScores(scores, scores, dict(alignments=name), dict(links=len(links)))


class DictionaryLearner(Learner):
    """A bilingual dictionary mapped onto the corpus' tokens (dictionary.py): nothing is learned from the pairs."""

    name, Config = "dictionary", DictionaryConfig
    score_doc = "score = the dictionary's weight (default 1), summed over its entries that map onto (v,w)"

    @property
    def needs_cooccurrence(self) -> bool:
        return False

    def learn(self, corpus, cooc, *, min_count, threads, progress):
        import numpy as np

        from .dictionary import TokenMapper, dictionary_scores, orient, read_dictionary

        c = self.config
        if not c.dictionary:
            raise ValueError("method 'dictionary' needs a dictionary file (--dictionary FILE)")
        sv, tv = corpus.src.vocab, corpus.tgt.vocab
        pairs, read = read_dictionary(c.dictionary, c.dictionary_format)
        pairs, oriented = orient(pairs, sv, tv, c.dictionary_orientation)
        scores, mapped = dictionary_scores(pairs, TokenMapper(sv, c.subword_style), TokenMapper(tv, c.subword_style))
        s_id, t_id = {w: i for i, w in enumerate(sv)}, {w: i for i, w in enumerate(tv)}
        keys = list(scores)
        matrix = sp.csr_matrix(
            (
                np.array([scores[k] for k in keys], dtype=np.float64),
                (np.array([s_id[s] for s, _ in keys], dtype=np.int64), np.array([t_id[t] for _, t in keys])),
            ),
            shape=(len(sv), len(tv)),
        )
        params = dict(dictionary=c.dictionary, format=read.pop("format"), orientation=oriented.pop("orientation"))
        return LearnedScores(matrix, None, params, {**read, **oriented, **mapped})


LEARNERS: Dict[str, Type[Learner]] = {
    cls.name: cls
    for cls in (
        SimpleLearner,
        PmiLearner,
        Ibm2Learner,
        Ibm1Learner,
        BayesLearner,
        AlignmentsLearner,
        DictionaryLearner,
    )
}
METHODS = tuple(LEARNERS)


def learner_for(method: str, config=None, **options) -> Learner:
    """The learner of ``method``, configured by ``config`` or by keyword options. Options of other methods are
    accepted and ignored (one call can serve several methods); an option no method has is an error."""
    if method not in LEARNERS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    cls = LEARNERS[method]
    known = {f.name for learner in LEARNERS.values() for f in fields(learner.Config)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(
            f"unknown lexicon option(s) {', '.join(unknown)}; the methods' options are {', '.join(sorted(known))}"
        )
    if config is not None:
        if options:
            raise TypeError("give the options in config= or as keywords, not both")
        return cls(config)
    own = {f.name for f in fields(cls.Config)}
    return cls(cls.Config(**{k: v for k, v in options.items() if k in own}))
