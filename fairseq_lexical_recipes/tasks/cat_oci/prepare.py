"""What examples/cat_oci writes before its runs (Preparation): the split of the corpus (WORK/data, split.json), then,
as the stage of each training size (runner.Stage), its joint SentencePiece model, the pieces, the fairseq dictionary
and data-bin, and for pgn_lex the lexicon over pieces. Each is made once and reused while its inputs are unchanged
(steps.Step); only the pipeline's files are written over (ownership)."""

from __future__ import annotations

import collections
import os
import random
import tempfile
from typing import Dict, List, Optional, Tuple

from lexical_offline.textio import read_lines, write_parallel

from fairseq_lexical_recipes import ownership
from fairseq_lexical_recipes.console import RecipeError, hms, say, show
from fairseq_lexical_recipes.process import run_logged
from fairseq_lexical_recipes.rundir import PREPROCESS_WRITES, refuse_foreign_writes, remove_owned
from fairseq_lexical_recipes.steps import Step
from fairseq_lexical_recipes.tasks.cat_oci.recipe import FILES, SPLITS, CatOciRecipe
from fairseq_lexical_recipes.textio import count_entries, read_corpus, sha1_files, write_json


def read_data(data: str, limit: Optional[int]) -> List[Tuple[str, str]]:
    paths = {lang: os.path.join(data, name) for lang, name in FILES.items()}
    missing = [p for p in paths.values() if not os.path.isfile(p)]
    if missing:
        raise RecipeError(f"data file not found: {', '.join(missing)} (--data {data})")
    pairs = read_corpus(paths["ca"], tgt_path=paths["oc"])  # whitespace-normalised, equal line counts checked
    return pairs[:limit] if limit else pairs


def split(pairs, n_dev: int, n_test: int, seed: int):
    """Seeded shuffle; dev and test are drawn from pairs whose Catalan sentence occurs once in the corpus (Tatoeba
    repeats 855 of them, and the machine-translated Occitan repeats with them), so no dev/test source is seen in
    training. The rest, in the shuffled order, is the training pool; the training sizes are its prefixes (nested)."""
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    count = collections.Counter(s for s, _ in pairs)
    once = [i for i in order if count[pairs[i][0]] == 1]
    if len(once) < n_dev + n_test:
        raise RecipeError(f"only {len(once)} pairs have a unique source; --dev-size + --test-size = {n_dev + n_test}")
    dev, test = once[:n_dev], once[n_dev : n_dev + n_test]
    held = set(dev) | set(test)
    train = [pairs[i] for i in order if i not in held]
    return train, [pairs[i] for i in dev], [pairs[i] for i in test]


class Preparation:
    """The split (``split``), then each training size's SentencePiece model, pieces, data-bin and lexicon
    (``size``); ``data_step``: what a size's data-bin is made from, the key its runs' fingerprints hold."""

    def __init__(self, recipe: CatOciRecipe):
        self.recipe, self.invocation = recipe, recipe.invocation
        self.data_steps: Dict[int, Step] = {}

    def split(self) -> None:
        """WORK/data: the dev and test pairs, the training pool up to the largest size, split.json."""
        inv, a = self.invocation, self.invocation.options
        pairs = read_data(a.data, a.limit)
        if inv.src == "oc":
            pairs = [(t, s) for s, t in pairs]
        train, dev, test = split(pairs, a.dev_size, a.test_size, a.split_seed)
        largest = inv.sizes[-1]
        if largest > len(train):
            raise RecipeError(
                f"--sizes {largest}: only {len(train)} training pairs are left after "
                f"{a.dev_size} dev + {a.test_size} test"
            )
        info = {
            "corpus": {k: os.path.join(os.path.abspath(a.data), v) for k, v in FILES.items()},
            "pairs": len(pairs),
            "limit": a.limit,
            "split_seed": a.split_seed,
            "direction": a.direction,
            "train_pool": len(train),
            "dev": len(dev),
            "test": len(test),
            "sizes": list(inv.sizes),
            "duplicate_pairs_in_training": len(train[:largest]) - len(set(train[:largest])),
            "identical_source_target_in_test": sum(s == t for s, t in test),
        }
        with ownership.writing(inv.work + "/data"):
            for name, part in (("train", train[:largest]), ("valid", dev), ("test", test)):
                write_parallel(f"{inv.work}/data/{name}", part, inv.src, inv.tgt)
            write_json(inv.work + "/data/split.json", info)
        say(
            f"== data: {len(pairs)} pairs from {a.data} -> {len(dev)} dev + {len(test)} test (seed {a.split_seed}; "
            f"their sources occur once in the corpus) + training pool {len(train)}; sizes {list(inv.sizes)} are its "
            f"prefixes ({info['duplicate_pairs_in_training']} repeated pairs kept in the largest)"
        )

    def data_step(self, size: int) -> Step:
        """SentencePiece pieces and the data-bin of one training size, and what they are made from (hashed once:
        ``split`` has written the data before, and every run's fingerprint reads it)."""
        if size in self.data_steps:
            return self.data_steps[size]
        inv, d, data = self.invocation, self.recipe.size_dir(size), self.invocation.work + "/data"
        key = {
            "data_sha1": sha1_files([f"{data}/{s}.{lang}" for s in SPLITS for lang in (inv.src, inv.tgt)]),
            "size": size,
            "vocab_size": inv.options.vocab_size,
            "model_type": "bpe",
            "character_coverage": 1.0,
        }
        self.data_steps[size] = Step(f"n{size} data", d + "/prepared.json", key, [f"{d}/bin/dict.{inv.src}.txt"])
        return self.data_steps[size]

    def size(self, size: int) -> None:
        """Joint SentencePiece model, pieces, the fairseq dictionary, data-bin and (for pgn_lex) the lexicon."""
        inv, d = self.invocation, self.recipe.size_dir(size)

        def make():
            os.makedirs(d + "/pieces", exist_ok=True)
            self.make_pieces(size, d, inv.work + "/data")
            cmd = self.recipe.preprocess_command(size)
            # the earlier data-bin's files go (the pipeline's only), a user's file of their names stops the driver
            refuse_foreign_writes(d + "/bin", PREPROCESS_WRITES, "fairseq-preprocess")
            with ownership.writing(d + "/bin"):
                remove_owned(d + "/bin")
                run_logged(cmd, d + "/preprocess.log", what="fairseq-preprocess")

        secs, step, force = None, self.data_step(size), inv.options.force
        if force or not step.up_to_date():
            with ownership.writing(d), ownership.writing(d + "/pieces"):
                secs = step.run(make, force)
        if secs is None:
            say(f"== n{size}: pieces and data-bin up to date ({d})")
        else:
            say(f"== n{size}: SentencePiece + fairseq-preprocess in {d} ({hms(secs)})")
        if "pgn_lex" in inv.systems:
            self.build_lexicon(size, d)

    def make_pieces(self, size: int, d: str, data: str) -> None:
        import sentencepiece as spm  # only needed here (tools/setup_env.sh installs it)

        inv = self.invocation
        vocab_size, src, tgt = inv.options.vocab_size, inv.src, inv.tgt
        train = {lang: read_lines(f"{data}/train.{lang}")[:size] for lang in (src, tgt)}
        # joint model: both sides of this size's training pairs, nothing from dev/test or larger sizes
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
            f.write("\n".join(train[src] + train[tgt]) + "\n")
        try:
            spm.SentencePieceTrainer.train(
                input=f.name,
                model_prefix=d + "/spm",
                vocab_size=vocab_size,
                model_type="bpe",
                character_coverage=1.0,
                normalization_rule_name="identity",  # decoding gives the text back as is
                num_threads=1,
                minloglevel=2,
            )
        except RuntimeError as e:
            raise RecipeError(
                f"SentencePiece training on {size} pairs failed (--vocab-size {vocab_size}?): {e}"
            ) from None
        finally:
            os.remove(f.name)
        sp = spm.SentencePieceProcessor(model_file=d + "/spm.model")
        counts: collections.Counter = collections.Counter()
        unk_lines = 0
        for split_name in SPLITS:
            for lang in (src, tgt):
                lines = train[lang] if split_name == "train" else read_lines(f"{data}/{split_name}.{lang}")
                pieces = sp.encode(lines, out_type=str)
                unk_lines += sum(sp.unk_id() in ids for ids in sp.encode(lines))  # characters outside the model
                if split_name == "train":
                    counts.update(x for p in pieces for x in p)
                with open(f"{d}/pieces/{split_name}.{lang}", "w", encoding="utf-8") as out:
                    out.writelines(" ".join(p) + "\n" for p in pieces)
        # the whole SentencePiece vocabulary is the joined dictionary (fairseq adds its own specials), so source
        # and target share every piece and the identity lexicon can copy any of them
        with open(d + "/dict.txt", "w", encoding="utf-8") as out:
            for i in range(sp.get_piece_size()):
                if not (sp.is_control(i) or sp.is_unknown(i)):
                    out.write(f"{sp.id_to_piece(i)} {counts[sp.id_to_piece(i)]}\n")
        n_tok = sum(counts.values())
        say(
            f"   n{size}: joint SentencePiece BPE, {sp.get_piece_size()} pieces, {n_tok / (2 * size):.1f} pieces per "
            f"training sentence; {unk_lines} dev/test/train lines with characters outside the model"
        )

    def build_lexicon(self, size: int, d: str) -> None:
        inv = self.invocation
        cmd = self.recipe.lexicon_command(size)
        key = {
            "pieces_sha1": sha1_files([f"{d}/pieces/train.{inv.src}", f"{d}/pieces/train.{inv.tgt}"]),
            "command": show(cmd[1:]).replace(inv.work, "$WORK"),
        }
        step = Step(f"n{size} lexicon", d + "/lexicon.json", key, [d + "/lexicon.tsv"], d + "/lexicon.log")
        if not inv.options.force and step.up_to_date():
            return
        with ownership.writing(d):
            secs = step.run(lambda: run_logged(cmd, d + "/lexicon.log", what="build_lexicon.py"), True)
        entries = count_entries(d + "/lexicon.tsv")
        same = sum(
            1
            for line in open(d + "/lexicon.tsv", encoding="utf-8")
            if not line.startswith("#") and line.split("\t")[0] == line.split("\t")[1]
        )
        say(
            f"   n{size}: lexicon ({inv.options.lexicon_method}) over pieces: {entries} entries, {same} of them "
            f"piece -> same piece ({hms(secs)})"
        )
