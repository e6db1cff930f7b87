"""fairseq_lexical_recipes.configuration_summary on seed directories made here (the recipe's config.json, score.json
and run.json
written by the test, so each number of the summary is known)."""

import json

import pytest

from fairseq_lexical_recipes import configuration_summary

TRAIN = (
    "$REPO/.venv/bin/fairseq-train $WORK/bin --arch lex_lstm_small --max-update 12000 --seed {seed} "
    "--save-dir $WORK/simple/seed{seed} --save-interval-updates {every}"
)


def write_run(root, seed, em, train_s, arch_extra="", every=2000, settings="cpu-medium", gen="--beam 1"):
    run = root / f"w{seed}" / "simple" / f"seed{seed}"
    run.mkdir(parents=True)
    config = {
        "task": "scan",
        "model": "simple",
        "label": "LSTM + Lex.: Simple",
        "seed": seed,
        "settings": settings,
        "settings_label": "CPU-MEDIUM",
        "hparams": {"max_update": 12000, "beam": 1},
        "patience": None,
        "fingerprint": {
            "train": TRAIN.format(seed=seed, every=every) + arch_extra,
            "generate": f"fairseq-generate --path $WORK/simple/seed{seed}/x.pt {gen}",
        },
    }
    (run / "config.json").write_text(json.dumps(config))
    (run / "score.json").write_text(json.dumps({"n": 4, "exact_match": em}))
    (run / "run.json").write_text(
        json.dumps(
            {"train_s": train_s, "generate_s": 30.0, "host": "vm", "training": {"updates": 12000, "device": "cpu"}}
        )
    )
    return run


def test_summary_of_three_seeds(tmp_path, capsys):
    runs = [
        write_run(tmp_path, 1, 1.0, 1200.0),
        write_run(tmp_path, 2, 0.5, 1500.0, every=1000),
        write_run(tmp_path, 3, 0.75, 900.0),
    ]
    out = tmp_path / "summary.json"
    assert configuration_summary.main([str(r) for r in runs] + ["--paper", "0.92,0.17", "-o", str(out)]) == 0
    s = json.loads(out.read_text())
    assert s["seeds"] == [1, 2, 3] and s["settings"] == "cpu-medium" and s["model"] == "simple"
    assert s["per_seed"]["2"] == {
        "exact_match": 0.5,
        "train_minutes": 25.0,
        "decode_minutes": 0.5,
        "updates": 12000,
        "finished": None,
        "recipe_settings": "cpu-medium",
    }
    assert s["mean"] == pytest.approx(0.75)
    assert s["std"] == pytest.approx((0.125 / 3) ** 0.5)  # population: ((0.25^2 + 0.25^2 + 0) / 3)^0.5
    assert s["std_sample"] == pytest.approx((0.125 / 2) ** 0.5)
    assert s["minutes"] == {"train_max": 25.0, "train_total": 60.0, "decode_max": 0.5}
    assert s["paper"] == {"mean": 0.92, "std": 0.17}
    assert s["configuration"]["commands"]["train"].startswith("$REPO/")
    assert "0.7500 +/- 0.2041" in capsys.readouterr().out


def test_refuses_runs_of_different_configurations(tmp_path, capsys):
    a = write_run(tmp_path, 1, 1.0, 60.0)
    b = write_run(tmp_path, 2, 0.5, 60.0, arch_extra=" --lr 0.001")
    c = write_run(tmp_path, 3, 0.5, 60.0, gen="--beam 5")
    out = tmp_path / "summary.json"
    assert configuration_summary.main([str(a), str(b), "-o", str(out)]) == 2
    assert "training or decoding command differs" in capsys.readouterr().err
    assert configuration_summary.main([str(a), str(c), "-o", str(out)]) == 2
    assert "training or decoding command differs" in capsys.readouterr().err
    assert configuration_summary.main([str(a), str(a), "-o", str(out)]) == 2
    assert "seed given twice" in capsys.readouterr().err
    assert not out.exists()


def test_names_the_missing_file_and_metric(tmp_path, capsys):
    a = write_run(tmp_path, 1, 1.0, 60.0)
    (a / "run.json").unlink()
    assert configuration_summary.main([str(a), "-o", str(tmp_path / "s.json")]) == 2
    assert f"{a / 'run.json'}: not found" in capsys.readouterr().err
    b = write_run(tmp_path, 2, 1.0, 60.0)
    assert configuration_summary.main([str(b), "--metric", "bleu", "-o", str(tmp_path / "s.json")]) == 2
    assert "no metric 'bleu' (it has exact_match)" in capsys.readouterr().err
    assert configuration_summary.main([str(b), "-o", str(b / "summary.json")]) == 2
    assert "inside a run directory" in capsys.readouterr().err


def test_same_commands_under_another_preset_name_need_a_name(tmp_path, capsys):
    """--cpu-small --max-update 12000 --patience 0 --beam 1 builds --cpu-medium's commands: one configuration, but
    the summary says so only when told which name to give it."""
    a = write_run(tmp_path, 1, 1.0, 60.0, settings="cpu-medium")
    b = write_run(tmp_path, 2, 0.5, 60.0, settings="cpu-small")
    out = tmp_path / "summary.json"
    assert configuration_summary.main([str(a), str(b), "-o", str(out)]) == 2
    assert "different settings names (cpu-medium, cpu-small)" in capsys.readouterr().err
    assert configuration_summary.main([str(a), str(b), "--settings", "cpu-medium", "-o", str(out)]) == 0
    s = json.loads(out.read_text())
    assert s["settings"] == "cpu-medium" and s["settings_label"] == "CPU-MEDIUM"
    assert [s["per_seed"][k]["recipe_settings"] for k in ("1", "2")] == ["cpu-medium", "cpu-small"]
