"""The ensemble uncertainty of compositional selection (fairseq_lexical/analysis/uncertainty.py, Zheng & Lapata
2023, section 4) on real (tiny) fairseq checkpoints, and `select_compositional.py select` end to end."""

import os
import shutil

import numpy as np
import pytest

from tests.helpers.environment import run_cli

from lexical_offline import textio

from tests.helpers.compositional import TOOL, run_tool


# -- ensemble uncertainty on fairseq checkpoints ------------------------------------------------------------------


def _train(data_bin, save_dir, lexicon, seed):
    from tests.helpers.tiny_runs import tiny_train_args

    options = ("--arch", "lex_lstm_small", "--lexicon", lexicon)
    run_cli("fairseq-train", *tiny_train_args(data_bin, save_dir, *options, updates=8, seed=seed, log_interval=5))
    return os.path.join(save_dir, "checkpoint_last.pt")


@pytest.fixture(scope="module")
def ensemble(toy_data, tmp_path_factory):
    work = tmp_path_factory.mktemp("ensemble")
    lexicon = work / "lexicon.tsv"
    shutil.copy(toy_data / "lexicon.tsv", lexicon)
    return [_train(toy_data / "bin", work / f"seed{s}", lexicon, s) for s in (1, 2)]


@pytest.mark.slow
def test_uncertainty_on_two_checkpoints(toy_data, ensemble):
    from fairseq_lexical.analysis import uncertainty as U

    src = (toy_data / "test.src").read_text().splitlines()
    tgt = (toy_data / "test.tgt").read_text().splitlines()
    models, task = U.load_ensemble(ensemble, str(toy_data / "bin"))
    res = U.ensemble_uncertainty(models, task, src + [""], tgt + ["x"], mode="reference", batch_size=64)
    assert res.skipped == {len(src): "empty-source"}
    for i, (s, t) in enumerate(zip(src, tgt)):
        assert res.tokens[i] == len(t.split()) + 1  # every target word and </s>
        assert res.token_rmi[i].shape == (res.tokens[i],)
        assert np.isfinite(res.token_rmi[i]).all() and (res.token_rmi[i] >= 0).all()
        assert res.rmi[i] == pytest.approx(float(res.token_rmi[i].mean()))
    assert max(res.rmi[: len(src)]) > 1e-6  # two seeds disagree
    # batching and padding do not change the values
    one = U.ensemble_uncertainty(models, task, src, tgt, mode="reference", batch_size=1)
    assert one.rmi == pytest.approx(res.rmi[: len(src)], abs=1e-5)
    # the same checkpoint twice: no disagreement
    same, task2 = U.load_ensemble([ensemble[0], ensemble[0]], str(toy_data / "bin"))
    zero = U.ensemble_uncertainty(same, task2, src, tgt, mode="reference")
    assert max(zero.rmi) == pytest.approx(0.0, abs=1e-9)
    # decode mode: the ensemble's own beam output, importance-weighted n-best
    # (8-update models rarely end a sentence: a length limit of 12 keeps the search short, the toy targets have <= 4)
    dec = U.ensemble_uncertainty(models, task, src, mode="decode", beam=3, nbest=2, batch_size=7, max_len_b=12)
    assert all(h is not None for h in dec.hypotheses)
    assert all(np.isfinite(r) and r >= 0 for r in dec.rmi)
    assert all(dec.tokens[i] == dec.token_rmi[i].size for i in range(len(src)))
    greedy = U.ensemble_uncertainty(same, task2, src, mode="decode", beam=1, max_len_b=12)
    assert max(greedy.rmi) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.slow
def test_select_command_line_end_to_end(toy_data, ensemble, tmp_path):
    prefix = tmp_path / "sel" / "p"
    proc = run_tool(
        TOOL,
        "select",
        "--train-source",
        toy_data / "train.src",
        "--source",
        toy_data / "test.src",
        "--target",
        toy_data / "test.tgt",
        "--pool",
        "12",
        "--data",
        toy_data / "bin",
        "--path",
        f"{ensemble[0]}:{ensemble[1]}",
        "--targets",
        "reference",
        "--drop-top",
        "2",
        "--window",
        "8",
        "--sample",
        "4",
        "--seed",
        "3",
        "--out-prefix",
        prefix,
        "--no-progress",
    )
    assert "reverse mutual information (reference, 2 members): 12 of 12 scored" in proc.stdout
    header, rows = textio.read_tsv(f"{prefix}.sample.tsv")
    for col in ("index", "degree", "pieces", "tiling", "source", "target", "rmi", "rmi_tokens", "rmi_rank", "stage"):
        assert col in header
    assert len(rows) == 12 and [r["stage"] for r in rows].count("selected") == 4
    ids = (tmp_path / "sel" / "p.selected.ids").read_text().split()
    assert len(ids) == 4 and ids == sorted(ids, key=int)
    src = (toy_data / "test.src").read_text().splitlines()
    assert (tmp_path / "sel" / "p.selected.src").read_text().splitlines() == [src[int(i)] for i in ids]
    # the sample alone, again with the same seed, gives the same selection
    run_tool(
        TOOL,
        "sample",
        "--scores",
        f"{prefix}.uncertainty.tsv",
        "--drop-top",
        "2",
        "--window",
        "8",
        "--sample",
        "4",
        "--seed",
        "3",
        "--out-prefix",
        tmp_path / "again",
    )
    assert (tmp_path / "again.selected.ids").read_text().split() == ids
