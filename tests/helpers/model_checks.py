"""Checks every model of the plugin must pass; the model test modules call them.

The checks take a ``device`` (conftest's fixture): they move the model there for the check and back to where it was
afterwards, so that a model shared by a module's tests stays on the CPU for the tests that follow."""

import contextlib

import torch


def on_device(sample, device):
    """A collated sample (nested dicts of tensors) with every tensor on ``device``."""
    from fairseq.utils import apply_to_sample

    return apply_to_sample(lambda t: t.to(device), sample)


@contextlib.contextmanager
def moved_to(model, device):
    """``model`` on ``device`` inside the block, back on its own device after it."""
    home = next(model.parameters()).device
    model.to(device)
    try:
        yield model
    finally:
        model.to(home)


def toy_batch(task, pairs, device="cpu"):
    """A left-padded source batch and right-padded target batch from string pairs, as fairseq collates them."""
    from fairseq.data import LanguagePairDataset

    sd, td = task.source_dictionary, task.target_dictionary
    src = [sd.encode_line(s, add_if_not_exist=False).long() for s, _ in pairs]
    tgt = [td.encode_line(t, add_if_not_exist=False).long() for _, t in pairs]
    ds = LanguagePairDataset(src, [len(x) for x in src], sd, tgt, [len(x) for x in tgt], td)
    return on_device(ds.collater([ds[i] for i in range(len(pairs))]), device)


def trained_parameters(model, task, pairs, epoch=None):
    """Names of the parameters that get a gradient from the criterion's loss on ``pairs`` in ``epoch`` (None: no
    epoch told to the task, as in-process use)."""
    from fairseq_lexical.criterions.lexical_cross_entropy import LexicalCrossEntropyCriterion

    if epoch is not None:
        task.begin_epoch(epoch, model)  # what fairseq's trainer calls
    model.train()
    model.zero_grad(set_to_none=True)
    loss, _, _ = LexicalCrossEntropyCriterion(task)(model, toy_batch(task, pairs))
    loss.backward()
    return {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}


def assert_incremental_matches_teacher_forcing(model, sample, atol=1e-5, device="cpu"):
    model.eval()
    sample = on_device(sample, device)
    net = sample["net_input"]
    with moved_to(model, device), torch.no_grad():
        forced = model.get_normalized_probs(model(**net), log_probs=True)
        encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        state = {}
        prev = net["prev_output_tokens"]
        # Positions past a target's end (padding) are not compared: teacher forcing lets them attend to other
        # padding, which decoders (fairseq's Transformer included) need not score like a step-by-step decode.
        real = sample["target"].ne(model.decoder.dictionary.pad())
        for t in range(prev.size(1)):
            step = model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
            step_lp = model.get_normalized_probs(step, log_probs=True)[:, -1]
            rows = real[:, t]
            torch.testing.assert_close(step_lp[rows], forced[rows, t], atol=atol, rtol=0)


def assert_beam_scores_match_teacher_forcing(model, task, sample, beam=5, atol=1e-5, device="cpu"):
    """Beam search (with its reordering of cached states) scores each hypothesis as teacher forcing does: fairseq's
    search and the keep-best one (which also drops finished sentences and carries a greedy lane)."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_lexical.sequence_generator import KeepBestSequenceGenerator

    for generator in (SequenceGenerator, KeepBestSequenceGenerator):
        _assert_beam_scores_match_teacher_forcing(generator, model, task, sample, beam, atol, device)


def _assert_beam_scores_match_teacher_forcing(generator, model, task, sample, beam, atol, device):
    model.eval()
    sample = on_device(sample, device)
    net = sample["net_input"]
    with moved_to(model, device), torch.no_grad():
        gen = generator([model], task.target_dictionary, beam_size=beam, max_len_b=20)
        hypos = gen.forward(sample)
        checked = 0
        for i, nbest in enumerate(hypos):
            for hypo in nbest:
                tokens = hypo["tokens"].unsqueeze(0)
                prev = torch.cat([tokens.new_full((1, 1), task.target_dictionary.eos()), tokens[:, :-1]], 1)
                src = net["src_tokens"][i : i + 1]
                keep = src.ne(task.source_dictionary.pad())
                src = src[keep].unsqueeze(0)
                lengths = torch.tensor([src.size(1)], device=src.device)
                lp = model.get_normalized_probs(model(src, lengths, prev), log_probs=True)
                forced = lp[0].gather(-1, tokens[0].unsqueeze(-1)).squeeze(-1)
                torch.testing.assert_close(hypo["positional_scores"], forced, atol=atol, rtol=0)
                checked += 1
    assert checked == beam * len(hypos)


def assert_padding_does_not_change_scores(model, task, pairs, atol=1e-5, device="cpu"):
    """Each sentence scores the same alone as inside a padded batch (catches misaligned source positions)."""
    model.eval()
    batch = toy_batch(task, pairs, device)
    with moved_to(model, device), torch.no_grad():
        together = model.get_normalized_probs(model(**batch["net_input"]), log_probs=True)
        for row, sample_id in enumerate(batch["id"].tolist()):
            alone = toy_batch(task, [pairs[sample_id]], device)
            alone = model.get_normalized_probs(model(**alone["net_input"]), log_probs=True)
            torch.testing.assert_close(together[row, : alone.size(1)], alone[0], atol=atol, rtol=0)
