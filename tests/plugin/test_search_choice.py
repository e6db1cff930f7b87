"""Which beam search runs (docs/search.md): the task builds the keep-best generator and leaves the rest to fairseq,
every entrance (the task, the hub, the analysis tools, the builder) chooses the same generator for the same options,
the hint under fairseq's translation task, fairseq-generate with and without the task, the analysis tools' option and
the recipes' comparison. The search itself: test_keep_best_search.py."""

import json
import logging
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers.environment import USER_DIR
from tests.helpers.models import build_model, toy_lexical_model


def _generation(**kwargs):
    from argparse import Namespace

    return Namespace(**{"beam": 5, "nbest": 1, **kwargs})


def test_the_task_builds_the_keep_best_generator_and_leaves_the_rest_to_fairseq(toy_data, caplog):
    from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment
    from fairseq.sequence_scorer import SequenceScorer

    from fairseq_lexical.sequence_generator import KeepBestSequenceGenerator

    model, task, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--task",
        "lexical_translation",
        "--lexicon",
        toy_data / "lexicon.tsv",
    )
    build = task.build_generator
    assert type(build([model], _generation())) is KeepBestSequenceGenerator
    assert build([model], _generation(nbest=3)).nbest == 3
    assert type(build([model], _generation(beam=1))) is SequenceGenerator  # greedy decoding is fairseq's
    assert type(build([model], _generation(beam_search="fairseq"))) is SequenceGenerator  # the hub's keyword
    assert type(build([model], _generation(score_reference=True))) is SequenceScorer
    with caplog.at_level(logging.INFO, logger="fairseq_lexical.sequence_generator"):
        assert type(build([model], _generation(print_alignment="hard"))) is SequenceGeneratorWithAlignment
        assert type(build([model], _generation(sampling=True))) is SequenceGenerator
    assert "does not implement --print-alignment" in caplog.text and "does not implement --sampling" in caplog.text
    with pytest.raises(ValueError, match="beam_search='best'"):
        build([model], _generation(beam_search="best"))
    _, fairseq_task, _ = build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--task",
        "lexical_translation",
        "--beam-search",
        "fairseq",
        "--lexicon",
        toy_data / "lexicon.tsv",
    )
    assert type(fairseq_task.build_generator([model], _generation())) is SequenceGenerator
    _, lla_task, _ = build_model(toy_data / "bin", "--arch", "lla_lstm_small", "--task", "lla_translation")
    assert type(lla_task.build_generator([model], _generation())) is KeepBestSequenceGenerator


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"beam": 1}, "SequenceGenerator"),  # greedy decoding is fairseq's whatever the search
        ({"beam": 5}, "KeepBestSequenceGenerator"),
        ({"beam": 5, "beam_search": "fairseq"}, "SequenceGenerator"),
        ({"beam": 5, "sampling": True}, "SequenceGenerator"),  # an option keep-best does not implement
    ],
    ids=["beam1", "beam5-keep-best", "beam5-fairseq", "beam5-sampling"],
)
def test_every_entrance_builds_the_same_generator(toy_data, tmp_path, monkeypatch, options, expected):
    """The task, the hub (its task swapped in for a checkpoint of fairseq's translation task), the analysis tools
    and build_search_generator itself choose the same generator for the same options: one place chooses."""
    from argparse import Namespace

    from tests.helpers.models import save_checkpoint

    from fairseq_lexical import sequence_generator
    from fairseq_lexical.analysis import gates
    from fairseq_lexical.models.lex_lstm import LexLSTMModel
    from lexical_offline.beam_searches import DEFAULT_BEAM_SEARCH

    model, task, args = build_model(
        toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv", "--task", "translation"
    )
    model.eval()
    built = {}
    real = sequence_generator.build_search_generator

    def spy(entrance):
        def build(*a, **k):
            built[entrance] = real(*a, **k)
            return built[entrance]

        return build

    # the task (fairseq-generate's entrance) and the builder itself
    _, lexical_task, _ = toy_lexical_model(toy_data)
    built["task"] = lexical_task.build_generator([model], Namespace(nbest=1, **options))
    built["builder"] = real([model], task.target_dictionary, dict(options))
    # the hub: hub.generate's keywords reach the task's build_generator
    save_checkpoint(tmp_path / "checkpoint.pt", args, model)
    hub = LexLSTMModel.from_pretrained(str(tmp_path), "checkpoint.pt", data_name_or_path=str(toy_data / "bin"))
    assert type(hub.task).__name__ == "LexicalTranslationTask"
    hub_build = hub.task.build_generator
    monkeypatch.setattr(hub.task, "build_generator", lambda *a, **k: built.setdefault("hub", hub_build(*a, **k)))
    hub.translate("a2", max_len_b=3, **options)
    # the analysis tools (which take the beam and the search, not sampling)
    if "sampling" not in options:
        monkeypatch.setattr(sequence_generator, "build_search_generator", spy("analysis"))
        src = task.source_dictionary.encode_line("a2", add_if_not_exist=False).long()
        search = options.get("beam_search", DEFAULT_BEAM_SEARCH)
        gates.beam_decode(model, task, src, beam=options["beam"], max_len_b=3, search=search)
    assert {name: type(g).__name__ for name, g in built.items()} == dict.fromkeys(built, expected)
    assert len(built) == (3 if "sampling" in options else 4)
    assert len({(g.beam_size, getattr(g, "nbest", None), type(g.search).__name__) for g in built.values()}) == 1


def test_a_beam_search_with_fairseqs_task_prints_the_hint_once(toy_data, monkeypatch, caplog):
    from omegaconf import OmegaConf

    from fairseq_lexical.models import keep_best_hub

    monkeypatch.setattr(keep_best_hub, "_hinted", False)
    model, _, _ = build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv")

    def cfg(task, beam):
        return OmegaConf.create({"task": {"_name": task}, "generation": {"beam": beam}})

    with caplog.at_level(logging.WARNING, logger="fairseq_lexical.models.keep_best_hub"):
        model.prepare_for_inference_(cfg("lexical_translation", 5))
        model.prepare_for_inference_(cfg("translation", 1))
        assert "--task lexical_translation" not in caplog.text
        model.prepare_for_inference_(cfg("translation", 5))
        model.prepare_for_inference_(cfg("translation", 5))
    assert caplog.text.count("--task lexical_translation keeps the best") == 1


@pytest.fixture(scope="module")
def toy_run(tiny_runs):
    """A save directory with checkpoint_last.pt: the session's lex_lstm run (TINY_RUNS, 20 updates on the toy task)."""
    return tiny_runs("lex_lstm").dir


def test_fairseq_generate_decodes_with_the_task_and_hints_without_it(toy_data, toy_run):
    common = [
        toy_data / "bin",
        "--user-dir",
        USER_DIR,
        "--path",
        toy_run / "checkpoint_last.pt",
        "--gen-subset",
        "test",
        "--beam",
        "4",
        "--max-len-b",
        "10",
    ]
    # the three decodings side by side (each is mostly fairseq's start-up)
    runs = [
        subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), "fairseq-generate"), *map(str, common), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for extra in (
            ["--task", "lexical_translation"],
            ["--task", "lexical_translation", "--beam-search", "fairseq"],
            [],
        )
    ]
    with_task, switched_off, without = [
        subprocess.CompletedProcess(p.args, 0, *p.communicate(timeout=300)) for p in runs
    ]
    assert all(p.returncode == 0 for p in runs), [p.stderr[-2000:] for p in (with_task, switched_off, without)]
    assert "keeps the best" in without.stderr and "keeps the best" not in with_task.stderr + switched_off.stderr

    def best(out):
        return {line.split("\t")[0]: float(line.split("\t")[1]) for line in out.splitlines() if line.startswith("H-")}

    ours, theirs = best(with_task.stdout), best(without.stdout)
    assert ours.keys() == theirs.keys() and len(ours) == 20
    assert all(ours[k] >= theirs[k] - 1e-3 for k in ours)
    assert [l for l in switched_off.stdout.splitlines() if l[:2] in ("H-", "P-")] == [
        l for l in without.stdout.splitlines() if l[:2] in ("H-", "P-")
    ]


def test_the_analysis_tools_take_the_search(toy_data):
    from fairseq_lexical.analysis import gates

    torch.manual_seed(0)
    model, task, _ = build_model(toy_data / "bin", "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv")
    model.eval()
    src = task.source_dictionary.encode_line("a1 twice and a2", add_if_not_exist=False).long()
    _, ours = gates.beam_decode(model, task, src, beam=3, max_len_b=10)
    _, theirs = gates.beam_decode(model, task, src, beam=3, max_len_b=10, search="fairseq")
    assert ours >= theirs - 1e-6
    with pytest.raises(ValueError, match="beam_search='exact'"):
        gates.beam_decode(model, task, src, beam=3, search="exact")
    record = gates.analyse(model, task, src, beam=3, max_len_b=10)
    assert record.target_origin == "best of beam 3 (keep-best)"


def test_the_recipes_comparison_decodes_a_run_three_ways(toy_data, toy_run, tmp_path, capsys):
    from fairseq_lexical_recipes import beam_search

    out = tmp_path / "summary.json"
    assert (
        beam_search.main(
            [str(toy_run), "--bin", str(toy_data / "bin"), "--max-len-b", "10", "--rounds", "1", "-o", str(out)]
        )
        == 0
    )
    summary = json.loads(out.read_text())
    (result,) = summary["results"]
    assert result["sentences"] == 20 and set(result["searches"]) == {"greedy", "fairseq", "keep-best"}
    assert result["keep_best_below_greedy"] == result["keep_best_below_fairseq"] == 0
    for search in result["searches"].values():
        assert 0 <= search["exact_match"] <= 1 and search["sentences_per_s"] > 0
        assert search["decoder_rows_per_sentence"] >= search["mean_length"]
    assert "| greedy | fairseq beam | keep-best beam |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        beam_search.main([str(tmp_path), "--bin", str(toy_data / "bin")])  # no checkpoint_last.pt
    with pytest.raises(SystemExit):
        beam_search.main([str(toy_run)])  # no WORK/bin beside it
    checkpoint = toy_run / "checkpoint_last.pt"
    size = checkpoint.stat().st_size
    with pytest.raises(SystemExit):  # -o naming an input is refused before anything is decoded or written
        beam_search.main([str(toy_run), "--bin", str(toy_data / "bin"), "-o", str(checkpoint)])
    assert "same file as the input checkpoint" in capsys.readouterr().err
    assert checkpoint.stat().st_size == size
