"""Text-only analyses (no fairseq or torch import).

- ``subword_density``: shared-subword density of sentence pairs and the high/low split of a test set.
- ``ngram_statistics``: the n-gram dictionary of a training text, compositional degree, novel n-grams.
- ``compositional_selection``: OOV filter, degree pool and seeded uncertainty sample of candidate sentences.
- ``bleu_by_degree``: BLEU of two systems in buckets of compositional degree (table and plot).
"""
