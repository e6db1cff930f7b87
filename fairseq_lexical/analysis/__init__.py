"""Analysis helpers behind the plotting and test-set tools.

- ``gates``: attention and p_gate of a trained model on one sentence (``tools/plot_gates.py``); needs fairseq.
- ``subword_density``: shared-subword density of sentence pairs and the high/low split of a test set
  (``tools/split_by_overlap.py``); plain Python, no fairseq or torch import.

The submodules are not imported here, so that importing one does not pull in the other's dependencies.
"""
