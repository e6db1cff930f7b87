"""The keep-best beam search (fairseq_lexical/sequence_generator.py, docs/search.md): a hand-built model where
fairseq's search drops the greedy hypothesis and ours keeps it, equality with fairseq's search where that one is exact,
the never-below-greedy and never-below-fairseq properties on every model family and on models trained on SCAN and
COGS. How it is switched on (the task, the hint, the analysis tools' option): test_search_choice.py."""

import json
import math
import os
import subprocess
import sys
import zlib

import pytest
import torch

from tests.helpers.environment import run_cli, shared_data
from tests.helpers.toy_data import binarise
from tests.helpers.models import build_model
from tests.helpers.tiny_runs import tiny_train_args
from tests.helpers.model_checks import toy_batch


# -- hand-built models: log-probabilities from a table of prefixes ---------------------------------------------


def table_model(words, table):
    """A fairseq encoder-decoder whose next-token distribution is ``table(prefix)`` ({word or '</s>': probability},
    prefix a tuple of words), whatever the source; returns (model, target dictionary)."""
    from fairseq.data import Dictionary
    from fairseq.models import FairseqEncoder, FairseqEncoderDecoderModel, FairseqIncrementalDecoder

    dictionary = Dictionary()
    for w in words:
        dictionary.add_symbol(w)

    class SourceEncoder(FairseqEncoder):
        def forward(self, src_tokens, src_lengths=None):
            return {"src_tokens": [src_tokens]}

        def reorder_encoder_out(self, encoder_out, new_order):
            return {"src_tokens": [encoder_out["src_tokens"][0].index_select(0, new_order)]}

    class TableDecoder(FairseqIncrementalDecoder):
        def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
            rows, steps = prev_output_tokens.shape
            out = torch.full((rows, steps, len(dictionary)), -math.inf)
            for r in range(rows):
                for t in range(steps):
                    prefix = tuple(dictionary[i] for i in prev_output_tokens[r, 1 : t + 1].tolist())
                    for word, p in table(prefix).items():
                        if p > 0:
                            out[r, t, dictionary.index(word)] = math.log(p)
            return out, {"attn": [None]}

        def reorder_incremental_state(self, incremental_state, new_order):
            pass  # the table reads the whole prefix

        def max_positions(self):
            return 1024

    model = FairseqEncoderDecoderModel(SourceEncoder(dictionary), TableDecoder(dictionary))
    return model.eval(), dictionary


def source_sample(dictionary, n=1):
    src = torch.full((n, 2), dictionary.eos())
    src[:, 0] = dictionary.index(dictionary.symbols[-1])
    return {"id": torch.arange(n), "net_input": {"src_tokens": src, "src_lengths": torch.full((n,), 2)}}


def generators(model, dictionary, beam, **kwargs):
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_lexical.sequence_generator import KeepBestSequenceGenerator

    return (
        SequenceGenerator([model], dictionary, beam_size=beam, **kwargs),
        KeepBestSequenceGenerator([model], dictionary, beam_size=beam, **kwargs),
        SequenceGenerator([model], dictionary, beam_size=1, **kwargs),
    )


def words_of(dictionary, hypo):
    return dictionary.string(hypo["tokens"]).split()


def greedy_trap(prefix):
    """Greedy decoding writes 'a a a a': each 'a' has p 0.6 and </s> ends it with p 0.9. The alternatives 'b' and
    'a c' end early with p 0.9 and, beam 2, fill fairseq's two finished slots first."""
    if all(w == "a" for w in prefix) and len(prefix) < 4:
        return {"a": 0.6, "b": 0.3, "c": 0.1} if not prefix else {"a": 0.6, "c": 0.35, "b": 0.04, "</s>": 0.01}
    return {"</s>": 0.9, "a": 0.05, "b": 0.05}


def test_fairseqs_search_drops_the_greedy_hypothesis_and_ours_keeps_it():
    model, d = table_model(["a", "b", "c"], greedy_trap)
    fairseq, ours, greedy = generators(model, d, beam=2)
    with torch.no_grad():
        theirs, mine, first = (g.forward(source_sample(d))[0] for g in (fairseq, ours, greedy))
    log = math.log
    # hand-computed (length-normalised, fairseq's default --lenpen 1): fairseq finishes 'b' at step 1 and 'a c' at
    # step 2, its two slots, while 'a a a' is still in the beam
    assert [words_of(d, h) for h in theirs] == [["a", "c"], ["b"]]
    assert theirs[0]["score"].item() == pytest.approx((log(0.6) + log(0.35) + log(0.9)) / 3, abs=1e-6)
    assert words_of(d, first[0]) == ["a", "a", "a", "a"]
    best = mine[0]
    assert words_of(d, best) == ["a", "a", "a", "a"]
    assert best["score"].item() == pytest.approx((4 * log(0.6) + log(0.9)) / 5, abs=1e-6)
    torch.testing.assert_close(best["positional_scores"], torch.tensor([log(0.6)] * 4 + [log(0.9)]))
    assert best["score"].item() > theirs[0]["score"].item()
    # the second hypothesis is the best of the others: 'a a a c' (-0.538) beats 'a a c' and 'a c'
    assert words_of(d, mine[1]) == ["a", "a", "a", "c"]


def test_unnormalised_scores_are_exact_and_agree_with_fairseq_here():
    """Without length normalisation 'b' (log 0.3 + log 0.9) is the best hypothesis of all, and both searches find
    it; scores only fall, so nothing the beam could still produce beats it."""
    model, d = table_model(["a", "b", "c"], greedy_trap)
    fairseq, ours, _ = generators(model, d, beam=2, normalize_scores=False)
    with torch.no_grad():
        theirs, mine = (g.forward(source_sample(d))[0] for g in (fairseq, ours))
    assert words_of(d, mine[0]) == words_of(d, theirs[0]) == ["b"]
    assert mine[0]["score"].item() == pytest.approx(math.log(0.3) + math.log(0.9), abs=1e-6)


def test_a_tie_goes_to_greedy_decodings_hypothesis():
    """A lexicon row can split its mass evenly between two words (COGS's Simple lexicon does): the hypotheses tie,
    greedy decoding takes the lower word id, and so does the keep-best search, whichever row found which."""
    for first, second in (("a", "b"), ("b", "a")):

        def tie(prefix):
            if not prefix:
                return {first: 0.3, second: 0.3, "c": 0.4}
            if prefix == ("c",):
                return {"</s>": 0.1, first: 0.45, second: 0.45}
            return {"</s>": 1.0}

        model, d = table_model(["a", "b", "c"], tie)
        _, ours, greedy = generators(model, d, beam=3)
        with torch.no_grad():
            mine, first_hypo = (g.forward(source_sample(d))[0] for g in (ours, greedy))
        assert words_of(d, first_hypo[0]) == ["c", "a"]  # argmax: the lower id of the tied pair
        assert words_of(d, mine[0]) == ["c", "a"]
        assert mine[0]["score"].item() == pytest.approx(mine[1]["score"].item())  # 'c b' ties with it


LANE_LEAVES_THE_BEAM = {
    (): {"a": 0.4, "b": 0.35, "c": 0.25},
    ("a",): {"x": 0.3, "y": 0.25, "z": 0.25, "</s>": 0.2},
    ("b",): {"p": 0.45, "q": 0.4, "</s>": 0.15},
    ("a", "x"): {"w": 0.9, "</s>": 0.1},
    ("b", "p"): {"</s>": 0.6, "r": 0.4},
    ("b", "q"): {"</s>": 0.6, "r": 0.4},
}  # every other prefix: {'</s>': 1.0}


def test_the_search_waits_for_the_greedy_lane_after_it_left_the_beam():
    """The stop rule's third condition: a sentence whose pool is full and whose beam rows cannot beat it still waits
    while the greedy lane, no longer in the beam, can beat the pool's best. Without that wait the search would return
    fairseq's answer here, below greedy decoding's.

    Beam 2, unnormalised scores (the bound is the cumulative probability itself), probabilities of
    LANE_LEAVES_THE_BEAM:

    - step 0: beam 'a' .4, 'b' .35; the lane takes 'a'.
    - step 1: the beam's best continuations are 'b p' .35 x .45 = .1575 and 'b q' .35 x .4 = .14; the lane's
      argmax 'a x' .4 x .3 = .12 ranks below both (then 'a y', 'a z' .1), so the lane leaves the beam. Ended:
      'a' .4 x .2 = .08, 'b' .35 x .15 = .0525: the pool (2 places) is full, but 'b p' .1575 > .08, so no stop.
    - step 2: 'b p' and 'b q' end, .1575 x .6 = .0945 and .14 x .6 = .084: the pool is ['b p' .0945, 'b q' .084]. The
      beam continues with 'b p r' .1575 x .4 = .063 and 'b q r' .056, both at most .0945: the beam cannot beat the
      pool. The lane continues 'a x w' .12 x .9 = .108 > .0945: only the wait for the lane keeps the sentence on.
      (fairseq's search stops here: its two finished slots are full; 'a x </s>' .012 does not count.)
    - step 3: everything ends ('</s>' 1.0): 'a x w' .108 enters the pool first, then 'b p' .0945 (the beam's
      'b p r' .063 and 'b q r' .056 do not). Nothing is left, the search stops.

    So the search returns ['a x w' log .108, 'b p' log .0945]: greedy decoding's hypothesis (a 0.4, x 0.3, w 0.9,
    </s> 1.0), not fairseq's 'b p' (log .0945 = -2.359 < log .108 = -2.226)."""
    model, d = table_model(
        ["a", "b", "c", "p", "q", "r", "w", "x", "y", "z"], lambda p: LANE_LEAVES_THE_BEAM.get(p, {"</s>": 1.0})
    )
    fairseq, ours, greedy = generators(model, d, beam=2, normalize_scores=False)
    with torch.no_grad():
        theirs, mine, first = (g.forward(source_sample(d))[0] for g in (fairseq, ours, greedy))
    log = math.log
    assert words_of(d, first[0]) == ["a", "x", "w"]
    assert first[0]["score"].item() == pytest.approx(log(0.4 * 0.3 * 0.9), abs=1e-6)
    # fairseq's beam at step 2 was 'b p', 'b q' (the same as ours: the lane's 'a x' out of it), and it stopped there
    assert [words_of(d, h) for h in theirs] == [["b", "p"], ["b", "q"]]
    assert theirs[0]["score"].item() == pytest.approx(log(0.35 * 0.45 * 0.6), abs=1e-6)
    assert [words_of(d, h) for h in mine] == [["a", "x", "w"], ["b", "p"]]
    assert [h["score"].item() for h in mine] == pytest.approx([log(0.4 * 0.3 * 0.9), log(0.35 * 0.45 * 0.6)], abs=1e-6)
    torch.testing.assert_close(mine[0]["positional_scores"], torch.tensor([log(0.4), log(0.3), log(0.9), 0.0]))


def test_keeps_fairseqs_beam_when_words_tie_for_its_last_place():
    """16 words tie at the first step; beam 3 keeps 3 of them, and only what follows tells them apart. The keep-best
    search chooses the beam as fairseq does (same tensor, same top-k), so it keeps the same 3 words: whichever word
    holds the best continuation, both return the same hypotheses (the greedy word is among fairseq's three)."""
    words = [f"w{i}" for i in range(16)]
    for best in range(16):

        def after(prefix, best=best):
            if not prefix:
                return {w: 1 / 16 for w in words}
            if len(prefix) == 1:  # w_best continues best, the others a little worse each, then end
                i = int(prefix[0][1:])
                p = 0.9 if i == best else 0.5 + 0.02 * i
                return {"x": p, "</s>": 1 - p}
            return {"</s>": 1.0}

        model, d = table_model(words + ["x"], after)
        fairseq, ours, _ = generators(model, d, beam=3)
        with torch.no_grad():
            theirs, mine = (g.forward(source_sample(d))[0] for g in (fairseq, ours))
        assert [words_of(d, h) for h in mine] == [words_of(d, h) for h in theirs], best


def open_vocabulary(prefix, size=300, length=6):
    """300 words with pseudo-random, fairly flat probabilities (a hash of the prefix); every hypothesis ends after
    exactly ``length`` words. Every ended hypothesis of fairseq's search then ends at the same step, and fairseq's
    search is exact beam search."""
    if len(prefix) == length:
        return {"</s>": 1.0}
    seed = zlib.crc32(" ".join(prefix).encode())
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(size, generator=g) * 4.0, 0).tolist()
    return {f"w{i}": p[i] for i in range(size)}


@pytest.mark.parametrize("beam", [2, 5])
def test_equals_fairseqs_search_where_that_is_exact(beam):
    model, d = table_model([f"w{i}" for i in range(300)], open_vocabulary)
    fairseq, ours, greedy = generators(model, d, beam=beam)
    with torch.no_grad():
        theirs, mine, first = (g.forward(source_sample(d))[0] for g in (fairseq, ours, greedy))
    # the greedy hypothesis is one of fairseq's, so the lane adds nothing the beam did not find
    assert words_of(d, first[0]) in [words_of(d, h) for h in theirs]
    assert [words_of(d, h) for h in mine] == [words_of(d, h) for h in theirs]
    for a, b in zip(mine, theirs):
        assert a["score"].item() == pytest.approx(b["score"].item(), abs=1e-5)
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("lenpen", [1.0, 0.0, -0.5, 2.0])
def test_never_below_greedy_nor_fairseq_on_random_tables(lenpen):
    """Random peaked tables over 5 words: for every length penalty the best hypothesis scores at least greedy
    decoding's and fairseq's (scores as each search ranks them)."""

    def table(prefix, seed):
        if len(prefix) >= 7:
            return {"</s>": 1.0}
        g = torch.Generator().manual_seed(zlib.crc32(f"{seed} {' '.join(prefix)}".encode()))
        p = torch.softmax(torch.randn(6, generator=g) * 3.0, 0).tolist()
        return dict(zip(["</s>", "a", "b", "c", "d", "e"], p))

    lost_by_fairseq = 0
    for seed in range(40):
        model, d = table_model(["a", "b", "c", "d", "e"], lambda prefix: table(prefix, seed))
        fairseq, ours, greedy = generators(model, d, beam=3, len_penalty=lenpen)
        with torch.no_grad():
            theirs, mine, first = (g.forward(source_sample(d))[0][0]["score"].item() for g in (fairseq, ours, greedy))
        assert mine >= max(theirs, first) - 1e-6, (seed, mine, theirs, first)
        lost_by_fairseq += theirs < first - 1e-6
    if lenpen == 1.0:
        assert lost_by_fairseq > 0  # the tables do trap fairseq's search, so the bound above is tested


def test_repeated_ngrams_are_blocked():
    """--no-repeat-ngram-size 2: ours never repeats a bigram. fairseq 0.12's own blocker without its CUDA extension
    reads the padded end of its token buffer and blocks nothing, so there 'a b' comes back three times."""

    def table(prefix):
        if len(prefix) >= 6:
            return {"</s>": 1.0}
        return {"b": 0.6, "a": 0.2, "</s>": 0.2} if prefix[-1:] == ("a",) else {"a": 0.5, "b": 0.3, "</s>": 0.2}

    model, d = table_model(["a", "b"], table)
    fairseq, ours, _ = generators(model, d, beam=2, no_repeat_ngram_size=2)
    with torch.no_grad():
        theirs, mine = (g.forward(source_sample(d))[0] for g in (fairseq, ours))
    assert words_of(d, theirs[0]) == ["a", "b"] * 3
    for h in mine:
        words = words_of(d, h)
        bigrams = list(zip(words, words[1:]))
        assert len(bigrams) == len(set(bigrams)), words
    assert words_of(d, mine[0]) == ["a", "b", "a"]


# -- the plugin's models ----------------------------------------------------------------------------------------


FAMILIES = {
    "lex_lstm": lambda lex: ["--arch", "lex_lstm_small", "--lexicon", lex],
    "lex_transformer": lambda lex: ["--arch", "lex_transformer_tiny", "--lexicon", lex],
    "rdangle_transformer": lambda lex: ["--arch", "rdangle_transformer_tiny", "--reencode-interval", "2"],
    "lla_lstm": lambda lex: ["--arch", "lla_lstm_small", "--lexicon-unit-joint"],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_is_never_below_greedy_nor_fairseq(toy_data, family):
    """Untrained models (their distributions are flat, the hardest case for stopping): for several settings, the
    best hypothesis beats or ties greedy decoding's and fairseq's; every kept hypothesis is distinct, its score is
    its positional scores' sum normalised as asked, and at most --beam are kept."""
    from tests.helpers.toy_data import make_toy_pairs

    torch.manual_seed(0)
    model, task, _ = build_model(toy_data / "bin", *FAMILIES[family](str(toy_data / "lexicon.tsv")))
    model.eval()
    sample = toy_batch(task, make_toy_pairs(12, 5))
    settings = [
        dict(),
        dict(normalize_scores=False),
        dict(len_penalty=0.5),
        dict(min_len=3),
        dict(unk_penalty=1.0),
        dict(no_repeat_ngram_size=2),
    ]
    for kwargs in settings:
        fairseq, ours, greedy = generators(model, task.target_dictionary, beam=4, max_len_b=10, **kwargs)
        with torch.no_grad():
            theirs, mine, first = (g.forward(sample) for g in (fairseq, ours, greedy))
        for a, b, g in zip(mine, theirs, first):
            if "no_repeat_ngram_size" not in kwargs:  # fairseq's blocks nothing on a CPU (next test)
                assert a[0]["score"].item() >= max(b[0]["score"].item(), g[0]["score"].item()) - 1e-5, kwargs
            assert 1 <= len(a) <= 4
            assert len({tuple(h["tokens"].tolist()) for h in a}) == len(a)
            for h in a:
                length = h["tokens"].numel()
                assert length >= kwargs.get("min_len", 1) + 1
                raw = h["positional_scores"].sum().item()
                expected = (
                    raw if not kwargs.get("normalize_scores", True) else raw / length ** kwargs.get("len_penalty", 1.0)
                )
                assert h["score"].item() == pytest.approx(expected, abs=1e-4)


def test_an_ensemble_decodes_with_the_keep_best_search(toy_data):
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_lexical.sequence_generator import KeepBestSequenceGenerator

    models = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        models.append(
            build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv")[0].eval()
        )
    task = build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv")[1]
    sample = toy_batch(task, [("a1 and a2", "B1 B2"), ("a3 twice", "B3 B3")])
    with torch.no_grad():
        mine = KeepBestSequenceGenerator(models, task.target_dictionary, beam_size=3, max_len_b=8).forward(sample)
        theirs = SequenceGenerator(models, task.target_dictionary, beam_size=3, max_len_b=8).forward(sample)
    for a, b in zip(mine, theirs):
        assert a[0]["score"].item() >= b[0]["score"].item() - 1e-5


# -- models trained on SCAN and COGS ------------------------------------------------------------------------------

_TRAIN = r"""
import json, sys
import fairseq_lexical
from fairseq_cli import train
for argv in json.loads(sys.argv[1]):
    sys.argv = argv
    train.cli_main()
"""


def _write_pairs(prefix, pairs):
    with open(f"{prefix}.src", "w") as fs, open(f"{prefix}.tgt", "w") as ft:
        for s, t in pairs:
            fs.write(s + "\n")
            ft.write(t + "\n")


UPDATES = {"scan_jump": 300, "cogs": 150}  # batches of 32; COGS's targets are 3.5 times longer than SCAN's


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{name: (model, task)}: LSTM + Simple lexicon trained briefly (UPDATES) on 2,000 pairs of SCAN jump and of
    COGS, with 100 test (gen) pairs whose targets have at most 60 words as their test split (skipped without
    ../shared/data)."""
    from lexical_offline.textio import read_pairs

    data = {
        "scan_jump": [
            read_pairs(shared_data("scan", f"tasks_{split}_addprim_jump.txt"), fmt="scan")
            for split in ("train", "test")
        ],
        "cogs": [read_pairs(shared_data("cogs", f"{split}.tsv"), fmt="tsv-columns") for split in ("train", "gen")],
    }
    work = tmp_path_factory.mktemp("keep_best")
    jobs, out = [], {}
    for name, (train, test) in data.items():
        d = work / name
        d.mkdir()
        _write_pairs(d / "train", train[:2000])
        _write_pairs(d / "valid", train[2000:2100])
        short = [(s, t) for s, t in test if len(t.split()) <= 60]  # fewer steps for undertrained models
        _write_pairs(d / "test", short[:: len(short) // 100][:100])
        run_cli(
            "fairseq-lexical-build-lexicon",
            "--method",
            "simple",
            "--src",
            d / "train.src",
            "--tgt",
            d / "train.tgt",
            "-o",
            d / "simple.tsv",
        )
        binarise(d, d / "bin")
        options = ("--arch", "lex_lstm_small", "--lexicon", d / "simple.tsv", "--decoder-output", "combined")
        settings = dict(updates=UPDATES[name], batch_size=32, validation=False)
        jobs.append(["fairseq-train", *tiny_train_args(d / "bin", d / "ck", *options, "--no-progress-bar", **settings)])
    # the two trainings side by side, a thread each (CI has 2 cores)
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _TRAIN, json.dumps([job])],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for job in jobs
    ]
    for proc in procs:
        output, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, output[-5000:]
    from fairseq_lexical.analysis.checkpoints import load_checkpoints

    for name in data:
        d = work / name
        models, _, task = load_checkpoints([str(d / "ck" / "checkpoint_last.pt")], str(d / "bin"), RuntimeError)
        out[name] = (models[0].eval(), task)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scan_jump", "cogs"])
def test_trained_models_never_score_below_greedy(trained, name):
    from fairseq_lexical.analysis.checkpoints import load_subset

    model, task = trained[name]
    dataset = load_subset(task, "test", RuntimeError)
    sample = dataset.collater([dataset[i] for i in range(len(dataset))])
    fairseq, ours, greedy = generators(model, task.target_dictionary, beam=5, max_len_b=80)
    with torch.no_grad():
        theirs, mine, first = (g.forward(sample) for g in (fairseq, ours, greedy))
    below_greedy = 0
    for a, b, g in zip(mine, theirs, first):
        assert a[0]["score"].item() >= max(b[0]["score"].item(), g[0]["score"].item()) - 1e-5
        below_greedy += b[0]["score"].item() < g[0]["score"].item() - 1e-5
    print(f"{name}: fairseq's beam 5 below greedy on {below_greedy} of {len(mine)} sentences")
