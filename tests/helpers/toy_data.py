"""The toy tasks (aX -> BX, a slice of SCAN's grammar), the minimal layouts of every recipe task, and fairseq-preprocess
of a parallel corpus."""

import os
import random

from tests.helpers.environment import run_cli

SOURCE_WORDS = ["a1", "a2", "a3", "a4", "a5", "a6", "and", "twice"]
LEXICON = {"a1": "B1", "a2": "B2", "a3": "B3", "a4": "B4", "a5": "B5", "a6": "B6"}


def make_toy_pairs(n, seed):
    """A tiny compositional task: 'aX' -> 'BX', 'aX twice' -> 'BX BX', 'P and Q' -> 'P' 'Q'."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):

        def phrase():
            w = rng.choice(list(LEXICON))
            if rng.random() < 0.3:
                return f"{w} twice", f"{LEXICON[w]} {LEXICON[w]}"
            return w, LEXICON[w]

        s, t = phrase()
        if rng.random() < 0.5:
            s2, t2 = phrase()
            s, t = f"{s} and {s2}", f"{t} {t2}"
        pairs.append((s, t))
    return pairs


def write_split(prefix, pairs):
    with open(prefix + ".src", "w") as fs, open(prefix + ".tgt", "w") as ft:
        for s, t in pairs:
            fs.write(s + "\n")
            ft.write(t + "\n")


_PRIMS = {"walk": "I_WALK", "run": "I_RUN", "look": "I_LOOK", "jump": "I_JUMP"}


def scan_line(rng):
    """One SCAN-grammar command and its actions (a small part of the grammar: primitives, turn, twice/thrice,
    and)."""

    def phrase():
        if rng.random() < 0.25:
            d = rng.choice(["left", "right"])
            cmd, act = f"turn {d}", [f"I_TURN_{d.upper()}"]
        else:
            w = rng.choice(list(_PRIMS))
            cmd, act = w, [_PRIMS[w]]
            if rng.random() < 0.3:
                d = rng.choice(["left", "right"])
                cmd, act = f"{w} {d}", [f"I_TURN_{d.upper()}", _PRIMS[w]]
        r = rng.choice([1, 1, 2, 3])
        if r > 1:
            cmd, act = f"{cmd} {'twice' if r == 2 else 'thrice'}", act * r
        return cmd, act

    cmd, act = phrase()
    if rng.random() < 0.4:
        c2, a2 = phrase()
        cmd, act = f"{cmd} and {c2}", act + a2
    return f"IN: {cmd} OUT: {' '.join(act)}"


def scan_full_line(rng):
    """One command of SCAN's whole grammar (Lake & Baroni 2018, figure 6: opposite, around, and, after included) and
    its actions: a stand-in for SCAN's training file with its share of function words and long outputs."""

    def direction_phrase():
        d = rng.choice(["left", "right"])
        turn = f"I_TURN_{d.upper()}"
        verb = rng.choice(["turn", *_PRIMS])
        act = [] if verb == "turn" else [_PRIMS[verb]]
        how = rng.choice(["", "opposite", "around"])
        if how == "opposite":
            return f"{verb} opposite {d}", [turn, turn] + act
        if how == "around":
            return f"{verb} around {d}", ([turn] + act) * 4
        return f"{verb} {d}", [turn] + act

    def phrase():
        if rng.random() < 0.3:
            w = rng.choice(list(_PRIMS))
            cmd, act = w, [_PRIMS[w]]
        else:
            cmd, act = direction_phrase()
        r = rng.choice([1, 2, 3])
        if r > 1:
            cmd, act = f"{cmd} {'twice' if r == 2 else 'thrice'}", act * r
        return cmd, act

    cmd, act = phrase()
    join = rng.choice(["", "and", "after"])
    if join:
        c2, a2 = phrase()
        cmd, act = f"{cmd} {join} {c2}", (act + a2 if join == "and" else a2 + act)
    return f"IN: {cmd} OUT: {' '.join(act)}"


def write_tiny_layouts(root):
    """Minimal files of every recipe task's layout (examples/*/run.sh --data), for the fast checks (nothing is
    trained on them)."""
    rng = random.Random(1)
    scan = root / "scan" / "template_split"
    scan.mkdir(parents=True)
    for name in ("tasks_train_template_around_right.txt", "tasks_test_template_around_right.txt"):
        (scan / name).write_text("".join(scan_line(rng) + "\n" for _ in range(20)))
    (root / "scan" / "tasks_train_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(20)))
    (root / "scan" / "tasks_test_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(5)))
    cogs = root / "cogs"
    cogs.mkdir()
    line = "A cat ran .\tcat ( x _ 1 ) AND run . agent ( x _ 2 , x _ 1 )\t{}\n"
    (cogs / "train.tsv").write_text(line.format("in_distribution") * 5)
    (cogs / "dev.tsv").write_text(line.format("in_distribution") * 2)
    (cogs / "gen.tsv").write_text(line.format("prim_to_subj_common") + line.format("cp_recursion"))
    eng = root / "eng_cmn"
    eng.mkdir()
    for split in ("train", "dev", "test"):
        (eng / f"cmn.txt_{split}_tokenized.tsv").write_text("I am here .\t我 在 这里 。\n" * 3)


def tree_state(root):
    """Every file under ``root`` (relative path -> SHA-1 of its bytes): equal before and after means untouched."""
    import hashlib

    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def make_toy_data(root):
    """Raw and fairseq-preprocessed toy data in ``root``: 60 train, 20 valid, 20 test pairs, and a lexicon file."""
    write_split(str(root / "train"), make_toy_pairs(60, 1))
    write_split(str(root / "valid"), make_toy_pairs(20, 2))
    write_split(str(root / "test"), make_toy_pairs(20, 3))
    with open(root / "lexicon.tsv", "w") as f:
        f.write("# method: hand-written toy lexicon\n")
        for s, t in LEXICON.items():
            f.write(f"{s}\t{t}\t1\n")
    binarise(root, root / "bin")
    return root


def binarise(folder, dest, *options, name="{}", languages=("src", "tgt")):
    """fairseq-preprocess of a parallel corpus: FOLDER/NAME.src and .tgt for NAME train, valid and test (``name``: a
    pattern of the split's name) into ``dest``, with ``options`` (--joined-dictionary, ...); ``languages``: the
    suffixes of the source and target files (and so of the data-bin's files)."""
    splits = [(f"--{split}pref", os.path.join(folder, name.format(split))) for split in ("train", "valid", "test")]
    prefixes = [a for pair in splits for a in pair]
    languages = ("--source-lang", languages[0], "--target-lang", languages[1])
    run_cli("fairseq-preprocess", *languages, *prefixes, *options, "--destdir", dest, "--workers", "1")


def write_file(tmp_path, text, name="lex.tsv", mode="w"):
    """``text`` (bytes with mode "wb") as the file ``name`` in ``tmp_path``; returns its path."""
    path = tmp_path / name
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)
