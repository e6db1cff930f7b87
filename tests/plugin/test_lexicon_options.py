"""The lexicon options are one dataclass (LexiconOptions) shared by the model families: every family offers each of
its fields as an option, and an architecture fills what was not given with the dataclass' defaults, choosing only
its own `--lexicon`."""

import argparse
from dataclasses import fields

import pytest

import fairseq_lexical  # noqa: F401  (registers the models)
from fairseq.models import ARCH_MODEL_REGISTRY, ARCH_CONFIG_REGISTRY
from fairseq_lexical.models.lexicon_options import LexiconOptions, lexicon_arch_defaults

FAMILIES = {
    "lex_lstm": None,
    "lstm_plain": "none",
    "lex_transformer": None,
    "pgn_transformer": "identity",
    "rdangle_transformer": "none",
}


def parse(arch, *argv):
    """What fairseq does: the model's options in a group whose absent options are absent (SUPPRESS), then the
    architecture function."""
    parser = argparse.ArgumentParser()
    ARCH_MODEL_REGISTRY[arch].add_args(parser.add_argument_group("model", argument_default=argparse.SUPPRESS))
    args = parser.parse_args(list(argv))
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


@pytest.mark.parametrize("arch", sorted(FAMILIES))
def test_each_family_takes_the_dataclass_defaults_and_its_own_lexicon(arch):
    args = parse(arch)
    expected = {f.name: f.default for f in fields(LexiconOptions)}
    expected["lexicon"] = FAMILIES[arch]
    assert {name: getattr(args, name) for name in expected} == expected


@pytest.mark.parametrize("arch", sorted(FAMILIES))
def test_each_family_parses_every_lexicon_option(arch):
    args = parse(
        arch,
        "--lexicon", "lex.tsv",
        "--lexicon-temperature", "0.5",
        "--lexicon-top-k", "3",
        "--lexicon-normalization", "full-row",
        "--lexicon-trainable",
        "--gate-bias-init", "-2",
        "--gate-form", "copy-token",
        "--lexicon-dense",
        "--generate-unk",
        "--reset-lexicon",
        "--lexicon-stored-in-checkpoint",
    )  # fmt: skip
    assert LexiconOptions.from_args(args) == LexiconOptions(
        "lex.tsv", 0.5, 3, "full-row", True, -2.0, "copy-token", True, True, True, True
    )


def test_an_old_checkpoints_arguments_get_the_defaults():
    """Arguments saved before an option existed lack it, or hold None (lexicon_normalization's first form)."""
    old = argparse.Namespace(lexicon="lex.tsv", lexicon_temperature=0.0, lexicon_normalization=None)
    lexicon_arch_defaults(old, "none")
    assert old.lexicon == "lex.tsv" and old.lexicon_normalization == "listed" and old.gate_form == "sigmoid"
    assert LexiconOptions.from_args(old) == LexiconOptions(lexicon="lex.tsv")
