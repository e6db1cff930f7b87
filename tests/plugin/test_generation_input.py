"""Generation inputs a run cannot use (issue 70): the user's terms (--lexicon-override, docs/terms.md), their gate
bias and the beam size. Each is refused with one line naming the option (and the file and line): a ValueError from
the hub, the program's argument error (exit status 2, no traceback) from fairseq-generate and fairseq-interactive.
Before, a `</s>` target changed the outputs silently, a NaN bias and beam 0 ended in fairseq's IndexError or
RuntimeError, beam '5' in a TypeError, a bias without terms did nothing, and a directory was "not found"."""

import os
import re
import sys

import pytest

from tests.helpers.environment import REPO, run_cli
from tests.helpers.models import save_checkpoint, toy_lexical_model

USER_DIR = os.path.join(REPO, "fairseq_lexical")


@pytest.fixture(scope="module")
def checkpoint(toy_data, tmp_path_factory):
    """An untrained lex_lstm_small checkpoint of the toy task: these inputs are refused before any search."""
    model, _, args = toy_lexical_model(toy_data)
    path = tmp_path_factory.mktemp("generation_input") / "checkpoint.pt"
    save_checkpoint(path, args, model)
    return path


@pytest.fixture(scope="module")
def hub(checkpoint, toy_data):
    from fairseq_lexical.models.lex_lstm import LexLSTMModel

    return LexLSTMModel.from_pretrained(
        str(checkpoint.parent), checkpoint.name, data_name_or_path=str(toy_data / "bin")
    )


def terms_file(tmp_path, source, target):
    """A terms file whose entry `source -> target` is on line 3 (after a comment and a usable entry)."""
    path = tmp_path / "terms.tsv"
    path.write_text(f"# my terms\na1\tB1\t1\n{source}\t{target}\t1\n")
    return path


def generate_args(toy_data, checkpoint, *extra):
    return [
        toy_data / "bin",
        "--user-dir",
        USER_DIR,
        "--path",
        checkpoint,
        "--task",
        "lexical_translation",
        "--gen-subset",
        "test",
        "--max-len-b",
        "5",
        "--batch-size",
        "8",
        *extra,
    ]


def generate_in_process(*argv):
    """fairseq-generate's entry point in this process; its exit status."""
    from fairseq_cli import generate

    old = sys.argv
    sys.argv = ["fairseq-generate", *map(str, argv)]
    try:
        generate.cli_main()
    except SystemExit as e:
        return e.code
    finally:
        sys.argv = old
    return 0


SPECIAL = "a special symbol of fairseq's dictionaries, not a word"
FILLER = "a filler fairseq-preprocess adds to the dictionaries, not a word"


# ------------------------------------------------------------------------------------------------- the hub
@pytest.mark.parametrize(
    "source, target, message",
    [
        ("a2", "</s>", f"target '</s>' is {SPECIAL}"),  # the sentence scores fell from -0.19 to -4.54, no warning
        ("a2", "<s>", f"target '<s>' is {SPECIAL}"),
        ("a2", "<pad>", f"target '<pad>' is {SPECIAL}"),
        ("a2", "<unk>", f"target '<unk>' is {SPECIAL}"),
        ("a2", "madeupword0000", f"target 'madeupword0000' is {FILLER}"),
        ("</s>", "B2", f"source '</s>' is {SPECIAL}"),  # every source ends with it: its row is no term
        ("<unk>", "B2", f"source '<unk>' is {SPECIAL}"),
        ("madeupword0001", "B2", f"source 'madeupword0001' is {FILLER}"),
        # (language tokens are those a multilingual task adds, which this model's has none of: test_control_tokens.py)
    ],
)
def test_special_symbols_are_no_terms(hub, tmp_path, source, target, message):
    terms = terms_file(tmp_path, source, target)
    with pytest.raises(ValueError, match=f"^--lexicon-override {re.escape(str(terms))}:3: {re.escape(message)}$"):
        hub.translate("a2", beam=2, max_len_b=3, lexicon_override=str(terms))


@pytest.mark.parametrize("bias", [float("nan"), float("inf"), float("-inf"), "2"])
def test_the_gate_bias_must_be_a_finite_number(hub, tmp_path, bias):
    terms = terms_file(tmp_path, "a2", "B2")
    with pytest.raises(ValueError, match=rf"^--lexicon-override-gate-bias {re.escape(repr(bias))}: expected a finite"):
        hub.translate("a2", beam=2, max_len_b=3, lexicon_override=str(terms), lexicon_override_gate_bias=bias)


def test_a_gate_bias_without_terms_is_refused(hub):
    """A user who gives the bias means the terms to be used: without them the run is one without either, most likely
    a forgotten or mistyped --lexicon-override, and its output would be taken for one with the terms."""
    with pytest.raises(ValueError, match=r"^--lexicon-override-gate-bias 2 needs --lexicon-override FILE"):
        hub.translate("a2", beam=2, max_len_b=3, lexicon_override_gate_bias=2.0)
    hub.translate("a2", beam=2, max_len_b=3, lexicon_override_gate_bias=0.0)  # the default: nothing to refuse


def test_a_directory_is_named_as_one(hub, tmp_path):
    with pytest.raises(ValueError, match=rf"^--lexicon-override {re.escape(str(tmp_path))}: is a directory"):
        hub.translate("a2", beam=2, max_len_b=3, lexicon_override=str(tmp_path))


@pytest.mark.parametrize("search", ["keep-best", "fairseq"])
@pytest.mark.parametrize("beam", [0, -1, "5", 2.0, True])
def test_the_beam_must_be_an_integer_of_at_least_1(hub, beam, search):
    with pytest.raises(ValueError, match=rf"^beam={re.escape(repr(beam))}: the beam size must be an integer >= 1$"):
        hub.translate("a2", beam=beam, max_len_b=3, beam_search=search)


def test_the_analysis_tools_generator_checks_the_beam_too(hub):
    from fairseq_lexical.sequence_generator import build_search_generator

    with pytest.raises(ValueError, match=r"^beam=0: the beam size must be an integer >= 1$"):
        build_search_generator(hub.models, hub.tgt_dict, {"beam": 0})


# ------------------------------------------------------------------------------------------ the programs
@pytest.mark.parametrize(
    "extra, message",
    [
        pytest.param(
            lambda tmp: ["--lexicon-override", terms_file(tmp, "a2", "</s>")],
            f":3: target '</s>' is {SPECIAL}",
            id="special-target",
        ),
        pytest.param(
            lambda tmp: ["--lexicon-override", terms_file(tmp, "a2", "B2"), "--lexicon-override-gate-bias", "nan"],
            "--lexicon-override-gate-bias nan: expected a finite number",
            id="nan-bias",
        ),
        pytest.param(
            lambda tmp: ["--lexicon-override-gate-bias", "2"],
            "--lexicon-override-gate-bias 2 needs --lexicon-override",
            id="bias-without-terms",
        ),
        pytest.param(lambda tmp: ["--lexicon-override", tmp], ": is a directory, not a lexicon file", id="directory"),
        pytest.param(
            lambda tmp: ["--lexicon-override", tmp / "nosuch.tsv"], "nosuch.tsv: lexicon file not found", id="missing"
        ),
        pytest.param(lambda tmp: ["--beam", "0"], "--beam 0: the beam size must be an integer >= 1", id="beam-0"),
    ],
)
def test_fairseq_generate_refuses_as_it_refuses_its_arguments(toy_data, checkpoint, tmp_path, capsys, extra, message):
    assert generate_in_process(*generate_args(toy_data, checkpoint, *extra(tmp_path))) == 2
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("fairseq-generate: error: ")]
    assert len(errors) == 1 and message in errors[0], err[-2000:]
    assert "H-" not in out


def test_fairseq_generate_still_takes_usable_terms(toy_data, checkpoint, tmp_path, capsys):
    terms = terms_file(tmp_path, "a2", "B2")
    extra = ["--lexicon-override", terms, "--lexicon-override-gate-bias", "2", "--beam", "2"]
    assert generate_in_process(*generate_args(toy_data, checkpoint, *extra)) == 0
    assert len(re.findall(r"^H-", capsys.readouterr().out, re.M)) == 20


@pytest.mark.slow
@pytest.mark.parametrize(
    "program, extra, message",
    [
        (
            "fairseq-generate",
            ["--lexicon-override", "terms.tsv"],
            f"--lexicon-override terms.tsv:3: target '</s>' is {SPECIAL}",
        ),
        ("fairseq-interactive", ["--beam", "0"], "--beam 0: the beam size must be an integer >= 1"),
    ],
)
def test_the_real_programs_end_with_one_line(toy_data, checkpoint, tmp_path, program, extra, message):
    terms_file(tmp_path, "a2", "</s>")
    if program == "fairseq-generate":
        args = generate_args(toy_data, checkpoint, *extra)
    else:  # the sentences come from stdin
        args = [toy_data / "bin", "--user-dir", USER_DIR, "--path", checkpoint, "--task", "lexical_translation", *extra]
    proc = run_cli(program, *args, check=False, input="a1 twice\n", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"{program}: error: {message}"
