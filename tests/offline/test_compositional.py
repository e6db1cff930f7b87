"""Compositional test-set selection (Zheng & Lapata 2023, section 4): the degree DP, the n-gram dictionary, the OOV
filter, the seeded uncertainty sample, reverse mutual information, novel n-grams (Table 2), BLEU by degree (Fig. 1a)
(the command lines: test_compositional_cli.py; the ensemble uncertainty on checkpoints:
tests/plugin/test_uncertainty.py)."""

import itertools
import math
import os
import random
import subprocess
import sys

import pytest

from tests.helpers.environment import REPO, shared_data

from lexical_offline import textio
from lexical_offline.analysis import bleu_by_degree as B
from lexical_offline.analysis import compositional_selection as S
from lexical_offline.analysis import ngram_statistics as N

from tests.helpers.compositional import write


# -- the dynamic programme ----------------------------------------------------------------------------------------


def test_paper_example_two_ngrams_for_five_words():
    """Section 4: dictionary (x1, x2, x3x4, x5, x1x2, x3x4x5) composes x1..x5 from 2 n-grams, degree 2/5."""
    d = N.NgramDictionary.from_ngrams(["x1", "x2", "x3 x4", "x5", "x1 x2", "x3 x4 x5"])
    t = d.tiling("x1 x2 x3 x4 x5".split())
    assert (t.pieces, t.lengths, t.atoms) == (2, [2, 3], 0)
    assert t.degree == pytest.approx(0.4)
    assert t.split("x1 x2 x3 x4 x5".split()) == [["x1", "x2"], ["x3", "x4", "x5"]]
    # the same without single-word fallbacks: the tiling uses dictionary entries only
    assert d.tiling("x1 x2 x3 x4 x5".split(), unlisted="drop").pieces == 2
    # x4 alone is no entry (only a part of x3x4, x3x4x5): with "drop" "x4 x5" cannot be tiled, with "atom" it is
    # x4 (an atom) + x5
    assert d.tiling(["x4", "x5"], unlisted="drop") is None
    t = d.tiling(["x4", "x5"])
    assert (t.pieces, t.atoms) == (2, 1)
    assert "x3 x4" in d and "x3" not in d and "x4 x5" not in d and len(d) == 6


def test_table1_example_from_a_training_corpus():
    """Table 1: 'but what can we do about this ?' = 'but' + a 7-gram seen in training, degree 2/8 = 0.25."""
    seven = "what can we do about this ?"
    train = [f"{seven}"] * 4 + ["but no", "but yes", "but maybe", "but then"]
    d = N.NgramDictionary.from_corpus(train, min_count=3)
    t = d.tiling(("but " + seven).split())
    assert (t.pieces, t.lengths) == (2, [1, 7])
    assert t.degree == 0.25
    # seen exactly 3 times is not "more than 3": the 7-gram is then no entry
    d3 = N.NgramDictionary.from_corpus([seven] * 3 + ["but no"] * 4, min_count=3)
    assert seven not in d3 and "but" in d3


def _brute_force_min(tokens, entries, atoms_ok):
    """Minimum pieces over every segmentation (2^(L-1) of them)."""
    L, best = len(tokens), None
    for cuts in itertools.product([0, 1], repeat=L - 1):
        pieces, start = [], 0
        for k, c in enumerate(cuts, start=1):
            if c:
                pieces.append(tuple(tokens[start:k]))
                start = k
        pieces.append(tuple(tokens[start:]))
        ok = all(p in entries or (atoms_ok and len(p) == 1 and p not in entries) for p in pieces)
        if ok and (best is None or len(pieces) < best):
            best = len(pieces)
    return best


@pytest.mark.parametrize("seed", range(8))
def test_dp_matches_brute_force_on_random_dictionaries(seed):
    rng = random.Random(seed)
    words = ["a", "b", "c", "d"]
    entries = {tuple(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(3, 12))}
    d = N.NgramDictionary.from_ngrams([list(e) for e in entries])
    for _ in range(30):
        tokens = [rng.choice(words) for _ in range(rng.randint(1, 9))]
        for mode, atoms_ok in (("atom", True), ("drop", False)):
            t = d.tiling(tokens, unlisted=mode)
            expect = _brute_force_min(tokens, entries, atoms_ok)
            assert (None if t is None else t.pieces) == expect, (tokens, sorted(entries), mode)
            if t is not None:
                assert sum(t.lengths) == len(tokens) and len(t.lengths) == t.pieces
                assert all(tuple(p) in entries or len(p) == 1 for p in t.split(tokens))


def test_corpus_dictionary_counts_occurrences_within_sentences():
    train = ["a a a", "a a", "b c", "b c", "c d", "c d"]
    d = N.NgramDictionary.from_corpus(train, min_count=1)  # seen at least twice
    assert "a a" in d  # 2 occurrences in "a a a" (overlapping) + 1
    assert "a a a" not in d  # once
    assert "b c" in d and "c d" in d and "b c d" not in d
    assert "a b" not in d  # "a a" then "b c" is a sentence boundary, not an n-gram
    assert d.count("a") == 5 and d.count("z") == 0
    assert d.summary()["entries_by_length"] == {"1": 4, "2": 3}
    # max_n caps the length
    d1 = N.NgramDictionary.from_corpus(train, min_count=1, max_n=1)
    assert "a a" not in d1 and d1.longest == 1
    # sub-n-gram closure: every trie node is an entry (so the DP's greedy-longest reading agrees)
    assert all(d.terminal[1:])


# -- OOV filter, degree and pool ----------------------------------------------------------------------------------


def test_oov_filter_counts_and_reasons(small_corpus):
    train, cands = small_corpus
    d = N.NgramDictionary.from_corpus(train, min_count=3)
    res = S.score_candidates(d, cands, min_word_count=3, pool_size=10)
    st = [s.status for s in res.scores]
    assert st[1] == S.STATUS_RARE and res.scores[1].rare_words == ["dog"]
    assert st[2] == S.STATUS_UNSEEN and st[6] == S.STATUS_UNSEEN
    assert st[3] == S.STATUS_EMPTY and st[4] == S.STATUS_DUPLICATE
    counts = res.counts()
    assert (counts["oov-unseen"], counts["oov-rare"], counts["empty"], counts["duplicate"]) == (2, 1, 1, 1)
    assert res.rare_word_counts == {"dog": 1, "zebra": 2, "ran": 1}
    s = res.summary()
    assert s["passed_oov_filter"] == 4 and s["dropped"]["oov_unseen_word"] == 2
    # "mat" passed the OOV filter (3 >= 3) but is no n-gram entry (3 is not > 3): a piece of its own
    t = res.scores[0].tiling
    assert t.atoms == 1 and t.lengths[-1] == 1
    # ... or the candidate is untileable
    res2 = S.score_candidates(d, cands, min_word_count=3, pool_size=10, unlisted="drop")
    assert res2.scores[0].status == S.STATUS_UNTILEABLE
    # a stricter OOV filter drops it instead
    res3 = S.score_candidates(d, cands, min_word_count=4, pool_size=10)
    assert res3.scores[0].status == S.STATUS_RARE and res3.scores[0].rare_words == ["mat"]


def test_pool_keeps_highest_degree_without_duplicates(small_corpus):
    train, cands = small_corpus
    d = N.NgramDictionary.from_corpus(train, min_count=3)
    res = S.score_candidates(d, cands, pool_size=2)
    # degrees: 0: "the cat sat on" + "the" + "mat" (atom) = 3/6; 5: "on" + "the cat" = 2/3; 7: "sat on" = 1/2
    deg = {i: res.scores[i].degree for i in (0, 5, 7)}
    assert deg == {0: pytest.approx(0.5), 5: pytest.approx(2 / 3), 7: pytest.approx(0.5)}
    assert res.pool == [5, 0]  # 0 and 7 tie at 0.5: the lower index wins
    assert res.ties_at_cut == 1 and res.scores[7].status == S.STATUS_BELOW
    assert [res.scores[i].rank for i in res.pool] == [1, 2]
    # length limits
    res = S.score_candidates(d, cands, pool_size=10, min_length=3, max_length=5)
    assert res.scores[7].status == S.STATUS_SHORT and res.scores[0].status == S.STATUS_LONG
    # duplicates can be kept
    res = S.score_candidates(d, cands, pool_size=10, dedup=False)
    assert res.scores[4].status == S.STATUS_POOL


# -- the seeded sample --------------------------------------------------------------------------------------------


def test_sample_is_reproducible_and_changes_with_the_seed():
    rng = random.Random(0)
    unc = [rng.random() for _ in range(500)]
    unc[7] = float("nan")
    unc[8] = None
    a = S.sample_by_uncertainty(unc, drop_top=20, window=200, sample=50, seed=1)
    b = S.sample_by_uncertainty(unc, drop_top=20, window=200, sample=50, seed=1)
    c = S.sample_by_uncertainty(unc, drop_top=20, window=200, sample=50, seed=2)
    assert a.selected == b.selected and a.stages == b.stages
    assert a.selected != c.selected and len(a.selected) == len(c.selected) == 50
    order = sorted((i for i in range(500) if i not in (7, 8)), key=lambda i: -unc[i])
    assert a.order == order
    assert set(a.selected) <= set(order[20:220])  # never among the 20 most uncertain, nor below the window
    assert all(a.stages[i] == S.STAGE_TOP for i in order[:20])
    assert a.stages[7] == a.stages[8] == S.STAGE_UNSCORED and a.ranks[7] is None
    assert a.ranks[order[0]] == 1
    assert a.summary()["stages"] == {
        "dropped-top": 20,
        "selected": 50,
        "window": 150,
        "below-window": 278,
        "unscored": 2,
    }


def test_sample_ties_and_short_windows():
    res = S.sample_by_uncertainty([1.0, 2.0, 2.0, 0.5], drop_top=1, window=10, sample=3, seed=0, keys=[10, 30, 20, 40])
    assert res.order == [2, 1, 0, 3]  # tie 2.0: the lower key (20) first
    assert res.warnings and sorted(res.selected) == [0, 1, 3]
    with pytest.raises(N.CompositionalError, match="cannot sample 4"):
        S.sample_by_uncertainty([1.0, 2.0, 3.0, 4.0], drop_top=1, window=10, sample=4)


# -- reverse mutual information -----------------------------------------------------------------------------------


def test_reverse_mutual_information_hand_computed():
    """Two members, two tokens. p1 = (1/2, 1/2), p2 = (9/10, 1/10): p_bar = (7/10, 3/10), and
    RMI = 1/2 [KL(p_bar || p1) + KL(p_bar || p2)]
        = 1/2 [0.7 ln(0.7/0.5) + 0.3 ln(0.3/0.5) + 0.7 ln(0.7/0.9) + 0.3 ln(0.3/0.1)]
        = 0.35 ln(49/45) + 0.15 ln(9/5) = 0.029805 + 0.088168 = 0.117973.
    Identical members give 0."""
    torch = pytest.importorskip("torch")
    from fairseq_lexical.analysis.uncertainty import token_rmi

    p = torch.tensor(
        [
            [[0.5, 0.5], [0.2, 0.8]],  # member 1: token 1, token 2
            [[0.9, 0.1], [0.2, 0.8]],
        ],
        dtype=torch.float32,
    )  # member 2
    rmi = token_rmi(p.log())
    assert rmi.shape == (2,)
    assert rmi[0].item() == pytest.approx(0.35 * math.log(49 / 45) + 0.15 * math.log(9 / 5), abs=1e-7)
    assert rmi[0].item() == pytest.approx(0.117973, abs=1e-6)
    assert rmi[1].item() == pytest.approx(0.0, abs=1e-12)


def test_reverse_mutual_information_is_epkl_minus_mi():
    """Malinin & Gales (2021): RMI = EPKL - MI, with MI = mean_m KL(p_m || p_bar) and EPKL the mean pairwise KL;
    random members, batch shape preserved."""
    torch = pytest.importorskip("torch")
    from fairseq_lexical.analysis.uncertainty import token_rmi

    g = torch.Generator().manual_seed(0)
    lp = torch.log_softmax(torch.randn(3, 4, 5, 7, generator=g, dtype=torch.float64) * 2, dim=-1)
    p = lp.exp()
    p_bar = p.mean(0)

    def kl(a, b):
        return (a * (a.log() - b.log())).sum(-1)

    mi = torch.stack([kl(p[m], p_bar) for m in range(3)]).mean(0)
    epkl = torch.stack([kl(p[m], p[k]) for m in range(3) for k in range(3)]).mean(0)
    rmi = torch.stack([kl(p_bar, p[m]) for m in range(3)]).mean(0)
    got = token_rmi(lp)
    assert got.shape == (4, 5)
    assert torch.allclose(got, rmi, atol=1e-12) and torch.allclose(got, epkl - mi, atol=1e-12)
    assert (got > 0).all()


# -- novel n-grams (Table 2) --------------------------------------------------------------------------------------


def test_novel_ngrams_hand_case():
    train = ["a b c", "b c d"]
    test = ["a b c d", "x a b", "c", ""]
    s = N.novel_ngram_stats(train, test, orders=(1, 2, 3))
    two, three, one = s["orders"]["2"], s["orders"]["3"], s["orders"]["1"]
    # test 2-grams: ab bc cd | xa ab -> distinct {ab, bc, cd, xa}, novel {xa}
    assert (two["unique_test"], two["unique_novel"], two["test_occurrences"], two["novel_occurrences"]) == (4, 1, 5, 1)
    assert two["unique_novel_fraction"] == 0.25 and two["sentences_with_novel"] == 1
    assert two["sentences_with_ngrams"] == 2
    # 3-grams: abc bcd | xab -> novel {xab}
    assert (three["unique_test"], three["unique_novel"]) == (3, 1)
    assert (one["unique_novel"], one["novel_occurrences"]) == (1, 1)  # "x"
    assert s["test_empty"] == 1
    # n-grams do not cross sentence boundaries: "c x" is nowhere
    s = N.novel_ngram_stats(["a b", "c d"], ["b c"], orders=(2,))
    assert s["orders"]["2"]["unique_novel"] == 1


@pytest.mark.needs_shared_data
def test_novel_ngrams_reproduce_table2_cogs():
    """Table 2, COGS row: 6,097 novel word 2-grams and 24,275 novel word 3-grams (train.tsv vs gen.tsv inputs)."""
    train = textio.read_column(shared_data("cogs", "train.tsv"), 0)
    gen = textio.read_column(shared_data("cogs", "gen.tsv"), 0)
    s = N.novel_ngram_stats(train, gen, orders=(2, 3))
    assert len(gen) == 21000
    assert s["orders"]["2"]["unique_novel"] == 6097
    assert s["orders"]["3"]["unique_novel"] == 24275


# -- Fig. 1a ------------------------------------------------------------------------------------------------------


def test_equal_buckets_and_bleu_by_degree():
    assert B.equal_buckets(10, 3) == [(0, 4), (4, 7), (7, 10)]
    with pytest.raises(N.CompositionalError):
        B.equal_buckets(2, 3)
    refs = [f"w{i} x y z" for i in range(8)]
    degrees = [0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4]
    # system A is perfect; system B is perfect on the low-degree half, wrong on the high-degree half
    hyp_b = [r if d < 0.5 else "q q q q" for r, d in zip(refs, degrees)]
    res = B.bleu_by_degree(degrees, refs, refs, hyp_b, buckets=2)
    low, high = res["buckets"]
    assert (low["n"], high["n"]) == (4, 4)
    assert low["degree_max"] == 0.4 and high["degree_min"] == 0.6
    assert low["bleu_diff"] == pytest.approx(0.0) and high["bleu_diff"] == pytest.approx(100.0)
    assert "diff (A-B)" in B.format_degree_table(res)


def test_offline_commands_import_neither_fairseq_nor_torch(tmp_path):
    write(tmp_path / "t.txt", ["a b", "a b", "a b", "a b"])
    code = (
        "import sys;"
        "import lexical_offline.cli.select_compositional as t;"
        "assert t.main(['pool', '--train-source', sys.argv[2], '--source', sys.argv[2], '--out-prefix', sys.argv[3],"
        "               '--no-progress']) == 0;"
        "assert t.main(['novelty', '--train', sys.argv[2], '--test', sys.argv[2]]) == 0;"
        "assert 'fairseq' not in sys.modules and 'torch' not in sys.modules, 'heavy import'"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, os.path.join(REPO, "tools"), str(tmp_path / "t.txt"), str(tmp_path / "p")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
