"""tools/damage.py and fairseq_lexical.analysis.damage (Thrush 2020, Table 2), and plot_lexicon.py --checkpoint
(fairseq_lexical.analysis.lexicon_unit)."""

import json
import os
import subprocess
import sys

import pytest
import torch

import fairseq_lexical  # noqa: F401  (registers the models; allow-lists fairseq checkpoints for torch.load)
from tests.helpers.environment import REPO, program_module, run_cli
from tests.helpers.tiny_runs import TINY_SEARCHES, tiny_generate_args
from tests.helpers.models import build_model
from fairseq_lexical.analysis import damage as dmg


def load_tool(name):
    return program_module(name)


@pytest.fixture()
def perturbed(toy_data):
    """An lla_lstm_small whose every parameter was moved away from its initialisation (as training would)."""
    torch.manual_seed(0)
    model, task, args = build_model(toy_data / "bin", "--arch", "lla_lstm_small", "--decoder-attention")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01 + 0.05)
    return model, task, args


def state(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


EXPECTED = {
    "lexicon": lambda n: n.startswith("encoder.lexicon_unit."),
    "lstm": lambda n: n.startswith(("encoder.lstm.", "decoder.inputless_layer.", "decoder.lstm.")),
    "adversary": lambda n: n.startswith("adversary."),
    "lstm+lexicon": lambda n: n.startswith(("encoder.lstm.", "decoder.inputless_layer.", "encoder.lexicon_unit.")),
    "decoder.fc_out": lambda n: n.startswith("decoder.fc_out."),
}


@pytest.mark.parametrize("condition", list(EXPECTED))
def test_damage_changes_exactly_the_named_parameters(perturbed, condition):
    model, task, args = perturbed
    before = state(model)
    groups = dmg.parse_conditions(condition)[0]
    report = dmg.damage(model, task, args, groups, seed=3)
    expected = [n for n in before if EXPECTED[condition](n)]
    assert expected and report.reinitialised == expected
    assert report.changed == expected and not report.changed_outside_groups and not report.unchanged_in_groups
    after = state(model)
    for n in before:
        assert torch.equal(before[n], after[n]) == (n not in expected), n
    # the new values are the initialisation of a fresh model of the same configuration under the seed
    torch.manual_seed(3)
    fresh = dict(task.build_model(args).named_parameters())
    for n in expected:
        assert torch.equal(after[n], fresh[n].detach()), n


def test_damage_is_seeded_and_leaves_the_global_rng_alone(perturbed):
    model, task, args = perturbed
    original = model.state_dict()
    rng = torch.random.get_rng_state()
    dmg.damage(model, task, args, ["lexicon"], seed=5)
    assert torch.equal(torch.random.get_rng_state(), rng)
    first = model.encoder.lexicon_unit.weight.detach().clone()
    model.load_state_dict(original)
    dmg.damage(model, task, args, ["lexicon"], seed=5)
    assert torch.equal(model.encoder.lexicon_unit.weight, first)
    model.load_state_dict(original)
    dmg.damage(model, task, args, ["lexicon"], seed=6)
    assert not torch.equal(model.encoder.lexicon_unit.weight, first)


def test_groups_of_the_model_and_clear_errors(toy_data, perturbed):
    model, task, args = perturbed
    groups = dmg.available_groups(model)
    assert groups["lstm"] == ["encoder.lstm", "decoder.inputless_layer"]
    assert groups["lexicon"] == ["encoder.lexicon_unit"] and groups["attention"] == ["decoder.attention"]
    assert "encoder.lexicon_unit" not in groups["encoder"]
    with pytest.raises(dmg.DamageError, match="unknown module group 'broca'.*adversary.*lexicon.*lstm"):
        dmg.damage(model, task, args, ["broca"], seed=1)
    torch.manual_seed(0)
    no_adv, task2, args2 = build_model(toy_data / "bin", "--arch", "lla_lstm_small", "--no-adversary")
    with pytest.raises(dmg.DamageError, match="unknown module group 'adversary'"):
        dmg.damage(no_adv, task2, args2, ["adversary"], seed=1)
    report = dmg.damage(model, task, args, [], seed=1)  # "none"
    assert report.reinitialised == [] and report.changed == []


def test_condition_parsing_and_repeats():
    assert dmg.parse_conditions("none, lstm ,lexicon,lstm+lexicon") == [
        (),
        ("lstm",),
        ("lexicon",),
        ("lstm", "lexicon"),
    ]
    assert dmg.condition_name(("lstm", "lexicon")) == "lstm+lexicon" and dmg.condition_name(()) == "none"
    with pytest.raises(dmg.DamageError):
        dmg.parse_conditions(" , ")
    assert dmg.collapse_repeats("b g g g g g r") == "b g (x5) r"
    assert dmg.collapse_repeats("b b b") == "b b b"


@pytest.mark.parametrize("save", ["same", "symlink", "relative", "pattern"])
def test_save_damaged_refuses_to_overwrite_the_trained_checkpoint(tmp_path, capsys, monkeypatch, save):
    """--save-damaged equal to --path replaced the trained checkpoint with the damaged one."""
    ckpt = tmp_path / "checkpoint_best.pt"
    ckpt.write_bytes(b"trained weights")
    (tmp_path / "link.pt").symlink_to(ckpt)
    monkeypatch.chdir(tmp_path)
    saved, damage = {
        "same": (str(ckpt), "lexicon"),
        "symlink": ("link.pt", "lexicon"),
        "relative": ("./checkpoint_best.pt", "lexicon"),
        "pattern": ("checkpoint_{}.pt", "none,lstm,best"),
    }[save]
    assert (
        load_tool("damage").main([str(tmp_path), "--path", str(ckpt), "--damage", damage, "--save-damaged", saved]) == 2
    )
    err = capsys.readouterr().err
    assert "is the same file as the input --path" in err
    assert ("--save-damaged (best) checkpoint_best.pt" if save == "pattern" else f"--save-damaged {saved}") in err
    assert ckpt.read_bytes() == b"trained weights"


def test_a_file_that_is_no_checkpoint_is_one_line(tmp_path):
    """Issue 80, point 9: fairseq_lexical.compat.CheckpointLoadError came through tools/damage.py as a traceback."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "model.pt").write_text("not a checkpoint\n")
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "damage.py"), tmp_path / "bin", "--path", tmp_path / "model.pt"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(f"damage.py: error: {tmp_path / 'model.pt'}: not a loadable fairseq checkpoint"), last


# -- through the tools, on a trained checkpoint -------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tiny_runs):
    """The session's lla_lstm run (TINY_RUNS): its last checkpoint."""
    return tiny_runs("lla_lstm").checkpoint


@pytest.mark.slow
def test_damage_tool_scores_conditions_and_saved_checkpoint_matches_fairseq_generate(
    toy_data, checkpoint, capsys, tmp_path
):
    ckpt = checkpoint
    tool = load_tool("damage")
    saved = tmp_path / "damaged_{}.pt"
    rc = tool.main(
        [
            str(toy_data / "bin"),
            "--path",
            str(ckpt),
            "--damage",
            "none,lstm,lexicon",
            "--seed",
            "4",
            "--example",
            "a1 twice and a2",
            "--save-damaged",
            str(saved),
            "--json",
            "--hypotheses",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    results = {r["condition"]: r for r in out["results"]}
    assert list(results) == ["none", "lstm", "lexicon"]
    for r in results.values():
        assert r["scores"]["n"] == 20 and len(r["hypotheses"]) == 20
        assert set(r["scores"]) == {"n", "exact_match", "precision", "recall", "token_accuracy"}
        assert "a1 twice and a2" in r["examples"]
    assert results["lexicon"]["damage"]["changed"] == ["encoder.lexicon_unit.weight"]
    assert results["none"]["damage"]["changed"] == [] and "saved" not in results["none"]
    # the undamaged row is what fairseq-generate gives on the checkpoint itself, and the saved damaged checkpoint
    # decodes in fairseq-generate exactly as in the tool (both with the keep-best search)
    for name, path in (("none", ckpt), ("lexicon", tmp_path / "damaged_lexicon.pt")):
        search = ("--task", "lexical_translation", *TINY_SEARCHES["beam5"])
        proc = run_cli("fairseq-generate", *tiny_generate_args(toy_data / "bin", path, *search))
        hyps = {}
        for line in proc.stdout.splitlines():
            if line.startswith("H-"):
                sid, _, text = line.split("\t")
                hyps[int(sid[2:])] = text
        assert [hyps[i] for i in range(20)] == results[name]["hypotheses"], name
    state = torch.load(tmp_path / "damaged_lexicon.pt")
    assert "last_optimizer_state" not in state
    assert state["extra_state"]["damage"]["groups"] == ["lexicon"]
    original = torch.load(ckpt)["model"]
    assert [k for k in original if not torch.equal(original[k], state["model"][k])] == ["encoder.lexicon_unit.weight"]


@pytest.mark.slow
def test_damage_tool_table_and_errors(toy_data, checkpoint, capsys):
    ckpt = checkpoint
    tool = load_tool("damage")
    assert (
        tool.main(
            [str(toy_data / "bin"), "--path", str(ckpt), "--damage", "none,adversary", "--no-score", "--example", "a3"]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "input: a3" in text and "adversary: re-initialised 4 parameters" in text
    assert tool.main([str(toy_data / "bin"), "--path", str(ckpt), "--damage", "wernicke"]) == 2
    assert "unknown module group 'wernicke'" in capsys.readouterr().err
    assert tool.main([str(toy_data / "bin"), "--path", str(ckpt) + ".missing"]) == 2
    assert (
        tool.main(
            [
                str(toy_data / "bin"),
                "--path",
                str(ckpt),
                "--damage",
                "lstm,lexicon",
                "--save-damaged",
                "x.pt",
                "--no-score",
            ]
        )
        == 2
    )
    assert "needs '{}'" in capsys.readouterr().err


@pytest.mark.slow
def test_plot_lexicon_from_checkpoint(toy_data, checkpoint, tmp_path, capsys):
    ckpt = checkpoint
    plot = load_tool("plot_lexicon")
    png = tmp_path / "fig2.png"
    assert (
        plot.main(
            [
                "--checkpoint",
                str(ckpt),
                "--data",
                str(toy_data / "bin"),
                "-o",
                str(png),
                "--words",
                "a1,a2,twice,zz",
                "--max-targets",
                "5",
            ]
        )
        == 0
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "left out: zz" in capsys.readouterr().err
    from fairseq_lexical.analysis.lexicon_unit import checkpoint_rows  # what --checkpoint runs (the plugin's)

    words, targets, mat = checkpoint_rows(str(ckpt), str(toy_data / "bin"), "a1,a2,twice", max_targets=5)
    assert words == ["a1", "a2", "twice"] and len(targets) == 5 and mat.shape == (3, 5)
    assert "<pad>" not in targets and not any(t.startswith("madeupword") for t in targets)
    # the numbers are sigmoid(w) = sigmoid(lr_scale * u) of the checkpoint, columns by their largest weight
    model_state = torch.load(ckpt)
    u = model_state["model"]["encoder.lexicon_unit.weight"]
    from fairseq.data import Dictionary

    src = Dictionary.load(str(toy_data / "bin" / "dict.src.txt"))
    tgt = Dictionary.load(str(toy_data / "bin" / "dict.tgt.txt"))
    expected = torch.sigmoid(100.0 * u[[src.index(w) for w in words]][:, [tgt.index(t) for t in targets]])
    torch.testing.assert_close(torch.from_numpy(mat).float(), expected.float())
    assert list(mat.max(axis=0)) == sorted(mat.max(axis=0), reverse=True)
    assert checkpoint_rows(str(ckpt), str(toy_data / "bin"), "a1", min_weight=1.01)[1] == []
    with pytest.raises(SystemExit):
        plot.main(["--checkpoint", str(ckpt), "-o", str(png)])  # --data missing
    with pytest.raises(SystemExit):
        plot.main(["lexicon.tsv", "--checkpoint", str(ckpt), "--data", "x", "-o", str(png)])
