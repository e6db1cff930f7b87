"""Positional unknown-word markers (lexical_offline/unk_markers.py, tools/unk_markers.py)."""

import os
import subprocess
import sys

import pytest

from tests.helpers.environment import REPO, run_cli
from tests.helpers.toy_data import binarise
from tests.helpers.tiny_runs import tiny_generate_args, tiny_train_args

from lexical_offline import unk_markers as um

MODULE = os.path.join(REPO, "lexical_offline", "unk_markers.py")
TOOL = os.path.join(REPO, "tools", "unk_markers.py")
VOCAB = {"the", "cat", "sat", "on", "mat", "le", "chat"}


def test_oov_source_words_get_their_position_and_the_target_copies_the_same_marker():
    src = "the Zorg sat on Blix".split()
    tgt = "le Zorg chat Blix Quux".split()
    s, t, stats = um.mark(src, tgt, VOCAB, num_markers=10)
    assert s == ["the", "<unk-1>", "sat", "on", "<unk-4>"]
    assert t == ["le", "<unk-1>", "chat", "<unk-4>", "<unk>"]  # Quux is in no source position: plain <unk>
    assert (stats.source_marked, stats.source_unk, stats.target_marked, stats.target_unk) == (2, 0, 2, 1)


def test_a_repeated_oov_word_keeps_the_marker_of_its_first_occurrence():
    s, t, _ = um.mark("Zorg and Zorg".split(), "Zorg".split(), VOCAB, num_markers=10)
    assert s == ["<unk-0>", "<unk-1>", "<unk-0>"] and t == ["<unk-0>"]


def test_positions_past_the_last_marker_are_plain_unk_and_test_sources_need_no_target():
    s, t, stats = um.mark("a b c".split(), None, set(), num_markers=2)
    assert s == ["<unk-0>", "<unk-1>", "<unk>"] and t is None
    assert stats.source_unk == 1 and stats.target_tokens == 0


def test_in_vocabulary_words_and_fairseq_specials_are_untouched():
    s, t, _ = um.mark("the cat </s> <unk>".split(), "le chat".split(), VOCAB, num_markers=5)
    assert s == ["the", "cat", "</s>", "<unk>"] and t == ["le", "chat"]


def test_postprocess_restores_the_source_words_and_round_trips():
    src = "the Zorg sat on Blix".split()
    tgt = "le Zorg chat Blix".split()
    _, marked_tgt, _ = um.mark(src, tgt, VOCAB, num_markers=10)
    restored, unresolved = um.unmark(marked_tgt, src)
    assert restored == tgt and unresolved == 0
    out, unresolved = um.unmark(["<unk-7>", "<unk-0>", "<unk>"], ["x"])
    assert out == ["<unk>", "x", "<unk>"] and unresolved == 1


def test_vocabulary_is_the_most_frequent_words_then_the_markers():
    counts = um.count_words(["b a a </s> <unk-3>", "c b a"])
    vocab = um.build_vocabulary(counts, size=2)
    assert vocab == [("a", 3), ("b", 2)]  # specials and marker-like tokens are not vocabulary words
    lines = um.dictionary_lines(vocab, num_markers=3)
    assert lines == ["a 3", "b 2", "<unk-0> 0", "<unk-1> 0", "<unk-2> 0"]
    words, n = um.read_vocabulary(lines)
    assert words == {"a", "b"} and n == 3


def test_vocabulary_without_markers_or_with_gaps_is_refused():
    with pytest.raises(ValueError, match="no <unk-N> marker"):
        um.read_vocabulary(["a 3", "b 2"])
    with pytest.raises(ValueError, match="gaps.*<unk-1>"):
        um.read_vocabulary(["a 3", "<unk-0> 0", "<unk-2> 0"])


def test_the_dictionary_file_loads_as_a_fairseq_dictionary(tmp_path):
    from fairseq.data import Dictionary

    path = tmp_path / "dict.txt"
    path.write_text("\n".join(um.dictionary_lines([("a", 3), ("b", 2)], num_markers=4)) + "\n")
    d = Dictionary.load(str(path))
    assert d.index("<unk-3>") != d.unk() and d.index("a") != d.unk()
    assert d.string(d.encode_line("a <unk-2> zzz", add_if_not_exist=False)[:-1]) == "a <unk-2> <unk>"


def test_the_logic_module_imports_neither_fairseq_nor_torch():
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('m', {MODULE!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['m'] = m; spec.loader.exec_module(m)\n"
        "assert m.mark(['x'], None, set(), 1)[0] == ['<unk-0>']\n"
        "assert 'fairseq' not in sys.modules and 'torch' not in sys.modules, 'imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _tool(*args):
    proc = subprocess.run(
        [sys.executable, TOOL, *map(str, args)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow  # four program starts, each importing fairseq
def test_command_line_vocab_preprocess_postprocess(tmp_path):
    (tmp_path / "train.src").write_text("the cat sat\nthe Zorg sat on the mat\n")
    (tmp_path / "train.tgt").write_text("le chat le\nle Zorg sat\n")
    _tool(
        "vocab",
        tmp_path / "train.src",
        tmp_path / "train.tgt",
        "--size",
        "3",
        "--markers",
        "8",
        "-o",
        tmp_path / "dict.txt",
    )
    lines = (tmp_path / "dict.txt").read_text().splitlines()
    assert lines == ["le 3", "sat 3", "the 3"] + [f"<unk-{n}> 0" for n in range(8)]
    _tool(
        "preprocess",
        "--vocab",
        tmp_path / "dict.txt",
        "--source",
        tmp_path / "train.src",
        "--target",
        tmp_path / "train.tgt",
        "--source-out",
        tmp_path / "pg.src",
        "--target-out",
        tmp_path / "pg.tgt",
    )
    assert (tmp_path / "pg.src").read_text().splitlines() == ["the <unk-1> sat", "the <unk-1> sat <unk-3> the <unk-5>"]
    assert (tmp_path / "pg.tgt").read_text().splitlines() == ["le <unk> le", "le <unk-1> sat"]
    # postprocess from plain text and from fairseq-generate output (H-<id> lines, any order)
    (tmp_path / "hyp.txt").write_text("le <unk-0>\n<unk-1> <unk-9>\n")
    _tool(
        "postprocess", "--source", tmp_path / "train.src", "--hypotheses", tmp_path / "hyp.txt", "-o", tmp_path / "out"
    )
    assert (tmp_path / "out").read_text().splitlines() == ["le the", "Zorg <unk>"]
    (tmp_path / "gen.out").write_text("S-1\tx\nS-0\ty\nH-1\t-0.5\t<unk-1> sat\nH-0\t-0.1\tle <unk-1>\n")
    _tool(
        "postprocess", "--source", tmp_path / "train.src", "--hypotheses", tmp_path / "gen.out", "-o", tmp_path / "out2"
    )
    assert (tmp_path / "out2").read_text().splitlines() == ["le cat", "Zorg sat"]


@pytest.mark.slow
def test_marker_pipeline_with_pgn_transformer_end_to_end(tmp_path):
    """Names never seen in training come out right at test time: markers in a joined dictionary, pgn_transformer
    (identity lexicon) trained and decoded by the fairseq programs, postprocess."""
    import random

    rng = random.Random(0)
    names = [f"N{i}" for i in range(400)]
    verbs = {"runs": "corre", "sleeps": "duerme", "eats": "come"}

    def pairs(pool, n):
        out = []
        for _ in range(n):
            a, b, verb = rng.choice(pool), rng.choice(pool), rng.choice(list(verbs))
            if rng.random() < 0.5:
                out.append((f"{a} {verb}", f"{verbs[verb]} {a}"))
            else:  # two names, swapped in the output: markers <unk-0> and <unk-2> move
                out.append((f"{a} {verb} {b}", f"{b} {verbs[verb]} {a}"))
        return out

    splits = {"train": pairs(names[:300], 600), "valid": pairs(names[300:350], 20), "test": pairs(names[350:], 20)}
    for split, data in splits.items():
        (tmp_path / f"{split}.src").write_text("".join(s + "\n" for s, _ in data))
        (tmp_path / f"{split}.tgt").write_text("".join(t + "\n" for _, t in data))
    # The command line is tested above; here the same steps in-process (each CLI start costs seconds).
    counts = um.count_words(
        (tmp_path / "train.src").read_text().splitlines() + (tmp_path / "train.tgt").read_text().splitlines()
    )
    (tmp_path / "dict.txt").write_text("\n".join(um.dictionary_lines(um.build_vocabulary(counts, 6), 4)) + "\n")
    words, num_markers = um.read_vocabulary((tmp_path / "dict.txt").read_text().splitlines())
    assert words == set(verbs) | set(verbs.values())  # the names are all out of the vocabulary
    for split, data in splits.items():
        marked = [um.mark(s.split(), t.split(), words, num_markers) for s, t in data]
        (tmp_path / f"{split}.pg.src").write_text("".join(" ".join(m[0]) + "\n" for m in marked))
        (tmp_path / f"{split}.pg.tgt").write_text("".join(" ".join(m[1]) + "\n" for m in marked))
    binarise(tmp_path, tmp_path / "bin", "--joined-dictionary", "--srcdict", tmp_path / "dict.txt", name="{}.pg")
    size = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32"]
    size += ["--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--share-all-embeddings"]
    options = ("--arch", "pgn_transformer", *size, "--no-save-optimizer-state", "--save-interval", "1000")
    options += ("--dropout", "0")
    settings = dict(updates=100, batch_size=32, log_format="simple", validation=False)
    run_cli("fairseq-train", *tiny_train_args(tmp_path / "bin", tmp_path / "ckpt", *options, **settings))
    checkpoint = tmp_path / "ckpt" / "checkpoint_last.pt"
    gen = run_cli(
        "fairseq-generate", *tiny_generate_args(tmp_path / "bin", checkpoint, "--beam", "5", "--batch-size", "32")
    )
    (tmp_path / "gen.out").write_text(gen.stdout)
    _tool(
        "postprocess", "--source", tmp_path / "test.src", "--hypotheses", tmp_path / "gen.out", "-o", tmp_path / "hyp"
    )
    hyps = (tmp_path / "hyp").read_text().splitlines()
    refs = (tmp_path / "test.tgt").read_text().splitlines()
    correct = sum(h == r for h, r in zip(hyps, refs))
    assert correct >= 18, list(zip(hyps, refs))
