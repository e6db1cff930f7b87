"""English-Chinese (Tatoeba, the paper's split): Akyurek & Andreas 2021, section 5.4, Table 4; Thrush 2020's
English to Mandarin (Tables 1-2) and its tokenisation."""

import os
import re
from dataclasses import replace
from typing import Tuple

from fairseq_lexical_recipes.tasks.base import Prepared, Task, find_file
from fairseq_lexical_recipes.textio import read_corpus


class EngCmn(Task):
    name = "eng_cmn"
    title = "English-Chinese test BLEU"
    paper_models = ("lstm", "pmi", "simple", "ibm2", "ibm1")
    paper_seeds = 5
    paper_table = "Table 4"
    own_options = ("tokenization",)
    tokenization = "authors"
    columns = (("bleu", "BLEU"), ("one_shot.bleu", "1-shot BLEU"))
    # The mutual-exclusivity fallback would write millions of uniform entries here (3,618 unmapped English words x
    # 6,694 unclaimed Chinese words for Simple; the builder refuses): without it an unmapped word maps to itself or
    # to <unk> in the model.
    lexicon_build_args = ("--no-fallback",)
    # Thrush 2020, Table 1 (English to Mandarin: BLEU only; LSTM 9.95) and Table 2 (precision under damage).
    thrush_paper = {"lla": {"bleu": 11.71}, "lla_noadv": {"bleu": 11.40}}
    # Thrush selects English-Chinese models on validation BLEU: fairseq's own, greedy, over the files' tokens
    lla_selection = (
        "bleu",
        (
            "--eval-bleu",
            "--eval-bleu-args",
            '{"beam": 1, "max_len_a": 0, "max_len_b": 200}',
            "--eval-tokenized-bleu",
            "--eval-bleu-remove-bpe",
            "none",
        ),
    )
    thrush_damage_paper = {"lstm": 87.37, "lexicon": 54.52}
    damage_examples = ("I ate some fish .",)

    def add_args(self, parser):
        g = parser.add_argument_group("English-Chinese")
        g.add_argument(
            "--tokenization",
            choices=("authors", "thrush"),
            default=self.tokenization,
            help="authors (default): the files' Moses/jieba tokens as they are (Akyurek & Andreas); "
            "thrush: Thrush 2020's, English split into words and punctuation (Moses escapes undone), "
            "Chinese into characters (runs of Latin letters and digits stay one token); applies to "
            "every model of the run (default work directory ..._eng_cmn_thrush)",
        )

    def default_work(self):
        suffix = "_thrush" if self.tokenization == "thrush" else ""
        return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fairseq_lexical_{self.name}{suffix}")

    def hparams(self, preset):
        # PMI's tau = 0 rows tie over thousands of words here ('.' -> 8,849 words seen only with it): keep 8 per row.
        return replace(super().hparams(preset), lexicon_top_k=8)

    def locate(self, data):
        return {
            split: find_file(data, f"cmn.txt_{name}_tokenized.tsv")
            for split, name in (("train", "train"), ("valid", "dev"), ("test", "test"))
        }

    def prepare(self, files):
        read = lambda role: read_corpus(files[role], "tsv")  # noqa: E731
        train, valid, test = read("train"), read("valid"), read("test")
        notes = [
            "the TSV files are already tokenised (Moses English, jieba Chinese, appendix E.3): BLEU over "
            "those tokens (--tokenize none); 1-shot = test sentences with an English word seen once in training"
        ]
        if self.tokenization == "thrush":
            train, valid, test = ([thrush_tokenize_pair(s, t) for s, t in part] for part in (train, valid, test))
            notes = [
                "Thrush 2020's tokenisation (--tokenization thrush): English split into words and punctuation, "
                "Chinese into characters (Latin letter/digit runs kept whole); BLEU over these tokens "
                "(--tokenize none, i.e. character BLEU for Chinese); 1-shot over these English words"
            ]
        return Prepared(
            train=train,
            valid=valid,
            test=test,
            lexcorpus=train,
            files=files,
            score_args=["--bleu", "--tokenize", "none", "--train-source", "TRAIN_SRC", "--test-source", "TEST_SRC"],
            notes=notes,
        )

    def paper(self):
        p = {
            "lstm": (24.18, 0.37, 17.47, 0.64),
            "pmi": (24.36, 0.09, 18.46, 0.13),
            "simple": (24.35, 0.09, 18.46, 0.19),
            "ibm2": (25.49, 0.42, 19.62, 0.64),
            "ibm1": (25.49, 0.42, 19.62, 0.64),
        }
        return {m: {"bleu": (a, b), "one_shot.bleu": (c, d)} for m, (a, b, c, d) in p.items()}

    def result_line(self, score):
        one = score.get("one_shot", {})
        one_bleu = one.get("bleu")
        return (
            f"BLEU {score['bleu']:.2f}  1-shot BLEU "
            f"{'n/a' if one_bleu is None else format(one_bleu, '.2f')} ({one.get('n', 0)} sentences)"
        )


_MOSES_ESCAPES = (
    ("&apos;", "'"),
    ("&quot;", '"'),
    ("&lt;", "<"),
    ("&gt;", ">"),
    ("&#91;", "["),
    ("&#93;", "]"),
    ("&#124;", "|"),
    ("&amp;", "&"),
)


def thrush_tokenize_pair(src: str, tgt: str) -> Tuple[str, str]:
    """Thrush (2020), English-Chinese: "The English was tokenized by splitting on punctuation and words. The
    Chinese was tokenized by splitting on punctuation and characters." From the Moses/jieba-tokenised files: undo
    Moses' escapes, then English = runs of word characters and single punctuation marks ("don 't" -> don ' t);
    Chinese = every non-space character, except that runs of ASCII letters/digits (names, numbers) stay one token."""
    for esc, ch in _MOSES_ESCAPES:
        src, tgt = src.replace(esc, ch), tgt.replace(esc, ch)
    return (" ".join(re.findall(r"\w+|[^\w\s]", src)), " ".join(re.findall(r"[A-Za-z0-9]+|\S", tgt)))
