"""Torch building blocks shared by the models; nothing here registers with fairseq.

Shapes, in the docstrings and comments of modules/, models/, criterions/ and sequence_generator.py, are written
``B x T x V``: dimension letters, outermost first, joined by `` x ``. The letters:

    B         batch: sentences; in beam search the rows, sentences x beam (fairseq's bsz * beam_size)
    S         source length (padding included)
    T         target length: the decoder positions of the call (1 in an incremental step)
    V         target vocabulary size (the paper's |V_y|)
    V_x       source vocabulary size (|V_x|)
    C         feature size: a Transformer's model dimension, an LSTM's hidden size. Other sizes of the same model:
              C_x the source states' (an LSTM encoder's output: 2C when bidirectional), C_out the features that
              p_write's projection reads (--decoder-out-embed-dim, --decoder-output-dim), E the embeddings'
    C_1, C_2  the input and output sizes of a linear map
    H         attention heads
    d         head size, C / H
    N         stacked layers (an LSTM's final states: N x B x C)
    K         beam size
    k         targets per lexicon row (the table's width)
    M         lexicon slots of a sentence, S*k (eq. 9's sum as a scatter-add)
    L_q, L_k  query and key lengths of an attention (T, S or S + T)
    R         R-Dangle's stacked rows, one per (re-encoding segment, sentence)

In replicas.py, masked_lstm.py, step_product.py, lstm_loop.py, lex_lstm.py, cuda_graph_step.py and the replicas'
optimizer and task, R is the replicas of `--replica-seeds` (their stacked weights R x C_2 x C_1) and RB their batch's
rows, replica-major.
In relative_attention.py and dangle.py K is also the clipping distance of relative positions (Shaw et al.), a
number, never a dimension.
"""

from .lexical_head import LexicalTranslationHead
from .lexical_kernels import lexical_mixture_log_probs

__all__ = ["LexicalTranslationHead", "lexical_mixture_log_probs"]
