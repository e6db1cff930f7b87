"""tools/gpu_checks.sh: the GPU checks in one go. Without a GPU only its dry run and its refusal can be tested."""

import json
import os
import shlex
import subprocess
import sys

import pytest
import torch

from tests.helpers.environment import REPO, examples_env

SCRIPT = os.path.join(REPO, "tools", "gpu_checks.sh")


def run(*args):
    return subprocess.run(
        ["bash", SCRIPT, *args], capture_output=True, text=True, timeout=300, env=examples_env(PYTHON=sys.executable)
    )


def test_dry_run_prints_each_step_and_the_recipe_accepts_its_options(tmp_path):
    data = tmp_path / "scan"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"tasks_{split}_addprim_jump.txt").write_text("IN: jump OUT: I_JUMP\nIN: walk OUT: I_WALK\n")
    proc = run(str(tmp_path / "out"), "--dry-run", "--data", str(data))
    assert proc.returncode == 0, proc.stderr
    commands = [line[2:] for line in proc.stdout.splitlines() if line.startswith("+ ")]
    # first: a run stopped beside graph-captured runs harms none of them
    assert commands[0].endswith("tools/lease_check.py stop /dev/null")
    assert sum("-k cuda" in c for c in commands) == 1
    benches = [c for c in commands if "tools/bench.py" in c]
    assert len(benches) == 8
    # stock lstm against lex_lstm's loop with and without TF32 on both sides, at two shapes
    assert sum(" lstm " in c and "--tf32" in c for c in benches) == 2
    assert sum(" lstm " in c and "--decoder-output combined" in c for c in benches) == 2
    # the identity-lexicon transformer beside the plugin's classes without the head
    assert sum(" transformer " in c and "--top-k 1" in c and "--plain" in c for c in benches) == 1
    # eager training against --cuda-graphs, into the 8 files of OUT (nowhere in a dry run)
    graphs = [c for c in commands if "tools/cuda_graph_check.py" in c]
    assert len(graphs) == 1 and graphs[0].split("tools/cuda_graph_check.py ")[1] == "/dev/null"
    steps = [c for c in commands if any(k in c for k in ("-k cuda", "tools/bench.py", "cuda_graph_check", "recipes"))]
    assert steps.index(graphs[0]) == 9  # after the suite and the 8 benchmarks, before the precision runs
    alone = run(str(tmp_path / "out"), "graphs", "--dry-run")
    assert alone.returncode == 0 and [line for line in alone.stdout.splitlines() if line.startswith("+ ")] == [
        "+ " + graphs[0]
    ]
    recipes = [c for c in commands if " -m fairseq_lexical_recipes scan " in c]
    assert [c.split("--work ")[1].split()[0].rsplit("_", 1)[1] for c in recipes] == ["fp32", "fp16", "amp", "bf16"]
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
    assert not any(str(tmp_path / "out") in c for c in commands)  # work trees and logs go to the scratch folder
    for command in recipes:  # the options of this script are ones the recipe takes
        check = subprocess.run(
            shlex.split(command) + ["--dry-run"],
            capture_output=True,
            text=True,
            timeout=300,
            env=examples_env(),
            cwd=REPO,
        )
        assert check.returncode == 0, check.stderr[-2000:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: the script would run")
def test_without_a_gpu_it_stops_with_the_reason(tmp_path):
    proc = run(str(tmp_path / "out"), "suite")
    assert proc.returncode == 3 and "sees no CUDA device" in proc.stderr
    assert run("--dry-run").returncode == 2 and run(str(tmp_path), "everything").returncode == 2


@pytest.mark.parametrize("check", ["stop", "concurrency"])
def test_the_lease_checks_rehearse_on_a_cpu(tmp_path, check):
    """tools/lease_check.py at tiny sizes (on a CPU the graphs fall back to eager): `stop` asks the first of three
    runs to stop once each has made 10 updates, and it leaves at a step boundary while the two others finish;
    `concurrency` times two runs at once eagerly, then with graphs."""
    out = tmp_path / "lease.json"
    argv = [sys.executable, os.path.join(REPO, "tools", "lease_check.py"), check, str(out), "--sizes", "tiny"]
    argv += ["--warm", "10", "--updates", "60"] + (["--runs", "2"] if check == "concurrency" else [])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=examples_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["passed"] and result["mps"] is False
    if check == "stop":
        first, *others = result["runs"]
        assert result["stopped_at_a_step_boundary"] and 10 <= first["updates"] < 60 and first["exit"] == 75
        assert [(r["exit"], r["updates"]) for r in others] == [(0, 60), (0, 60)]
    else:  # the graphs fell back on the CPU: eager is the faster, whatever the two rates
        assert result["graphs"]["fallback"] and result["faster"] == "eager"
        assert result["eager"]["finished"] == 2 and result["eager"]["updates_per_s_in_all"] > 0


def test_the_callers_relative_paths_are_resolved_before_the_steps_run_from_the_checkout(tmp_path):
    """The steps run from the checkout (its code is what `python -m` imports, with no PYTHONPATH); OUT, --data and
    --scratch are the caller's paths."""
    proc = subprocess.run(
        ["bash", SCRIPT, "out", "precision", "--dry-run", "--data", "scan", "--scratch", "scratch"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=examples_env(PYTHON=sys.executable),
    )
    assert proc.returncode == 0, proc.stderr
    recipes = [line for line in proc.stdout.splitlines() if " -m fairseq_lexical_recipes scan " in line]
    assert len(recipes) == 4 and all(f"--data {tmp_path}/scan " in c for c in recipes)
    assert all(f"--work {tmp_path}/scratch/prec_" in c for c in recipes)
