"""Our LSTM rows against the authors' released code (ekinakyurek/lexical, ../shared/reference/ekinakyurek-lexical):
the same model, weight for weight. Their EncDec and our `lstm_plain` / `lex_lstm` with the recipes' authors'
options (docs/authors_code.md) get the same weights through an explicit map; on one padded batch of unequal lengths,
in float64 with dropout off, the teacher-forced loss as each code reduces it, every gradient and the greedy outputs
agree to rounding. Cases: LSTM, LSTM + copy (the identity lexicon), LSTM + Simple (their lexicon from an alignment
file, ours from the same file). Then a few updates of training side by side (examples/scan/authors_lockstep.py,
which holds the bridge to their code: the import, the map, the batches): losses, gradient norms and p_gate stay
equal."""

import json
import os
import random

import pytest
import torch

from tests.helpers.toy_data import scan_line
from tests.helpers.environment import tool_module

lockstep = tool_module("authors_lockstep", "examples/scan")  # the bridge to their code
REFERENCE = lockstep.REFERENCE
pytestmark = pytest.mark.skipif(
    not os.path.isdir(REFERENCE), reason=f"{REFERENCE} is absent (../shared is not part of the repository)"
)
copy_weights, our_loss = lockstep.copy_weights, lockstep.our_loss

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
    """Their modules, imported from the reference folder without side effects (lockstep.import_authors)."""
    return lockstep.import_authors(REFERENCE)


def build_both(authors, kind, tmp_path, exclude_specials=True):
    lexicon = None
    if kind == "copy":
        lexicon = "identity"
    elif kind == "simple":
        lexicon = tmp_path / "simple.align.json"
        lexicon.write_text(json.dumps(ALIGNMENT))
        lexicon = str(lexicon)
    # MAXLEN: their decoder forces </s> at step MAXLEN - 1 (main.py: the longest target + 1); beyond these batches
    theirs, ours, vocabs, dicts, mapping = lockstep.build_both(
        authors,
        SOURCE,
        TARGET + (SOURCE if kind == "copy" else []),
        tmp_path,
        dim=D,
        lexicon=lexicon,
        exclude_specials=exclude_specials,
        seed=0,
        maxlen=100,
    )
    assert sorted(mapping) == sorted(dict(ours.named_parameters())), "every parameter of ours has a counterpart"
    return theirs.double().eval(), ours.double().eval(), vocabs, dicts, mapping


def batches(kind, vocabs, dicts, authors):
    return lockstep.batches(PAIRS[kind], vocabs, dicts, authors)


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


def test_fairseq_inverse_sqrt_is_fairsequs_schedule():
    """The lockstep's learning rates are those fairseq-train's inverse_sqrt sets (--warmup-init-lr 0): update n at
    step_update(n - 1), the first at 0."""
    from fairseq.optim import FairseqOptimizer
    from fairseq.optim.lr_scheduler.inverse_square_root_schedule import (
        InverseSquareRootLRScheduleConfig,
        InverseSquareRootSchedule,
    )

    class Plain(FairseqOptimizer):
        def __init__(self):
            self._optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0)

    optimizer = Plain()
    schedule = InverseSquareRootSchedule(
        InverseSquareRootLRScheduleConfig(warmup_updates=3, warmup_init_lr=-1, lr=[0.01]), optimizer
    )
    for update in range(1, 9):  # fairseq's trainer: the update runs at the current rate, then step_update(updates)
        assert lockstep.fairseq_inverse_sqrt(update, 0.01, 3) == optimizer.get_lr()
        schedule.step_update(update)


def write_tiny_scan(root, n=24, seed=5):
    """A SCAN-like training file and alignment file in the layout of ../shared/data/scan (jump)."""
    rng = random.Random(seed)
    (root / "lexicon_akyurek2021" / "add_prim_split").mkdir(parents=True)
    (root / "tasks_train_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(n)))
    alignment = {"jump": {"I_JUMP": 2}, "walk": {"I_WALK": 3}, "run": {"I_RUN": 3}, "look": {"I_LOOK": 3}}
    alignment.update({"left": {"I_TURN_LEFT": 5}, "right": {"I_TURN_RIGHT": 5}})
    (root / "lexicon_akyurek2021" / "add_prim_split" / "simple.align.v3.json").write_text(json.dumps(alignment))
    return root


@pytest.mark.parametrize("init", ["theirs", "ours"])
def test_lockstep_training_equals_theirs(authors, tmp_path, init):
    """examples/scan/authors_lockstep.py at a tiny size (dim 8, batches of 4, LSTM + Simple), float64, dropout off: four
    updates of Adam with clipping (at 1, below every gradient norm here) and a warm-up of 2 updates, from their initial
    weights and from ours. Loss, gradient norm before clipping and mean p_gate agree to 1e-9 at every update and the
    parameters after each update to 1e-9, while the loss moves: a difference in the map, the rate, the clipping or
    the optimiser between the two codes' updates would show."""
    data = write_tiny_scan(tmp_path / "scan")
    argv = ["--data", str(data), "--reference", REFERENCE, "--dim", "8", "--batch-size", "4", "--updates", "4"]
    argv += ["--lr", "0.01", "--warmup", "2", "--clip-norm", "1", "--init", init, "--dropout", "off", "--seed", "3"]
    lines = []
    result = lockstep.run(lockstep.parser().parse_args(argv), progress=lines.append)
    records = result["updates"]
    assert [r["update"] for r in records] == [1, 2, 3, 4] and len(lines) >= 6
    for r in records:
        ours, theirs = r["ours"], r["theirs"]
        for key in ("loss", "gnorm", "p_gate"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-9, abs=1e-12), (r["update"], key)
        assert theirs["gnorm"] > 1.0  # the clipping acts
        assert r["param_diff"] < 1e-9
    assert [r["lr"] for r in records] == pytest.approx([0.0, 0.005, 0.01, 0.01 * (2 / 3) ** 0.5], rel=1e-12)
    assert abs(records[-1]["ours"]["loss"] - records[0]["ours"]["loss"]) > 1e-2  # it trains
    assert result["summary"]["first_update_parted"] is None
    assert {u["parameter"] for u in result["unmapped_theirs"]} == {
        "encoder.embed.weight",
        "decoder.embed.weight",
        "decoder.seq_picker.weight",
        "decoder.seq_picker.bias",
    }


def test_lockstep_names_what_is_missing(tmp_path, capsys):
    """Bad input: one error line naming the folder, file or split."""
    data = write_tiny_scan(tmp_path / "scan")
    base = ["--data", str(data), "--dim", "8", "--batch-size", "4", "--updates", "1"]
    cases = [
        (["--reference", str(tmp_path / "nowhere")], str(tmp_path / "nowhere")),
        (["--data", str(tmp_path / "no_scan"), "--reference", REFERENCE], "tasks_train_addprim_jump.txt"),
        (["--split", "length", "--reference", REFERENCE], "unknown split 'length'"),
    ]
    for extra, named in cases:
        assert lockstep.main(base + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and named in err[0], err
