"""The `lex_lstm` decoder as it was before it had a loop of its own (up to commit 0466cec): fairseq's LSTMDecoder
with its per-step loop, an attention layer that records h_t and alpha_t, and, for the authors' combined output, a
first cell that keeps its step input. Kept here as the oracle of tests/plugin/test_lstm_loop.py: the new loop must give
its outputs and gradients, and take its checkpoints. Only the decoder is rebuilt; the rest of the model is shared."""

import torch
from torch import nn

from fairseq.models.lstm import AttentionLayer, LSTMDecoder

from fairseq_lexical.models.lex_lstm import LexLSTMDecoder
from fairseq_lexical.models.lexical_decoder import LexicalDecoder
from fairseq_lexical.modules.lexical_head import fp32_linear, fp32_or_wider
from fairseq_lexical.modules.lstm_loop import O_T_BOUND
from fairseq_lexical.modules.precision import Float32Linear


def fp32_attention(source_hids, query, encoder_padding_mask):
    scores = fp32_or_wider((source_hids * query.unsqueeze(0)).sum(dim=2))
    if encoder_padding_mask is not None:
        scores.masked_fill_(encoder_padding_mask, float("-inf"))
    return torch.softmax(scores, dim=0)


class RecordingAttentionLayer(AttentionLayer):
    def start_recording(self):
        self.queries, self.weights = [], []

    def forward(self, input, source_hids, encoder_padding_mask):
        attn = fp32_attention(source_hids, self.input_proj(input), encoder_padding_mask)
        context = (attn.type_as(source_hids).unsqueeze(2) * source_hids).sum(dim=0)
        out = torch.tanh(self.output_proj(torch.cat((context, input), dim=1)))
        self.queries.append(input)
        self.weights.append(attn)
        return out, attn


class StepInputRecordingLSTMCell(nn.LSTMCell):
    def forward(self, input, hx):
        self.step_input = input
        with torch.autocast(input.device.type, enabled=False):
            w = fp32_or_wider
            h, c = torch.lstm_cell(
                w(input),
                tuple(w(s) for s in hx),
                w(self.weight_ih),
                w(self.weight_hh),
                w(self.bias_ih),
                w(self.bias_hh),
            )
        return h.to(self.weight_ih.dtype), c.to(self.weight_ih.dtype)


class CombinedOutputAttention(RecordingAttentionLayer):
    def __init__(self, hidden_dim, source_dim, step_input_cell, output_dim, write_dropout):
        nn.Module.__init__(self)
        self.input_proj = nn.Linear(hidden_dim, source_dim, bias=True)
        self.output_proj = Float32Linear(step_input_cell.input_size + hidden_dim + source_dim, output_dim, bias=True)
        self.write_dropout = nn.Dropout(write_dropout)
        self._cell = (step_input_cell,)
        self.start_recording()

    def forward(self, input, source_hids, encoder_padding_mask):
        attn = fp32_attention(source_hids, self.input_proj(input), encoder_padding_mask)
        context = (attn.type_as(source_hids).unsqueeze(2) * source_hids).sum(dim=0)
        out = self.write_dropout(self.output_proj(torch.cat((self._cell[0].step_input, input, context), dim=1)))
        out = out.clamp(-O_T_BOUND, O_T_BOUND)
        self.queries.append(input)
        self.weights.append(attn)
        return out, attn


class ReferenceLSTMDecoder(LexicalDecoder, LSTMDecoder):
    """The previous LexLSTMDecoder: fairseq's loop, recording layers, the head read from their records."""

    GATE_FEATURES = LexLSTMDecoder.GATE_FEATURES
    LOG_PROBS_WITHOUT_HEAD = True
    published_features = LexLSTMDecoder.published_features

    def gate_input(self, features, transform=None):
        if self.combined_output:
            return super().gate_input(features, lambda name, x: x if name == "output" else self.write_dropout(x))
        return self.write_dropout(super().gate_input(features))

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, src_lengths=None):
        self.attention.start_recording()
        x, _ = LSTMDecoder.extract_features(self, prev_output_tokens, encoder_out[:4], incremental_state)
        queries = torch.stack(self.attention.queries, dim=1)
        attn = torch.stack(self.attention.weights, dim=1).transpose(0, 2)
        self.attention.start_recording()
        write_logits = self.output_layer(x if self.combined_output else self.write_dropout(x))
        features = self.published_features(prev_output_tokens, incremental_state, encoder_out, queries, attn, x)
        src_tokens = encoder_out[4] if self.lexical_head is not None else None
        return self.lexical_output(write_logits, features, attn, src_tokens, {})

    def output_layer(self, x):
        if not self.combined_output:
            return LSTMDecoder.output_layer(self, x)
        if self.share_input_output_embed:
            return fp32_linear(x, self.embed_tokens.weight)
        return fp32_linear(x, self.fc_out.weight, self.fc_out.bias)


def reference_decoder(new: LexLSTMDecoder) -> ReferenceLSTMDecoder:
    """The previous implementation of ``new`` (same sizes, options and head; weights copied by name)."""
    attention = new.attention
    embed = new.embed_tokens
    ref = ReferenceLSTMDecoder(
        new.dictionary,
        embed_dim=embed.embedding_dim,
        hidden_size=new.hidden_size,
        out_embed_dim=new.additional_fc.out_features if hasattr(new, "additional_fc") else new.hidden_size,
        num_layers=new.num_layers,
        dropout_in=new.dropout_in_module.p,
        dropout_out=new.dropout_out_module.p,
        attention=True,
        encoder_output_units=new.encoder_output_units,
        pretrained_embed=None,
        share_input_output_embed=new.share_input_output_embed,
        max_target_positions=new.max_target_positions,
    )
    ref.write_dropout = nn.Dropout(new.write_dropout.p)
    ref.combined_output = new.combined_output
    if new.combined_output:
        cell = ref.layers[0]
        ref.layers[0] = StepInputRecordingLSTMCell(cell.input_size, cell.hidden_size)
        ref.attention = CombinedOutputAttention(
            new.hidden_size, new.encoder_output_units, ref.layers[0], new.hidden_size, new.write_dropout.p
        )
        if hasattr(ref, "additional_fc"):
            fc = ref.additional_fc
            ref.additional_fc = Float32Linear(fc.in_features, fc.out_features)
    else:
        ref.attention = RecordingAttentionLayer(new.hidden_size, new.encoder_output_units, new.hidden_size, bias=False)
    ref.gate_feature_names = new.gate_feature_names
    ref.excluded_outputs = new.excluded_outputs
    ref.lexical_head = new.lexical_head
    assert attention is new.attention
    ref.load_state_dict(new.state_dict(), strict=True)
    return ref.to(next(new.parameters()).dtype)
