"""Analysis helpers behind the plotting and test-set tools.

- ``gates``: attention and p_gate of a trained model on one sentence (``tools/plot_gates.py``); needs fairseq.
- ``subword_density``: shared-subword density of sentence pairs and the high/low split of a test set
  (``tools/split_by_overlap.py``); plain Python, no fairseq or torch import.
- ``compositional``: compositional degree, OOV filter and novel n-grams of a candidate pool, BLEU by degree
  (``tools/select_compositional.py``, ``tools/plot_by_degree.py``); no fairseq or torch import.
- ``uncertainty``: token-level reverse mutual information of an ensemble of checkpoints; needs fairseq.
- ``checkpoints``: loading checkpoints for the tools above and below, with errors a user can act on.
- ``damage``: re-initialise named module groups of a checkpoint (``tools/damage.py``); needs fairseq.

The submodules are not imported here, so that importing one does not pull in another's dependencies.
"""
