"""Text-only analyses (no fairseq or torch import).

- ``subword_density``: shared-subword density of sentence pairs and the high/low split of a test set.
- ``compositional``: compositional degree, OOV filter and novel n-grams of a candidate pool, BLEU by degree.
"""
