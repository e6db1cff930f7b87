"""The R-Dangle per-prefix reference loop: `rdangle_transformer` teacher forcing written as a plain loop over target
positions. The stacked training of ``RDangleDecoder`` must give its losses and gradients (tests/plugin/test_rdangle.py);
tools/benchmarking.py times it against the stacked training (``tools/bench.py rdangle``)."""

import torch


def rdangle_per_prefix_forward(model, src_tokens, src_lengths, prev_output_tokens):
    """Reference teacher forcing of an `rdangle_transformer` model: a plain loop over target positions.

    For each decoder position t (0-based) with re-encoding point s = (t // o) o: the adaptive encoder reads
    [x ; y_0..y_s] (eq. 11 / 15), the decoder runs over the whole prefix y_0..y_t with those keys and an empty
    memory (eqs. 12-13 / 16, 20 collapse to this under teacher forcing), and position t's output is kept (its
    last layer queries position t alone, as the stacked rows query their own segment). One adaptive encoding and
    one decoder pass per target position: the naive per-prefix loop the stacked training of ``RDangleDecoder``
    replaces (same modules, same parameters; nothing of ``StackPlan`` is used).
    """
    dec = model.decoder
    encoder_out = model.encoder(src_tokens, src_lengths=src_lengths)
    x_in = dec.embed(prev_output_tokens)
    pad = prev_output_tokens.eq(dec.padding_idx)
    features, attns, contexts = [], [], []
    for t in range(prev_output_tokens.size(1)):
        s = (t // dec.interval) * dec.interval
        key_states = dec.adaptive_keys(encoder_out, x_in[:, : s + 1], pad[:, : s + 1])
        feats, attn = dec.decode_prefix(encoder_out, x_in[:, : t + 1], key_states, last_only=True)
        features.append(feats[:, -1])
        attns.append(attn[:, -1])
        contexts.append(dec.context(attn[:, -1:], dec.value_states(encoder_out, key_states)).squeeze(1))
    return dec.output(
        torch.stack(features, 1), torch.stack(attns, 1), torch.stack(contexts, 1), x_in, encoder_out["src_tokens"][0]
    )


class PerPrefixLoop(torch.nn.Module):
    """An `rdangle_transformer` model trained through ``rdangle_per_prefix_forward``."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        return rdangle_per_prefix_forward(self.model, src_tokens, src_lengths, prev_output_tokens)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return self.model.get_normalized_probs(net_output, log_probs, sample)

    def get_targets(self, sample, net_output):
        return sample["target"]
