"""Analyses of trained models (they need fairseq; the text-only ones are in ``lexical_offline.analysis``).

- ``gates``: attention and p_gate of a trained model on one sentence (``fairseq-lexical-plot-gates``).
- ``uncertainty``: token-level reverse mutual information of an ensemble of checkpoints.
- ``checkpoints``: loading checkpoints for the tools above and below, with errors a user can act on.
- ``damage``: re-initialise named module groups of a checkpoint (``fairseq-lexical-damage``).
- ``lexicon_unit``: the Lexicon Unit of an ``lla_lstm`` checkpoint (``fairseq-lexical-plot-lexicon --checkpoint``).

The submodules are not imported here, so that importing one does not pull in another's dependencies.
"""
