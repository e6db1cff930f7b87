"""tools/gpu_campaign.sh end to end on a simulated device (tests/helpers/simulated_device.py): a miniature campaign
prepared here, started, stopped run by run and polled there, and collected here."""

import json
import os
import signal
import subprocess

import pytest

from fairseq_lexical_recipes.campaign import device, plan, processes
from tests.helpers.environment import REPO
from tests.helpers.simulated_device import collected_here, host_packages, simulated_campaign, wait_for


def test_a_miniature_campaign_on_a_simulated_device(tmp_path):
    device_call, state, manifest, forbidden, audit, py, denv = simulated_campaign(tmp_path, "mini")
    proc, _ = device_call(
        "start",
        "--budget-s",
        "900",
        "--reserve-s",
        "0",
        "--allow-cpu",
        "--no-mps",
        "--max-jobs",
        "2",
        "--cuda-graphs",
        "--min-train-s",
        "1",
        "--tick-s",
        "0.3",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "plan 'mini': 4 runs" in proc.stdout
    # the graphs' check ran there (tiny sizes on a CPU): the model fell back, so the runs train eagerly
    assert "CUDA graphs not used: the model is on cpu, and CUDA graphs need a CUDA device" in proc.stdout
    graphs = json.loads((state / "campaign.json").read_text())["environment"]["cuda_graphs"]
    assert graphs["passed"] is False and graphs["largest_relative_difference"] == 0.0
    # what the device has of the carried wheels stays its own; what fairseq-fixed requires and neither has is named
    assert f"installed {len(manifest['wheels']) - 1} of {len(manifest['wheels'])} carried wheels" in proc.stdout
    assert any(w.startswith("bitarray-") for w in manifest["wheels"])
    assert not any(n.startswith("bitarray") for n in os.listdir(state / "site"))
    if "torchaudio" not in host_packages():
        assert "torchaudio>=0.8.0 (required by fairseq-fixed): the device cannot import it" in proc.stdout

    def runs():
        sched = json.loads((state / "scheduler.json").read_text())
        assert processes.alive(sched["pid"]) or sched.get("status") == "done", (state / "scheduler.log").read_text()
        return {r["id"]: r for r in json.loads((state / "runs.json").read_text())["runs"]}

    # two at once from the start: the second is killed midway (a crash); the third is asked to stop (poll --stop)
    # and leaves by itself while the first trains beside it and finishes; the last one hangs (SIGSTOP) until the
    # budget ends
    killed = wait_for(
        lambda: next((r for r in runs().values() if r["status"] == "running" and r["priority"] >= 1), None),
        120,
        "a second run to start",
    )
    os.killpg(killed["pgid"], signal.SIGKILL)
    asked = wait_for(
        lambda: next((r for r in runs().values() if r["status"] == "running" and r["priority"] == 2), None),
        240,
        "the third run to start",
    )
    os.killpg(asked["pgid"], signal.SIGSTOP)  # held still (not yet trained), so the request comes before its end
    proc, _ = device_call("poll", "--stop", asked["id"], "--wait-s", "1")
    assert proc.returncode == 0 and f"asked {asked['id']} to stop" in proc.stdout, proc.stdout + proc.stderr
    proc, _ = device_call("poll", "--stop", "scan_jump-nothing-s9", "--wait-s", "1")
    assert proc.returncode == 2 and "--stop scan_jump-nothing-s9: no such run" in proc.stderr
    os.killpg(asked["pgid"], signal.SIGCONT)
    wait_for(lambda: runs()[asked["id"]]["status"] == "stopped", 240, "the asked run to stop")
    hung = wait_for(
        lambda: next(
            (r for r in runs().values() if r["status"] == "running" and r["id"] != killed["id"] and r["priority"] == 3),
            None,
        ),
        240,
        "the last run to start",
    )
    os.killpg(hung["pgid"], signal.SIGSTOP)
    wait_for(lambda: sum(r["status"] in plan.FINAL for r in runs().values()) == 3, 240, "the other runs to end")
    # the group's data-bin and lexicons came prepared from here: the device's preparation found them up to date
    prepared = (state / "logs" / "prepare_scan_jump.log").read_text()
    assert "fairseq-preprocess: up to date" in prepared and "(up to date)" in prepared, prepared[-2000:]
    beside = next(r for r in runs().values() if r["priority"] == 0)  # ran beside the stopped one: not harmed
    assert beside["status"] == "finished" and beside["started"] < runs()[asked["id"]]["ended"], beside

    proc, out = device_call("poll", "--wait-s", "1")
    assert proc.returncode == 0, proc.stderr
    assert "poll again" in proc.stdout and len(os.listdir(out)) <= device.MAX_OUT_FILES
    progress = json.loads((out / "progress.json").read_text())
    assert not progress["over"] and progress["counts"]["running"] == 1

    # the lease ends: a poll with no budget left stops the remaining run cleanly and returns everything
    proc, out = device_call("poll", "--budget-s", "0", "--reserve-s", "0", "--wait-s", "120")
    assert proc.returncode == 0, proc.stderr
    assert "the campaign is over" in proc.stdout
    files = sorted(os.listdir(out))
    assert len(files) <= device.MAX_OUT_FILES and files == [
        "campaign.log",
        "failures.txt",
        "progress.json",
        "results.json",
    ]
    results = {r["id"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    status = {i: r["status"] for i, r in results.items()}
    assert status[killed["id"]] == "failed" and results[killed["id"]]["reason"] == "killed by signal 9"
    assert status[asked["id"]] == "stopped" and results[asked["id"]]["reason"] == "stopped on request (poll --stop)"
    assert status[hung["id"]] == "stopped" and results[hung["id"]]["reason"] == "stopped by the lease's deadline"
    finished = [r for r in results.values() if r["status"] == "finished"]
    assert [r["priority"] for r in finished] == [0] and len(results) == 4
    for r in finished:  # score, commands, settings, times
        assert 0.0 <= r["score"]["exact_match"] <= 1.0 and r["score"]["n"] == 40
        assert "fairseq-train" in r["config"]["commands"]["train"] and r["config"]["settings"] == "cpu-small"
        assert "--cuda-graphs" not in r["config"]["commands"]["train"] and "--cuda-graphs" not in r["command"]
        assert r["times"]["generate_s"] > 0 and r["training"]["updates"] == 30 and not r["time_limited"]
        errors = r["errors"]  # the first wrong outputs, to tell a model that did not learn from a broken decoder
        assert errors["hypotheses"] == 40 and errors["wrong"] == round(40 * (1 - r["score"]["exact_match"]))
        assert len(errors["first"]) == min(3, errors["wrong"])
    assert killed["id"] in (out / "failures.txt").read_text()
    for r in (killed, asked, hung):  # nothing of theirs is left running
        assert not processes.group_alive(r["pgid"])
    assert not processes.alive(json.loads((state / "scheduler.json").read_text())["pid"])
    violations = audit.read_text() if audit.exists() else ""
    assert violations == "", violations[:3000]
    # the watch works: a read of the checkout and a name lookup from the simulated device are both caught
    control = tmp_path / "control.log"
    subprocess.run(
        [
            str(py),
            "-c",
            f"import socket; open({forbidden[1] + '/gpu_campaign.sh'!r}).read()\n"
            "try: socket.getaddrinfo('example.org', 80)\nexcept OSError: pass",
        ],
        env=dict(denv, SIM_AUDIT_LOG=str(control)),
        check=True,
    )
    caught = control.read_text()
    assert "read " + os.path.join(REPO, "tools", "gpu_campaign.sh") in caught and "socket.getaddrinfo" in caught

    # here: collect writes one results file per model, with the runs that finished
    res = collected_here(out, tmp_path / "results")
    assert sorted(os.listdir(res)) == ["gpu_scan_jump_lstm.json", "gpu_scan_jump_simple.json"]


@pytest.mark.slow
def test_a_replicated_run_on_a_simulated_device(tmp_path):
    """The device rehearses a replica batch: LSTM + Simple's seeds 1 and 2 in one process (fairseq-train
    --replica-seeds), each seed finished, decoded and collected as a run of its own."""
    device_call, state, manifest, _, audit, _, _ = simulated_campaign(tmp_path, "mini_replicas")
    proc, _ = device_call(
        *("start", "--budget-s", "900", "--reserve-s", "0", "--allow-cpu", "--no-mps", "--max-jobs", "2"),
        *("--min-train-s", "1", "--tick-s", "0.3", "--probe-s", "0"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "plan 'mini_replicas': 2 runs" in proc.stdout
    wait_for(
        lambda: all(r["status"] in plan.FINAL for r in json.loads((state / "runs.json").read_text())["runs"]),
        400,
        "both seeds to end",
    )
    log = (state / "scheduler.log").read_text()
    assert "scan_jump-simple-s1: started with scan_jump-simple-s2 (one process: --replica-seeds)" in log
    proc, out = device_call("poll", "--budget-s", "0", "--reserve-s", "0", "--wait-s", "60")
    assert proc.returncode == 0, proc.stderr
    results = {r["id"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    for seed in (1, 2):
        r = results[f"scan_jump-simple-s{seed}"]
        assert r["status"] == "finished", r
        assert r["score"]["n"] == 40 and r["training"]["updates"] == 30
        assert r["training"]["replicas"]["seeds"] == [1, 2] and "--seed-list=1,2" in " ".join(r["command"])
    assert results["scan_jump-simple-s1"]["started"] == results["scan_jump-simple-s2"]["started"]  # one launch
    violations = audit.read_text() if audit.exists() else ""
    assert violations == "", violations[:3000]
    res = collected_here(out, tmp_path / "results")
    collected = json.loads((res / "gpu_scan_jump_simple.json").read_text())
    assert sorted(collected["per_seed"]) == ["1", "2"], collected
