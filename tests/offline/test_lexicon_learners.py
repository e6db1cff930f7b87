"""Offline lexicon learners (issue 3): facts the paper states, and hand-computed small cases."""

import importlib.util
import itertools
import math
import os

import numpy as np
import pytest

from tests.helpers.environment import REPO, shared_data

from lexical_offline.lexicon.agreement import (
    compare_lexicons,
    entries_to_dict,
    link_precision_recall,
    read_json_lexicon,
)
from lexical_offline.lexicon.builder import build_lexicon
from lexical_offline.lexicon.counts import cooccurrence, encode_pairs
from lexical_offline.lexicon.fileformat import read_lexicon
from lexical_offline.lexicon.ibm import build_pair_table, symmetrize, train_direction, Links
from lexical_offline.lexicon.pmi import pmi_values
from lexical_offline.textio import TextFileError as CorpusError, read_pairs

COLOR_WORDS = {"dax": "RED", "lug": "BLUE", "wif": "GREEN", "zup": "YELLOW"}
SCAN_PRIMITIVES = {
    "walk": "I_WALK",
    "run": "I_RUN",
    "look": "I_LOOK",
    "jump": "I_JUMP",
    "left": "I_TURN_LEFT",
    "right": "I_TURN_RIGHT",
}


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "tools", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def as_map(entries):
    """{input: {output: score}}"""
    return entries_to_dict(entries)


@pytest.fixture(scope="module")
def colors_pairs():
    return read_pairs(shared_data("colors", "train.tsv"))


@pytest.fixture(scope="module")
def scan_around_right():
    return read_pairs(shared_data("scan", "tasks_train_template_around_right.txt"), fmt="scan")


# ------------------------------------------------------------------------------ paper facts: Colors, SCAN
@pytest.mark.needs_shared_data
@pytest.mark.parametrize("method", ["simple", "ibm1"])
def test_colors_maps_only_color_words(colors_pairs, method):
    """Section 5.1: the Simple and "IBM Model 2" lexicons map only the four color words to colors. The authors'
    "IBM Model 2" was fast_align -o without -d, i.e. Model 1 (NOTES-environment.md), hence ibm1 here."""
    entries, prov = build_lexicon(colors_pairs, method)
    lex = as_map(entries)
    assert {v: set(r) for v, r in lex.items()} == {v: {w} for v, w in COLOR_WORDS.items()}
    for word in ("fep", "kiki", "blicket"):
        assert word not in lex
    # every output is claimed, so the fallback has nowhere to send the three function words: counted, not written
    assert "fallback_no_entry=3" in prov[-1]


@pytest.mark.needs_shared_data
def test_scan_around_right_simple_maps_primitives_only(scan_around_right):
    """Fig. 3: Simple maps walk, run, look, jump, left, right to their actions and nothing else."""
    entries, _ = build_lexicon(scan_around_right, "simple")
    lex = as_map(entries)
    assert {v: set(r) for v, r in lex.items()} == {v: {w} for v, w in SCAN_PRIMITIVES.items()}


@pytest.mark.needs_shared_data
@pytest.mark.parametrize("method", ["pmi", "bayes"])
def test_scan_around_right_pmi_and_bayes_add_entries(scan_around_right, method):
    """Fig. 3: PMI and Bayesian lexicons contain too many entries (e.g. for 'around', numbers, prepositions)."""
    entries, _ = build_lexicon(scan_around_right, method, fallback=False, samples=200, seed=1)
    lex = as_map(entries)
    extra = set(lex) - set(SCAN_PRIMITIVES)
    assert extra, "expected entries for words other than the six primitives"
    assert "around" in lex
    # and the primitives still prefer their own action
    for v, w in SCAN_PRIMITIVES.items():
        if v in ("walk", "run", "look", "jump"):
            row = lex[v]
            assert max(row, key=row.get) == w


@pytest.mark.needs_shared_data
@pytest.mark.parametrize(
    "dataset,corpus,fmt,lexdir",
    [
        ("colors", "train.tsv", "tsv", ""),
        ("scan", "tasks_train_template_around_right.txt", "scan", "template_split"),
        ("scan", "tasks_train_addprim_jump.txt", "scan", "add_prim_split"),
    ],
)
def test_simple_agrees_with_authors_lexicon(dataset, corpus, fmt, lexdir):
    pairs = read_pairs(shared_data(dataset, corpus), fmt=fmt)
    theirs = read_json_lexicon(
        shared_data(dataset, "lexicon_akyurek2021", *([lexdir] if lexdir else []), "simple.align.v3.json")
    )
    entries, _ = build_lexicon(pairs, "simple", fallback=False)
    res = compare_lexicons(as_map(entries), theirs)
    assert res["identical_entries"] == 1.0, res
    assert res["same_score"] == 1.0, res  # the authors' scores are the same co-occurrence counts


@pytest.mark.needs_shared_data
def test_pmi_matches_authors_colors_rows(colors_pairs):
    """The authors' Colors PMI file holds 100 * softmax(pmi) at tau = 1 (their YELLOW cells are an epsilon for
    pairs that never co-occur, which have no entry here)."""
    theirs = read_json_lexicon(shared_data("colors", "lexicon_akyurek2021", "pmi.align.json"))
    entries, _ = build_lexicon(colors_pairs, "pmi", temperature=1.0, fallback=False)
    ours = as_map(entries)
    for v, row in ours.items():
        for w, p in row.items():
            assert theirs[v][w] / 100 == pytest.approx(p, abs=1e-4)


# ----------------------------------------------------------------------------------- hand-made corpora
BLESS = [("bless him", "BLESS HIM"), ("blessed her", "BLESS HER"), ("him", "HIM"), ("her", "HER")]


def test_simple_hand_corpus_no_winner_and_epsilon():
    # suff(bless, BLESS) and suff(blessed, BLESS) hold, neither is necessary, BLESS has no C1 winner -> both kept
    # (C2's relaxation); suff(bless, HIM) holds but HIM has the winner him -> dropped. 2 words are sufficient for
    # BLESS and 2 for HIM (him, bless), so epsilon = 2 keeps everything and epsilon = 1 keeps nothing.
    entries, _ = build_lexicon(BLESS, "simple", epsilon=2)
    assert as_map(entries) == {
        "bless": {"BLESS": 1.0},
        "blessed": {"BLESS": 1.0},
        "him": {"HIM": 2.0},
        "her": {"HER": 2.0},
    }
    entries, prov = build_lexicon(BLESS, "simple", epsilon=1)
    # nothing learned; V_x is not a subset of V_y: each input spreads uniformly over the 3 unclaimed outputs
    lex = as_map(entries)
    assert set(lex) == {"bless", "blessed", "him", "her"}
    for row in lex.values():
        assert row == {"BLESS": pytest.approx(1 / 3), "HIM": pytest.approx(1 / 3), "HER": pytest.approx(1 / 3)}
    assert "fallback_uniform=4" in prov[-1]


def test_fallback_identity_when_inputs_are_outputs():
    # V_x = {a, b, c} is a subset of V_y = {a, b, c}. Simple learns only a -> a (C1, 2 co-occurrences);
    # suff(c, a) holds but a has the winner a; b is sufficient for nothing. b and c map to themselves.
    pairs = [("a b", "a"), ("a c", "a"), ("b", "b c")]
    entries, prov = build_lexicon(pairs, "simple")
    assert as_map(entries) == {"a": {"a": 2.0}, "b": {"b": 1.0}, "c": {"c": 1.0}}
    assert "fallback_identity=2" in prov[-1]
    assert as_map(build_lexicon(pairs, "simple", fallback=False)[0]) == {"a": {"a": 2.0}}


def test_fallback_identity_per_shared_string_then_uniform_over_unclaimed():
    # COGS's case: V_x is not a subset of V_y. Learned: ran -> RUN. cat and dog have no entry but are output strings:
    # identity each (the authors' code). "the" is no output string: uniform over the outputs claimed neither by an
    # entry (RUN) nor by a shared string (cat, dog, and Emma, whose learned row points elsewhere): x and y.
    from lexical_offline.lexicon.fallback import mutual_exclusivity_fallback

    learned = [("ran", "RUN", 2.0), ("Emma", "EMMA", 1.0)]
    extra, report = mutual_exclusivity_fallback(
        learned, ["the", "cat", "dog", "ran", "Emma"], ["cat", "dog", "RUN", "EMMA", "Emma", "x", "y"]
    )
    assert as_map(extra) == {
        "cat": {"cat": 1.0},
        "dog": {"dog": 1.0},
        "the": {"x": pytest.approx(0.5), "y": pytest.approx(0.5)},
    }
    assert report == dict(
        fallback_inputs=3, fallback_identity=2, fallback_uniform=1, fallback_unclaimed_outputs=2, fallback_no_entry=0
    )


def test_pmi_hand_corpus():
    pairs = [("a", "A"), ("a b", "A B"), ("b", "B")]
    cooc = cooccurrence(encode_pairs(pairs))
    vals = pmi_values(cooc).toarray()
    # #(a,A) = 2, #(a) = #(A) = 2, |D| = 3: pmi = log(2 / 4) + log 3 = log 1.5; pmi(a;B) = log(1/4 * 3)
    sv, tv = cooc.src_vocab, cooc.tgt_vocab
    assert vals[sv.index("a"), tv.index("A")] == pytest.approx(math.log(1.5))
    assert vals[sv.index("a"), tv.index("B")] == pytest.approx(math.log(0.75))
    entries, _ = build_lexicon(pairs, "pmi", temperature=1.0)
    lex = as_map(entries)
    assert lex["a"]["A"] == pytest.approx(1.5 / 2.25)
    assert lex["a"]["B"] == pytest.approx(0.75 / 2.25)
    # raw scores are a per-row shift of eq. 13, non-negative, same argmax
    raw = as_map(build_lexicon(pairs, "pmi")[0])
    assert raw["a"]["A"] - raw["a"]["B"] == pytest.approx(math.log(1.5) - math.log(0.75))
    assert min(s for r in raw.values() for s in r.values()) >= 0
    # temperature 0: the argmax only
    assert as_map(build_lexicon(pairs, "pmi", temperature=0.0)[0])["a"] == {"A": 1.0}


HAND = [("a b", "A B"), ("a", "A"), ("b", "B")]


def test_ibm1_one_em_step_by_hand():
    corpus = encode_pairs(HAND)
    table = build_pair_table(corpus)
    res = train_direction(corpus, table, reverse=False, model=1, iterations=2, keep_tables=True)
    # uniform start; pair 1: each target token splits 1/3 over (NULL, a, b); pair 2: 1/2 over (NULL, a)
    # c(A|a) = 1/3 + 1/2, c(B|a) = 1/3  ->  t(A|a) = 5/7, t(B|a) = 2/7; c(A|NULL) = c(B|NULL) -> 1/2 each
    sv, tv = corpus.src.vocab, corpus.tgt.vocab
    k = {(sv[table.rows[q]], tv[table.indices[q]]): q for q in range(len(table.indices))}
    assert res.t[k[("a", "A")]] == pytest.approx(5 / 7)
    assert res.t[k[("a", "B")]] == pytest.approx(2 / 7)
    assert res.t_null[tv.index("A")] == pytest.approx(0.5)


def test_ibm2_one_em_step_by_hand():
    corpus = encode_pairs(HAND)
    table = build_pair_table(corpus)
    res = train_direction(corpus, table, reverse=False, model=2, iterations=2, optimize_tension=False, keep_tables=True)
    # tension 4, p0 = 0.08; pair 1 (m = n = 2): target 1 prefers source 1 by exp(-4 * 0) vs exp(-4 * 1/2)
    # c(A|a) = 0.92 / (1 + e^-2) + 0.92, c(B|a) = 0.92 e^-2 / (1 + e^-2)
    z = 1 + math.exp(-2)
    c_aa, c_ab = 0.92 / z + 0.92, 0.92 * math.exp(-2) / z
    sv, tv = corpus.src.vocab, corpus.tgt.vocab
    k = {(sv[table.rows[q]], tv[table.indices[q]]): q for q in range(len(table.indices))}
    assert res.t[k[("a", "A")]] == pytest.approx(c_aa / (c_aa + c_ab))


@pytest.mark.parametrize("method", ["ibm1", "ibm2"])
@pytest.mark.parametrize("sym", ["intersect", "grow-diag-final-and", "union"])
def test_ibm_hand_corpus_lexicon(method, sym):
    entries, _ = build_lexicon(HAND, method, symmetrization=sym, fallback=False)
    lex = as_map(entries)
    assert {v: max(r, key=r.get) for v, r in lex.items()} == {"a": "A", "b": "B"}
    assert lex["a"]["A"] == 2.0  # linked in pairs 1 and 2 (eq. 12 counts links)


def test_symmetrization_heuristics_by_hand():
    # one pair, 4 x 4; forward links (src, tgt): (0,0) (1,1) (3,3); reverse: (0,0) (1,1) (3,2)
    corpus = encode_pairs([("a b c d", "A B C D")])
    arr = lambda *x: np.array(x, np.int32)  # noqa: E731
    f = Links(arr(0, 0, 0), arr(0, 1, 3), arr(0, 1, 3))
    r = Links(arr(0, 0, 0), arr(0, 1, 3), arr(0, 1, 2))
    get = lambda h: set(symmetrize(f, r, corpus, h).per_sentence(1)[0])  # noqa: E731
    assert get("intersect") == {(0, 0), (1, 1)}
    assert get("union") == {(0, 0), (1, 1), (3, 3), (3, 2)}
    # grow-diag adds nothing (no union point touches (0,0) or (1,1)); final-and then adds the forward point (3,3),
    # joining two unaligned words; the reverse point (3,2) no longer does (d is aligned) and stays out
    assert get("grow-diag-final-and") == {(0, 0), (1, 1), (3, 3)}
    # a union point next to an intersection point that covers an unaligned word is grown
    f2 = Links(arr(0, 0, 0), arr(0, 1, 2), arr(0, 1, 1))
    r2 = Links(arr(0, 0), arr(0, 1), arr(0, 1))
    assert set(symmetrize(f2, r2, corpus, "grow-diag-final-and").per_sentence(1)[0]) == {(0, 0), (1, 1), (2, 1)}


def _exact_bayes_posterior(pairs, alpha=2.0, gamma=0.95, kappa=0.1):
    """Enumerate every lexicon over the co-occurring pairs; the model written out independently of bayes.py."""
    src_vocab = sorted({w for s, _ in pairs for w in s.split()})
    cand = sorted({(v, w) for s, t in pairs for v in s.split() for w in t.split()})
    post = {c: 0.0 for c in cand}
    total = 0.0
    for bits in itertools.product([0, 1], repeat=len(cand)):
        lex = {c for c, b in zip(cand, bits) if b}
        in_lex = {v for v, _ in lex}
        z = sum(kappa if v in in_lex else 1.0 for v in src_vocab)
        ll = -alpha * len(lex)
        for s, t in pairs:
            ys = set(t.split())
            for x in s.split():
                pnr = (kappa if x in in_lex else 1.0) / z
                pr = sum((1.0 / sum(1 for (v2, w2) in lex if w2 == w)) if (x, w) in lex else 0.0 for w in ys) / len(ys)
                ll += math.log((1 - gamma) * pnr + gamma * pr)
        p = math.exp(ll)
        total += p
        for c, b in zip(cand, bits):
            if b:
                post[c] += p
    return {c: p / total for c, p in post.items()}


def test_bayes_sampler_matches_exact_posterior():
    pairs = [("a", "A"), ("a b", "A B"), ("b", "B")]
    exact = _exact_bayes_posterior(pairs)
    entries, _ = build_lexicon(pairs, "bayes", fallback=False, samples=20000, chains=5, thin=5, seed=3)
    got = {(v, w): s for v, w, s in entries}
    for c, p in exact.items():
        assert got.get(c, 0.0) == pytest.approx(p, abs=0.03), (c, p, got.get(c))
    # reproducible with the same seed
    again, _ = build_lexicon(pairs, "bayes", fallback=False, samples=500, seed=7)
    once, _ = build_lexicon(pairs, "bayes", fallback=False, samples=500, seed=7)
    assert again == once


def test_alignments_file(tmp_path):
    pairs = [("a b", "A B"), ("a", "A"), ("b c", "B")]
    path = tmp_path / "al.txt"
    path.write_text("0-0 1-1\n0-0\n0-0 0-0\n")
    entries, prov = build_lexicon(pairs, "alignments", alignments=str(path), fallback=False)
    assert as_map(entries) == {"a": {"A": 2.0}, "b": {"B": 2.0}}  # the repeated 0-0 counts once
    assert "links=4" in prov[-1]
    bad = tmp_path / "bad.txt"
    bad.write_text("0-0 1-1\n0-0\n2-0\n")
    with pytest.raises(CorpusError, match=r"bad.txt:3: link 2-0 is outside"):
        build_lexicon(pairs, "alignments", alignments=str(bad))
    short = tmp_path / "short.txt"
    short.write_text("0-0\n")
    with pytest.raises(CorpusError, match="has 1 lines but the corpus has 3"):
        build_lexicon(pairs, "alignments", alignments=str(short))
    junk = tmp_path / "junk.txt"
    junk.write_text("0-0\n0:0\n0-0\n")
    with pytest.raises(CorpusError, match="junk.txt:2"):
        build_lexicon(pairs, "alignments", alignments=str(junk))


def test_top_k_and_min_count():
    pairs = [("a", "A"), ("a b", "A B"), ("b", "B"), ("a c", "C A")]
    full = as_map(build_lexicon(pairs, "pmi", fallback=False)[0])
    assert len(full["a"]) == 3
    top1 = as_map(build_lexicon(pairs, "pmi", top_k=1, fallback=False)[0])
    assert set(top1["a"]) == {max(full["a"], key=full["a"].get)}
    mc = as_map(build_lexicon(pairs, "pmi", min_count=2, fallback=False)[0])
    # #(a, A) = 3 and #(b, B) = 2 reach 2; #(a, B) = #(a, C) = #(b, A) = #(c, *) = 1 do not
    assert mc == {"a": {"A": pytest.approx(full["a"]["A"])}, "b": {"B": pytest.approx(full["b"]["B"])}}


def _python_encode(sentences):
    """Reference encoding: str.split() per sentence, ids in first-occurrence order."""
    vocab, ids, lengths = {}, [], []
    for s in sentences:
        toks = s.split()
        lengths.append(len(toks))
        ids.extend(vocab.setdefault(t, len(vocab)) for t in toks)
    return list(vocab), ids, np.r_[0, np.cumsum(lengths)]


@pytest.mark.parametrize(
    "case",
    [
        "ascii",
        "unicode",
        "growth",
        "unnormalised",
        "newline_inside",
        "nbsp",
        "empty_sentence",
        "trailing_space",
        "file_separator",
    ],
)
def test_encode_side_fast_path_matches_str_split(case):
    from lexical_offline.lexicon.counts import _encode_side_compiled, encode_side

    rng = np.random.default_rng(0)
    if case == "ascii":
        sents = ["a b a", "c", "b c d a"]
    elif case == "unicode":
        sents = ["我 爱 你", "你 好 吗 我", "é è e ﬁ ﬁ"]
    elif case == "growth":  # more types than the initial hash table holds: exercises rehashing
        sents = [" ".join(f"w{x}" for x in rng.integers(0, 100_000, size=30)) for _ in range(3000)]
    elif case == "unnormalised":  # double spaces and tabs: the Python path must take over, same answer
        sents = ["a  b\tc", " d e ", "a"]
    elif case == "newline_inside":
        sents = ["a\nb", "c d"]
    elif case == "nbsp":  # U+3000 and U+00A0 are whitespace to str.split()
        sents = ["a\u3000b c", "d\xa0e"]
    elif case == "empty_sentence":
        sents = ["a", "", "b"]
    elif case == "trailing_space":
        sents = ["a", "b "]
    else:  # U+001C is whitespace to str.split()
        sents = ["a\x1cb", "c"]
    # the compiled fast path is taken exactly for the normalised inputs
    fast = _encode_side_compiled(sents)
    assert (fast is not None) == (case in ("ascii", "unicode", "growth"))
    side = encode_side(sents)
    vocab, ids, offsets = _python_encode(sents)
    assert side.vocab == vocab
    assert side.ids.tolist() == ids
    assert side.offsets.tolist() == offsets.tolist()


def test_select_entries_matches_sort_reference():
    import scipy.sparse as sp

    from lexical_offline.lexicon.builder import _select_entries

    rng = np.random.default_rng(1)
    dense = rng.integers(0, 4, size=(40, 30)) * (rng.random((40, 30)) < 0.5)  # many ties, empty rows
    counts = sp.csr_matrix(dense)
    counts.sort_indices()
    scores = counts.data.astype(np.float64)
    for k, min_count in [(1, 1), (3, 1), (3, 2), (0, 2), (50, 1)]:
        rows, pos, below = _select_entries(counts.indptr, counts.indices, scores, counts.data, float(min_count), k)
        want = []
        for r in range(counts.shape[0]):
            lo, hi = counts.indptr[r], counts.indptr[r + 1]
            cand = [p for p in range(lo, hi) if counts.data[p] >= min_count]
            cand.sort(key=lambda p: (-scores[p], counts.indices[p]))  # higher score, then lower target id
            want += [(r, p) for p in sorted(cand[:k] if k > 0 else cand)]
        assert list(zip(rows.tolist(), pos.tolist())) == want
        assert below == int((counts.data < min_count).sum())


def test_link_precision_recall():
    res = link_precision_recall([[(0, 0), (1, 1)], [(0, 0)]], [[(0, 0)], [(0, 0), (0, 1)]])
    assert res["precision"] == pytest.approx(2 / 3) and res["recall"] == pytest.approx(2 / 3)


# ---------------------------------------------------------------------------------------- command line
def test_cli_writes_lexicon_and_errors(tmp_path, capsys):
    tool = load_tool("build_lexicon")
    src, tgt = tmp_path / "c.src", tmp_path / "c.tgt"
    src.write_text("bless him\nblessed her\nhim\nher\n")
    tgt.write_text("BLESS HIM\nBLESS HER\nHIM\nHER\n")
    out = tmp_path / "lex.tsv"
    assert tool.main(["--method", "simple", "--src", str(src), "--tgt", str(tgt), "-o", str(out), "--no-progress"]) == 0
    entries, prov = read_lexicon(str(out))
    assert ("him", "HIM", 2.0) in entries
    assert any("method: simple" in p for p in prov) and any("epsilon=3" in p for p in prov)
    assert any(str(src) in p for p in prov)
    # unequal line counts
    tgt.write_text("BLESS HIM\nBLESS HER\nHIM\n")
    assert tool.main(["--method", "pmi", "--src", str(src), "--tgt", str(tgt), "-o", str(out)]) == 2
    assert "has 4 lines but" in capsys.readouterr().err
    # an empty side names the line
    tsv = tmp_path / "c.tsv"
    tsv.write_text("a\tA\nb\t \n")
    assert tool.main(["--method", "simple", "--tsv", str(tsv), "-o", str(out)]) == 2
    assert f"{tsv}:2" in capsys.readouterr().err
    # empty corpus
    tsv.write_text("")
    assert tool.main(["--method", "simple", "--tsv", str(tsv), "-o", str(out)]) == 2
    assert "empty corpus" in capsys.readouterr().err


def test_plot_lexicon(tmp_path):
    tool = load_tool("build_lexicon")
    tsv = tmp_path / "c.tsv"
    tsv.write_text("a\tA\na b\tA B\nb\tB\n")
    lex = tmp_path / "lex.tsv"
    assert tool.main(["--method", "pmi", "--tsv", str(tsv), "-o", str(lex), "--no-progress"]) == 0
    plot = load_tool("plot_lexicon")
    png = tmp_path / "lex.png"
    assert plot.main([str(lex), "-o", str(png), "--words", "a,b,zz"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fast_align_aligner_runs():
    pytest.importorskip("systran_align")
    entries, prov = build_lexicon(HAND * 5, "ibm1", aligner="fast_align", fallback=False)
    lex = as_map(entries)
    assert max(lex["a"], key=lex["a"].get) == "A"
    assert "aligner=fast_align" in prov[1]


def test_each_method_is_a_learner_whose_config_defaults_are_the_command_lines():
    from lexical_offline.cli.build_lexicon import parse_args
    from lexical_offline.lexicon.learners import LEARNERS, IbmConfig, SimpleConfig, learner_for

    assert sorted(LEARNERS) == ["alignments", "bayes", "dictionary", "ibm1", "ibm2", "pmi", "simple"]
    for method in sorted(set(LEARNERS) - {"alignments", "dictionary"}):
        args = parse_args(["--tsv", "c.tsv", "--method", method, "-o", "lex.tsv"])
        assert LEARNERS[method].Config.from_args(args) == LEARNERS[method].Config(), method
    args = parse_args(["--tsv", "c.tsv", "--method", "dictionary", "--dictionary", "d.tsv", "-o", "lex.tsv"])
    assert LEARNERS["dictionary"].Config.from_args(args) == LEARNERS["dictionary"].Config(dictionary="d.tsv")
    args = parse_args(["--tsv", "c.tsv", "--alignments", "a.txt", "-o", "lex.tsv"])
    assert LEARNERS["alignments"].Config.from_args(args).alignments == "a.txt"
    # keywords of another method are ignored (one call serves several methods), unknown ones are errors
    assert learner_for("simple", epsilon=2, samples=9).config == SimpleConfig(epsilon=2)
    with pytest.raises(TypeError, match="unknown lexicon option.*epsilonn"):
        learner_for("simple", epsilonn=2)
    with pytest.raises(TypeError, match="takes a SimpleConfig, got IbmConfig"):
        learner_for("simple", IbmConfig())
    with pytest.raises(ValueError, match="aligner must be"):
        learner_for("ibm2", aligner="giza")
