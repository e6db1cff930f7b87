"""Our LSTM rows against the authors' released code (ekinakyurek/lexical, ../shared/reference/ekinakyurek-lexical):
the same model, weight for weight. Their EncDec and our `lstm_plain` / `lex_lstm` with the recipes' authors'
options (docs/authors_code.md) get the same weights through an explicit map; on one padded batch of unequal lengths,
in float64 with dropout off, the teacher-forced loss as each code reduces it, every gradient and the greedy outputs
agree to rounding. Cases: LSTM, LSTM + copy (the identity lexicon), LSTM + Simple (their lexicon from an alignment
file, ours from the same file)."""

import json
import os
import sys
import types

import numpy as np
import pytest
import torch

from conftest import REPO, build_model

REFERENCE = os.path.join(os.path.dirname(REPO), "shared", "reference", "ekinakyurek-lexical")
pytestmark = pytest.mark.skipif(
    not os.path.isdir(REFERENCE), reason=f"{REFERENCE} is absent (../shared is not part of the repository)"
)

from recipes.catalogue import AUTHORS_DECODER, AUTHORS_GATE  # noqa: E402

D = 6  # embedding = hidden size, as their --dim
SOURCE = ["a1", "a2", "a3", "and", "twice"]
TARGET = ["B1", "B2", "B3"]
# a1 twice and a2 -> ..., with unequal lengths and padding on both sides
PAIRS = {
    "lstm": [("a1 twice and a2", "B1 B1 B2"), ("a3", "B3"), ("a2 and a1", "B2 B1")],
    # COGS-like: the source words are target words too, so the identity lexicon has something to copy
    "copy": [("a1 twice and a2", "a1 a1 a2"), ("a3", "B3"), ("a2 and a1", "B2 a1")],
    "simple": [("a1 twice and a2", "B1 B1 B2"), ("a3", "B3"), ("a2 and a1", "B2 B1")],
}
# an alignment file in their format ({source: {target: count}}): a3 is aligned twice, to B3 more often; 'and' and
# 'twice' have no entry (their loader sends them to <pad>, ours to <unk>: both outputs are excluded)
ALIGNMENT = {"a1": {"B1": 3}, "a2": {"B2": 2}, "a3": {"B3": 2, "B1": 1}}


@pytest.fixture(scope="module")
def authors():
    """Their modules, imported from the reference folder. main.py (for tranlate_with_alignerv2 and its flags) imports
    nltk and seaborn for evaluation and plots only: stubbed here. Their top-level module names (data, src, main,
    mutex, hlog) are removed from sys.modules again, and matplotlib's settings that main.py changes restored."""
    import matplotlib

    saved_rc = dict(matplotlib.rcParams)
    stubs = {
        "nltk": types.ModuleType("nltk"),
        "nltk.translate": types.ModuleType("nltk.translate"),
        "nltk.translate.bleu_score": types.ModuleType("nltk.translate.bleu_score"),
        "seaborn": types.ModuleType("seaborn"),
    }
    stubs["nltk.translate.bleu_score"].corpus_bleu = None
    stubs["seaborn"].set = lambda *a, **k: None
    added = [name for name in stubs if name not in sys.modules]
    sys.modules.update({name: stubs[name] for name in added})
    sys.path.insert(0, REFERENCE)
    try:
        import data as their_data
        import main as their_main
        import src as their_src
        from absl import flags

        flags.FLAGS.mark_as_parsed()  # their defaults (dropout, highdrop off, soft_align off, ...)
    finally:
        sys.path.remove(REFERENCE)
        for name in [n for n in sys.modules if n.split(".")[0] in ("data", "main", "src", "mutex", "hlog")]:
            del sys.modules[name]
        for name in added:
            del sys.modules[name]
        matplotlib.rcParams.update(saved_rc)
    return types.SimpleNamespace(
        EncDec=their_src.EncDec,
        Vocab=their_src.Vocab,
        collate=their_data.collate,
        decoder=their_src.decoder,
        aligner=their_main.tranlate_with_alignerv2,
    )


def row_map(their_vocab, our_dict, decoder_input=False):
    """our id -> their id, for the rows of embeddings and output layers. Their sentences start with <s> on both
    sides; fairseq's decoder starts from </s> (so on the decoder's input side our </s> is their <s>) and its source
    has no <s>: the batch below adds one, and on the source side our <s> is theirs."""
    m = {
        our_dict.pad(): their_vocab.pad(),
        our_dict.eos(): their_vocab.eos(),
        our_dict.bos(): their_vocab.sos(),
        our_dict.unk(): their_vocab.unk(),
    }
    if decoder_input:
        m[our_dict.eos()], m[our_dict.bos()] = their_vocab.sos(), their_vocab.eos()
    m.update({i: their_vocab[our_dict[i]] for i in range(our_dict.nspecial, len(our_dict))})
    return m


def parameter_map(theirs, source_rows, target_rows, input_rows, copy_id):
    """our parameter name -> (their tensor, rows of ours -> rows of theirs, or None: the whole tensor)."""
    dec = theirs.decoder
    out = {
        "encoder.embed_tokens.weight": (theirs.encoder.embed.weight, source_rows),
        "decoder.embed_tokens.weight": (dec.embed.weight, input_rows),
        "decoder.attention.input_proj.weight": (dec.attention_0.make_query.weight, None),  # the query W_q h_t + b
        "decoder.attention.input_proj.bias": (dec.attention_0.make_query.bias, None),
        "decoder.attention.output_proj.weight": (dec.combine.weight, None),  # o_t = W [e; o_t-1; h_t; c_t] + b
        "decoder.attention.output_proj.bias": (dec.combine.bias, None),
        "decoder.fc_out.weight": (dec.predict.weight, target_rows),
        "decoder.fc_out.bias": (dec.predict.bias, target_rows),
    }
    for layer in range(2):
        for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            out[f"encoder.lstm.{kind}_l{layer}"] = (getattr(theirs.encoder.rnn, f"{kind}_l{layer}"), None)
            out[f"decoder.layers.{layer}.{kind}"] = (getattr(dec.rnn, f"{kind}_l{layer}"), None)
    if copy_id is not None:  # the gate is p_write's <copy> word (--gate-form copy-token on o_t)
        out["decoder.lexical_head.gate.weight"] = (dec.predict.weight, {0: copy_id})
        out["decoder.lexical_head.gate.bias"] = (dec.predict.bias, {0: copy_id})
    return out


def build_both(authors, kind, tmp_path, exclude_specials=True):
    vx, vy = authors.Vocab(), authors.Vocab()
    target = TARGET + (SOURCE if kind == "copy" else [])
    for w in SOURCE:
        vx.add(w)
    for w in target:
        vy.add(w)
    torch.manual_seed(0)
    # MAXLEN: their decoder forces </s> at step MAXLEN - 1 (main.py: the longest target + 1); beyond these batches
    theirs = (
        authors.EncDec(
            vx, vy, D, D, copy=kind != "lstm", n_layers=2, dropout=0.4, bidirectional=False, MAXLEN=100, source_att=True
        )
        .double()
        .eval()
    )
    extra = []
    if kind == "copy":
        extra = ["--lexicon", "identity"]
        proj = np.zeros((len(vx), len(vy)), dtype=np.float32)  # main.py's copy_translation_cogs
        for i, word in enumerate(vx._contents):
            if word in vy:
                proj[i, vy[word]] = 1.0
        theirs.decoder.copy_translation = np.argmax(proj, axis=1)
    elif kind == "simple":
        path = tmp_path / "simple.align.json"
        path.write_text(json.dumps(ALIGNMENT))
        theirs.decoder.copy_translation = authors.aligner(str(path), vx, vy)
        lexicon = tmp_path / "simple.tsv"  # the same alignments, as our lexicon file
        lexicon.write_text("".join(f"{s}\t{t}\t{n}\n" for s, row in ALIGNMENT.items() for t, n in row.items()))
        extra = ["--lexicon", str(lexicon), "--lexicon-top-k", "1"]
    for side, words in (("src", SOURCE), ("tgt", target)):
        (tmp_path / f"dict.{side}.txt").write_text("".join(f"{w} 1\n" for w in words))
    options = [*AUTHORS_DECODER, *(AUTHORS_GATE if kind != "lstm" else ())]
    sizes = [
        a
        for name in (
            "encoder-embed-dim",
            "decoder-embed-dim",
            "encoder-hidden-size",
            "decoder-hidden-size",
            "decoder-out-embed-dim",
        )
        for a in (f"--{name}", str(D))
    ]
    ours, task, args = build_model(
        tmp_path,
        "--arch",
        "lstm_plain" if kind == "lstm" else "lex_lstm",
        *sizes,
        *options,
        *(["--exclude-special-outputs"] if exclude_specials else []),
        *extra,
        "--criterion",
        "lexical_cross_entropy",
        "--sentence-avg",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
    )
    ours = ours.double().eval()
    ours.criterion = task.build_criterion(args)  # the recipes' loss: summed over tokens, averaged over sentences
    sd, td = task.source_dictionary, task.target_dictionary
    mapping = parameter_map(
        theirs,
        row_map(vx, sd),
        row_map(vy, td),
        row_map(vy, td, decoder_input=True),
        vy.copy() if kind != "lstm" else None,
    )
    assert sorted(mapping) == sorted(dict(ours.named_parameters())), "every parameter of ours has a counterpart"
    copy_weights(ours, mapping)
    return theirs, ours, (vx, vy), (sd, td), mapping


def copy_weights(ours, mapping):
    params = dict(ours.named_parameters())
    with torch.no_grad():
        for name, (value, rows) in mapping.items():
            if rows is None:
                params[name].copy_(value)
            else:
                for o, t in rows.items():
                    params[name][o] = value[t]


def batches(kind, vocabs, dicts, authors):
    """Their batch (collate: sorted by source length, <s> ... </s> on both sides, time-major) and ours in the same
    order (left-padded source with the <s> theirs has, prev_output_tokens from </s>, right-padded target)."""
    (vx, vy), (sd, td) = vocabs, dicts
    pairs = PAIRS[kind]
    inp, out, lens = authors.collate(
        [
            ([vx.sos()] + vx.encode(s.split()) + [vx.eos()], [vy.sos()] + vy.encode(t.split()) + [vy.eos()])
            for s, t in pairs
        ]
    )
    order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0].split()))  # collate's order (stable)
    src_len = max(len(s.split()) for s, _ in pairs) + 2
    tgt_len = max(len(t.split()) for _, t in pairs) + 1
    src = torch.full((len(pairs), src_len), sd.pad())
    prev = torch.full((len(pairs), tgt_len), td.pad())
    tgt = torch.full((len(pairs), tgt_len), td.pad())
    for b, i in enumerate(order):
        s, t = pairs[i]
        ids = [sd.bos()] + [sd.index(w) for w in s.split()] + [sd.eos()]
        src[b, src_len - len(ids) :] = torch.tensor(ids)
        y = [td.index(w) for w in t.split()] + [td.eos()]
        tgt[b, : len(y)] = torch.tensor(y)
        prev[b, : len(y)] = torch.tensor([td.eos()] + y[:-1])
    lengths = src.ne(sd.pad()).sum(1)
    return (inp, out, lens), (src, lengths, prev, tgt)


def our_loss(ours, src, lengths, prev, tgt, pad):
    """lexical_cross_entropy with --sentence-avg (the recipes'), divided by its sample size as fairseq's trainer
    does: summed over target tokens, averaged over sentences."""
    sample = {
        "net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev},
        "target": tgt,
        "ntokens": int(tgt.ne(pad).sum()),
        "nsentences": src.size(0),
        "id": torch.arange(src.size(0)),
    }
    loss, sample_size, _ = ours.criterion(ours, sample)
    return loss / sample_size


@pytest.fixture(params=["lstm", "copy", "simple"])
def pair(request, authors, tmp_path, monkeypatch):
    # their mixture adds 1e-7 to every copy probability (decoder.py's EPS); float64 compares the functions without it
    monkeypatch.setattr(authors.decoder, "EPS", 1e-300)
    theirs, ours, vocabs, dicts, mapping = build_both(authors, request.param, tmp_path)
    return request.param, theirs, ours, vocabs, dicts, mapping


def test_loss_and_every_gradient_equal_theirs(pair, authors):
    kind, theirs, ours, vocabs, dicts, mapping = pair
    (inp, out, lens), (src, lengths, prev, tgt) = batches(kind, vocabs, dicts, authors)
    their_loss = theirs(inp, out, lens=lens)  # sum over tokens / batch size, their CrossEntropyLoss
    loss = our_loss(ours, src, lengths, prev, tgt, dicts[1].pad())
    assert abs(loss.item() - their_loss.item()) < 1e-12 * max(1.0, abs(their_loss.item()))
    their_loss.backward()
    loss.backward()
    params = dict(ours.named_parameters())
    for name, (value, rows) in mapping.items():
        grad = params[name].grad
        if rows is None:
            torch.testing.assert_close(grad, value.grad, rtol=1e-9, atol=1e-12, msg=name)
        else:
            for o, t in rows.items():
                torch.testing.assert_close(grad[o], value.grad[t], rtol=1e-9, atol=1e-12, msg=f"{name}[{o}]")


def test_without_the_option_the_specials_keep_their_share(authors, tmp_path, monkeypatch):
    """Without --exclude-special-outputs our distribution also covers <s>, <pad> and <unk>: per target token, theirs
    is ours divided by 1 - m_t, m_t our mass on those three, so the losses differ by -sum_t log(1 - m_t) / B."""
    theirs, ours, vocabs, dicts, _ = build_both(authors, "lstm", tmp_path, exclude_specials=False)
    (inp, out, lens), (src, lengths, prev, tgt) = batches("lstm", vocabs, dicts, authors)
    td = dicts[1]
    with torch.no_grad():
        lprobs = ours.get_normalized_probs(ours(src, lengths, prev), log_probs=True)
        mass = lprobs[..., [td.bos(), td.pad(), td.unk()]].exp().sum(-1)
        shift = -torch.log1p(-mass).masked_fill(tgt.eq(td.pad()), 0.0).sum() / src.size(0)
        loss = our_loss(ours, src, lengths, prev, tgt, td.pad())
        assert shift > 1e-3  # a difference worth an option
        assert abs(loss.item() - shift.item() - theirs(inp, out, lens=lens).item()) < 1e-12


def greedy(ours, src, lengths, eos, steps):
    """Our greedy decoding, step by step with the incremental state, as fairseq-generate --beam 1 runs it."""
    encoder_out = ours.encoder(src, src_lengths=lengths)
    state, tokens = {}, torch.full((src.size(0), 1), eos)
    for _ in range(steps):
        lprobs = ours.get_normalized_probs(ours.decoder(tokens, encoder_out, incremental_state=state), True)
        tokens = torch.cat([tokens, lprobs[:, -1].argmax(-1, keepdim=True)], dim=1)
    return [row[1:].tolist() for row in tokens]


def trimmed(row, eos):
    return row[: row.index(eos) + 1] if eos in row else row


SEED, SCALE = 0, 0.5


def test_greedy_outputs_equal_theirs(pair, authors):
    kind, theirs, ours, vocabs, dicts, mapping = pair
    (inp, out, lens), (src, lengths, prev, tgt) = batches(kind, vocabs, dicts, authors)
    vy, td = vocabs[1], dicts[1]
    torch.manual_seed(SEED)
    # other weights than the initial ones, so that the sentences are decoded differently; moderate ones: their
    # mixture is in probability space, where log-probability gaps beyond ~700 (float64) underflow to 0 + EPS
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(SCALE * torch.randn_like(p))
    copy_weights(ours, mapping)
    steps = 8
    with torch.no_grad():
        their_out, _ = theirs.sample(inp, steps, lens=lens, greedy=True)
        our_out = greedy(ours, src, lengths, td.eos(), steps)
    their_words = [vy.decode(trimmed(row[1:], vy.eos())) for row in their_out]
    our_words = [[td[i] for i in trimmed(row, td.eos())] for row in our_out]
    assert our_words == their_words
    assert max(len(w) for w in our_words) >= 4  # not all sentences ended at once
