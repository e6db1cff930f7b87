"""fairseq_lexical_recipes.campaign.carry: prepare's checks of its arguments (issue 70, item 10), its carry folder, and
the requirements of the wheels it carries."""

import os
import subprocess

import pytest

from fairseq_lexical_recipes.campaign import carry
from fairseq_lexical_recipes.campaign.__main__ import main


def test_prepare_counts_a_carry_above_32_mib_once(tmp_path, monkeypatch, capsys):
    """Issue 79, point 1: prepare built its carry folder in a temporary folder inside the checkout, which git does
    not ignore, so a 31.5 MiB carry counted twice ("a call takes 66.7 MiB") and every real plan was refused. A
    33 MiB carry now passes the 64 MiB check of a call, and only the working tree is counted beside it."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".gitignore").write_text("/.gpu/\n")
    (checkout / "README.md").write_text("a checkout\n")
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    subprocess.run(["git", "-C", str(checkout), "add", "-A"], check=True)
    monkeypatch.setattr(carry, "ROOT", str(checkout))

    def build(folder, plan_name, *args, **kwargs):  # the wheels and data of a real plan: 33 MiB
        with open(os.path.join(folder, "wheels.bin"), "wb") as f:
            f.write(b"\0" * (33 * 2**20))
        manifest = {"wheels": ["w.whl"], "data": {"files": {"scan/x": 1}}, "bytes": carry.folder_bytes(folder)}
        carry.write_json(os.path.join(folder, "manifest.json"), manifest)
        return manifest

    monkeypatch.setattr(carry, "build", build)
    args = dict(carry=str(checkout / ".gpu"), plan="scan", data=str(tmp_path), python_version="3.12")
    args.update(platform=carry.DEVICE_PLATFORM, leave_out="torch", fairseq_wheel=None, budget_s=900, dry_run=False)
    assert carry.prepare(type("Args", (), args)) == 0
    out = capsys.readouterr().out
    assert "33.0 MiB in all" in out and "a call takes 33.0 MiB" in out, out
    assert sorted(os.listdir(checkout)) == [".git", ".gitignore", ".gpu", "README.md"]  # nothing else left there
    assert "a fresh lease of 900 s completes 10 of them with 10 at once" in out


def test_wheel_requirements_evaluate_markers_for_the_target(tmp_path):
    import zipfile

    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(
            "x-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: x\nVersion: 1.0\n"
            "Requires-Dist: a\nRequires-Dist: b; python_version < '3.9'\n"
            "Requires-Dist: c; extra == 'test'\nRequires-Dist: d>=2; sys_platform == 'linux'\n",
        )
    assert [str(r) for r in carry.wheel_requirements(str(wheel), "3.12")] == ["a", 'd>=2; sys_platform == "linux"']


@pytest.mark.parametrize(
    "option, says",
    [
        (["--fairseq-wheel", "/nonexistent.whl"], "--fairseq-wheel /nonexistent.whl: no such wheel"),
        (["--budget-s", "-5"], "--budget-s -5: must be more than 0"),
        # issue 80, point 9: an empty list left nothing out (pip fetched 900 MB of CUDA wheels under --dry-run);
        # a bad Python or platform was pip's own error, after the plugin's wheel was built
        (["--leave-out", ",,,"], "--leave-out ',,,' names no package: the carry folder would take torch"),
        (["--leave-out", " "], "--leave-out ' ' names no package"),
        (["--leave-out", "torch,,numpy"], "--leave-out 'torch,,numpy': an empty name"),
        (["--leave-out", "torch,num py"], "--leave-out 'torch,num py': 'num py' is not a package name"),
        (["--leave-out", "torch,numpy>=2"], "--leave-out 'torch,numpy>=2': 'numpy>=2' is not a package name"),
        (["--leave-out", "numpy,scipy"], "--leave-out 'numpy,scipy' does not name torch"),
        (["--python-version", "abc"], "--python-version 'abc': not a Python version like 3.12 (3.10 or later)"),
        (["--python-version", "2.7"], "--python-version '2.7': not a Python version like 3.12"),
        (["--python-version", "3.12.1"], "--python-version '3.12.1': not a Python version like 3.12"),
        (["--platform", "weird"], "--platform 'weird': neither 'host' nor a wheel platform tag like manylinux_2_28"),
        (["--platform", "manylinux_2_28"], "--platform 'manylinux_2_28': neither 'host' nor a wheel platform tag"),
    ],
    ids=["wheel", "budget", "leave_out_commas", "leave_out_blank", "leave_out_empty_name", "leave_out_space",
         "leave_out_specifier", "leave_out_no_torch", "python_abc", "python_2", "python_micro", "platform_weird",
         "platform_no_arch"],
)  # fmt: skip
def test_prepare_checks_its_arguments(tmp_path, capsys, option, says):
    code = main(["prepare", "--dry-run", "--data", str(tmp_path), *option])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"gpu_campaign prepare: error: {says}") and err.count("\n") == 1, err


def test_prepare_takes_the_targets_and_names_it_should():
    for platform in ("host", carry.DEVICE_PLATFORM, "manylinux2014_x86_64", "musllinux_1_2_aarch64"):
        carry.check_target("3.12", platform)
    carry.check_target("3.10", "manylinux_2_17_x86_64")
    assert carry.leave_out_names(" torch , scikit-learn,Pillow,ruamel.yaml ") == [
        "torch",
        "scikit-learn",
        "Pillow",
        "ruamel.yaml",
    ]
    assert carry.leave_out_names(",".join(carry.LEFT_OUT)) == list(carry.LEFT_OUT)
