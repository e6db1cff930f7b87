"""Corpus BLEU and chrF with sacrebleu (imported only when called; one reference per sentence).

BLEU runs with ``force=True``: fairseq-generate's H lines are tokenised on purpose, and sacrebleu's "forgot to
detokenise" warning would only be noise. Scores are on sacrebleu's 0-100 scale.
"""

from __future__ import annotations

from typing import Dict, Sequence

# the tokenisers offered by tools/score.py (sacrebleu names); others need extra packages
BLEU_TOKENIZERS = ("none", "13a", "zh", "char")


def _sacrebleu_metrics():
    try:
        from sacrebleu.metrics import BLEU, CHRF
    except ImportError as e:  # pragma: no cover - sacrebleu is a requirement of the environment
        raise ImportError(f"BLEU and chrF need sacrebleu, which does not import here ({e})") from None
    return BLEU, CHRF


def _check(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise ValueError("no sentences to score")


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "none") -> Dict[str, object]:
    """{"score": corpus BLEU (0-100), "signature": sacrebleu's reproducibility signature}.

    Default sacrebleu BLEU otherwise: 4-gram, uniform weights, brevity penalty, ``exp`` smoothing, case-sensitive.
    """
    if tokenize not in BLEU_TOKENIZERS:
        raise ValueError(f"unknown BLEU tokenizer {tokenize!r} (choose from {', '.join(BLEU_TOKENIZERS)})")
    _check(hypotheses, references)
    BLEU, _ = _sacrebleu_metrics()
    metric = BLEU(tokenize=tokenize, force=True)
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return {"score": float(score.score), "signature": str(metric.get_signature())}


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> Dict[str, object]:
    """{"score": corpus chrF (0-100), "signature": ...}: sacrebleu's default chrF (character 6-grams, beta = 2,
    whitespace ignored); it does not tokenise, so ``--tokenize`` does not apply."""
    _check(hypotheses, references)
    _, CHRF = _sacrebleu_metrics()
    metric = CHRF()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return {"score": float(score.score), "signature": str(metric.get_signature())}
