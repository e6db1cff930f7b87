"""fairseq_lexical_recipes.campaign.device: what start and poll refuse before they touch anything, which of the
carried wheels start installs on a device that has some of them, the checks it runs there (tools/device_checks.py),
and the caller's paths through tools/gpu_campaign.sh."""

import json
import os
import subprocess
import sys

import pytest
import torch

from fairseq_lexical_recipes.campaign import device
from tests.helpers.campaign import result_file, run_record
from tests.helpers.environment import REPO, examples_env
from tests.helpers.simulated_device import fake_device_python, fake_wheel


@pytest.mark.parametrize(
    "argv, says",
    [
        (["start", "--budget-s", "-900"], "--budget-s -900: must be a finite number, more than 0"),
        (["start", "--budget-s", "0"], "--budget-s 0: must be a finite number, more than 0"),
        (["start", "--budget-s", "nan"], "--budget-s nan: must be a finite number, more than 0"),
        (["start", "--budget-s", "inf"], "--budget-s inf: must be a finite number, more than 0"),
        (["start", "--budget-s", "900", "--reserve-s", "-80"], "--reserve-s -80: must be a finite number, 0 or more"),
        (["start", "--budget-s", "900", "--reserve-s", "nan"], "--reserve-s nan: must be a finite number, 0 or more"),
        (["start", "--budget-s", "900", "--hold-s", "-1800"], "--hold-s -1800: must be a finite number, more than 0"),
        (["start", "--budget-s", "900", "--reserve-s", "900"],
         "--reserve-s 900 is not less than min(--budget-s 900, --hold-s 1800): it leaves the runs no time"),
        (["start", "--budget-s", "900", "--hold-s", "60"],
         "--reserve-s 80 is not less than min(--budget-s 900, --hold-s 60): it leaves the runs no time"),
        (["start", "--budget-s", "900", "--probe-s", "-2"], "--probe-s -2: must be a finite number, 0 or more"),
        (["start", "--budget-s", "900", "--max-jobs", "0"], "--max-jobs 0: must be a finite number, more than 0"),
        (["poll", "--wait-s", "-1"], "--wait-s -1: must be a finite number, 0 or more"),
        (["poll", "--wait-s", "nan"], "--wait-s nan: must be a finite number, 0 or more"),
        (["poll", "--budget-s", "-5"], "--budget-s -5: must be a finite number, 0 or more"),
        (["poll", "--budget-s", "inf"], "--budget-s inf: must be a finite number, 0 or more"),
        (["poll", "--budget-s", "0", "--reserve-s", "-30"], "--reserve-s -30: must be a finite number, 0 or more"),
    ],
    ids=["start_budget_negative", "start_budget_0", "start_budget_nan", "start_budget_inf", "start_reserve_negative",
         "start_reserve_nan", "start_hold_negative", "start_reserve_all", "start_hold_short", "start_probe_negative",
         "start_max_jobs_0", "poll_wait_negative", "poll_wait_nan", "poll_budget_negative", "poll_budget_inf",
         "poll_reserve_negative"],
)  # fmt: skip
def test_start_and_poll_refuse_impossible_seconds_in_one_line(tmp_path, capsys, argv, says):
    """Issue 80, point 9: start took a negative --budget-s, --reserve-s or --hold-s (and nan), poll a negative
    --budget-s, --reserve-s or --wait-s. Refused before anything is read or written."""
    from fairseq_lexical_recipes.campaign.__main__ import main

    code = main(
        [*argv, "--state", str(tmp_path / "state"), *(["--carry", str(tmp_path)] if argv[0] == "start" else [])]
    )
    err = capsys.readouterr().err
    assert code == 2 and err == f"gpu_campaign {argv[0]}: error: {says}\n", err
    assert os.listdir(tmp_path) == []


def test_poll_budget_0_stops_the_campaign_and_is_no_error(tmp_path, capsys):
    from fairseq_lexical_recipes.campaign.__main__ import main

    state = str(tmp_path / "state")
    assert main(["poll", "--budget-s", "0", "--reserve-s", "0", "--wait-s", "0", "--state", state]) == 2
    assert f"error: no campaign in {state}: start one first" in capsys.readouterr().err  # past the options' checks


def test_start_installs_what_the_device_cannot_import_and_names_what_is_missing(tmp_path, monkeypatch, capsys):
    py = fake_device_python(
        tmp_path / "device", {"torch": "2.9.0", "numpy": "1.19.0", "regex": "2024.1.1", "omegaconf": "2.0.6"}
    )
    elsewhere = tmp_path / "elsewhere"  # the campaign's own PYTHONPATH is not the device's
    (elsewhere / "lxml-5.0.dist-info").mkdir(parents=True)
    (elsewhere / "lxml-5.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: lxml\nVersion: 5.0\n")
    monkeypatch.setenv("PYTHONPATH", str(elsewhere))
    present = device.device_packages(str(py))
    assert {k: present[k] for k in ("torch", "numpy", "regex", "omegaconf")} == {
        "torch": "2.9.0",
        "numpy": "1.19.0",
        "regex": "2024.1.1",
        "omegaconf": "2.0.6",
    }
    assert "pip" in present and "lxml" not in present

    carry_dir = tmp_path / "carry"
    (carry_dir / "wheels").mkdir(parents=True)
    wheels = [
        fake_wheel(carry_dir / "wheels", "fairseq-lexical", "1.0", "torch>=2.4", "fairseq-fixed", "numpy>=1.21"),
        fake_wheel(carry_dir / "wheels", "fairseq-fixed", "0.12.3.1", "omegaconf==2.3.0", "regex", "sacrebleu"),
        fake_wheel(carry_dir / "wheels", "omegaconf", "2.3.0", "antlr4-python3-runtime==4.9.*"),
        fake_wheel(carry_dir / "wheels", "antlr4-python3-runtime", "4.9.3"),
        fake_wheel(carry_dir / "wheels", "regex", "2026.11.15"),
        fake_wheel(carry_dir / "wheels", "sacrebleu", "2.6.0", "regex", "lxml"),
    ]
    state = tmp_path / "state"
    (state / "logs").mkdir(parents=True)
    manifest = {"python": "%d.%d" % sys.version_info[:2], "wheels": [os.path.basename(w) for w in wheels]}
    packages = device.install(str(carry_dir), manifest, str(state), str(py))
    # the device's torch and regex (any version will do) stay; its omegaconf is not the 2.3.0 fairseq-fixed needs
    assert packages["installed"] == [
        "antlr4_python3_runtime-4.9.3-py3-none-any.whl",
        "fairseq_fixed-0.12.3.1-py3-none-any.whl",
        "fairseq_lexical-1.0-py3-none-any.whl",
        "omegaconf-2.3.0-py3-none-any.whl",
        "sacrebleu-2.6.0-py3-none-any.whl",
    ]
    assert packages["not_installed"] == ["regex-2026.11.15-py3-none-any.whl"]
    installed = sorted(n for n in os.listdir(state / "site") if n.endswith("_module.py"))
    assert installed == [
        "antlr4_python3_runtime_module.py",
        "fairseq_fixed_module.py",
        "fairseq_lexical_module.py",
        "omegaconf_module.py",
        "sacrebleu_module.py",
    ]
    # one line for each required package that is neither on the device (at a version allowed) nor carried
    lines = [line.split(" ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    not_carried = ", and the carry folder does not hold it"
    assert lines == [
        "start: numpy>=1.21 (required by fairseq-lexical): the device has 1.19.0" + not_carried,
        "start: lxml (required by sacrebleu): the device cannot import it" + not_carried,
    ]


def device_check(check, **env):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "device_checks.py"), check],
        capture_output=True,
        text=True,
        timeout=300,
        env=examples_env(**env),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_device_checks_answer_in_one_json_line():
    """tools/device_checks.py, as start runs it on the device: the packages the device's Python has, its
    environment, and a tiny lex_lstm's training step (on a CPU: no fused LSTM cell kernel to ask about)."""
    packages = dict(device_check("packages"))
    assert packages["fairseq_lexical"] == "0.1.0" and "torch" in packages
    found = device_check("environment")
    assert found["cuda"] is torch.cuda.is_available() and found["fairseq_lexical"].startswith(REPO)
    if torch.cuda.is_available():  # the check start makes on the device
        assert device_check("decoder")["decoder_check"] == "ok on cuda"
    else:
        assert device_check("decoder", CUDA_VISIBLE_DEVICES="") == {
            "decoder_check": "ok on cpu",
            "fused_lstm_cell": False,
        }


def test_the_campaigns_relative_paths_are_the_callers(tmp_path):
    """tools/gpu_campaign.sh runs the program from the checkout (`python -m` imports the checkout's code, with no
    PYTHONPATH) and the program goes back to the caller's directory first: a relative path is the caller's."""
    result_file(tmp_path / "poll", 1000.0, [run_record(1, 0.9)])
    proc = subprocess.run(
        ["bash", os.path.join(REPO, "tools", "gpu_campaign.sh"), "collect", "poll", "--results", "results"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in examples_env(PYTHON=sys.executable).items() if k != "PYTHONPATH"},
    )
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(tmp_path / "results") == ["gpu_scan_jump_simple.json"]
    assert not os.path.exists(os.path.join(REPO, "results"))


def test_start_restart_replaces_a_running_campaign(tmp_path, monkeypatch, capsys):
    """A running campaign: start refuses and names --restart; start --restart stops its scheduler (and what it
    runs) and goes on to install."""
    from fairseq_lexical_recipes.campaign.__main__ import main

    carry, state = tmp_path / "carry", tmp_path / "state"
    carry.mkdir()
    (carry / "manifest.json").write_text(json.dumps({"python": "%d.%d" % sys.version_info[:2]}))
    state.mkdir()
    (state / device.MARKER).write_text("{}")
    scheduler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    (state / "scheduler.json").write_text(json.dumps({"pid": scheduler.pid}))
    argv = ["start", "--budget-s", "900", "--state", str(state), "--carry", str(carry)]
    try:
        assert main(argv) == 2 and "start --restart to stop it" in capsys.readouterr().err
        assert scheduler.poll() is None

        def installed(*args):
            raise device.CampaignError("installing")

        monkeypatch.setattr(device, "install", installed)
        assert main([*argv, "--restart"]) == 2 and "installing" in capsys.readouterr().err
        assert scheduler.wait(timeout=5) is not None  # stopped by the new start
    finally:
        scheduler.kill()
