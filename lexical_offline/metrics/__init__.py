"""Evaluation helpers (no fairseq import): reading fairseq-generate output and the papers' metrics.

sacrebleu is imported only when BLEU or chrF is computed. Definitions: docs/metrics.md.
"""

from .bleu import BLEU_TOKENIZERS, corpus_bleu, corpus_chrf
from .categories import COGS_TABLE3, accuracy_by_category, cogs_table3, read_categories
from .generate_output import GenerateOutput, GenerateOutputError, parse_generate_output, read_generate_output
from .one_shot import one_shot_subset, one_shot_words, read_test_sources, read_train_sources, word_counts
from .report import METRICS, format_table, parse_metrics, score
from .scores import THRUSH_OVERLAPS, exact_match, sentence_token_scores, thrush_scores
from .inputs import ScoringInputError, read_lines

__all__ = [
    "BLEU_TOKENIZERS",
    "COGS_TABLE3",
    "GenerateOutput",
    "GenerateOutputError",
    "METRICS",
    "ScoringInputError",
    "THRUSH_OVERLAPS",
    "accuracy_by_category",
    "cogs_table3",
    "corpus_bleu",
    "corpus_chrf",
    "exact_match",
    "format_table",
    "one_shot_subset",
    "one_shot_words",
    "parse_generate_output",
    "parse_metrics",
    "read_categories",
    "read_generate_output",
    "read_lines",
    "read_test_sources",
    "read_train_sources",
    "score",
    "sentence_token_scores",
    "thrush_scores",
    "word_counts",
]
