"""Issue 70: nothing a user puts in a work directory is ever lost, and a refused run changes nothing.

The property test drives the SCAN recipe through random sequences of runs (plain, --force, changed data, stopped
by SIGINT or SIGKILL at random moments) with user files placed at random in WORK, names the pipeline uses
included. fairseq's three programs are replaced by stand-ins that write what fairseq writes there (dictionaries and
binaries, checkpoints kept and deleted as --keep-interval-updates does, a json training log, H- lines) in a fraction
of a second; what they compute is tested elsewhere, here only the files matter. The one case the record cannot
decide (a file put by hand into a directory where a step was killed by SIGKILL, before the next run) is left out:
recipes/ownership.py says why."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.helpers.environment import EXAMPLES, REPO
from tests.helpers.toy_data import tree_state, write_tiny_layouts

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fairseq_lexical_recipes import ownership  # noqa: E402
from fairseq_lexical_recipes.console import RecipeError  # noqa: E402
from fairseq_lexical_recipes.rundir import RUN_WRITES, refuse_foreign_writes  # noqa: E402

FAKE_PREPROCESS = """
import os, sys
destdir = sys.argv[sys.argv.index("--destdir") + 1]
os.makedirs(destdir, exist_ok=True)
for side in ("src", "tgt"):
    with open(f"{destdir}/dict.{side}.txt", "w") as f:
        f.write("a 1\\n")
    for split in ("train", "valid", "test"):
        for ext in ("bin", "idx"):
            with open(f"{destdir}/{split}.src-tgt.{side}.{ext}", "wb") as f:
                f.write(b"\\0" * 8)
with open(f"{destdir}/preprocess.log", "w") as f:
    f.write("Namespace()\\n")
print("| [src] dictionary: 1 types")
"""

# checkpoints every 2 updates, the last interval checkpoint kept (--keep-interval-updates 1), resumed from
# checkpoint_last.pt, one progress record per update
FAKE_TRAIN = """
import glob, json, os, re, sys, time
argv = sys.argv
save = argv[argv.index("--save-dir") + 1]
max_update = int(argv[argv.index("--max-update") + 1])
last = os.path.join(save, "checkpoint_last.pt")
start = int(open(last).read()) if os.path.exists(last) else 0
for n in range(start + 1, max_update + 1):
    time.sleep(0.03)
    rec = {"epoch": 1, "update": n, "loss": "1.0", "num_updates": str(n)}
    print("2026-01-01 00:00:00 | INFO | train_inner | " + json.dumps(rec), flush=True)
    if n % 2 == 0 or n == max_update:
        for name in (f"checkpoint_1_{n}.pt", "checkpoint_best.pt", "checkpoint_last.pt"):
            with open(os.path.join(save, name), "w") as f:
                f.write(str(n))
        for old in glob.glob(os.path.join(save, "checkpoint_1_*.pt")):
            if int(re.search(r"_(\\d+)\\.pt$", old).group(1)) < n:
                os.remove(old)
rec = {"epoch": 1, "train_loss": "1.0", "train_num_updates": str(max_update)}
print("2026-01-01 00:00:00 | INFO | train | " + json.dumps(rec), flush=True)
"""

# the references as hypotheses: <bin>/../data/test.tgt
FAKE_GENERATE = """
import os, sys
data = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "data")
lines = open(os.path.join(data, "test.tgt")).read().splitlines()
for i, line in enumerate(lines):
    print(f"H-{i}\\t-0.1\\t{line}")
print(f"Generate test with beam=1: BLEU4 = 100.00")
"""

DRIVER = """
import os, sys
import fairseq_lexical_recipes.commands
fairseq_lexical_recipes.commands.tool = lambda name: os.path.join({fake!r}, name)
from fairseq_lexical_recipes.cli import main
sys.exit(main())
"""

USER_DIRS = ("", "data", "bin", "lexicons", "simple/seed1", "lstm/seed1", "report")
USER_NAMES = (
    "config.json",
    "summary.json",
    "train.src",
    "lexcorpus.tgt",
    "dict.src.txt",
    "prepared.json",
    "simple.tsv",
    "simple.json",
    "checkpoint_last.pt",
    "checkpoint_1_4.pt",
    "checkpoint_best.pt",
    "score.json",
    "train.log",
    "generate.txt",
    "averaged.pt",
    "checkpoint_best_backup.pt",
    "experiment_notes.log",
    "generate_with_terms.txt",
    "damage_notes.json",
    "notes.txt",
)


@pytest.fixture(scope="module")
def fake_fairseq(tmp_path_factory):
    root = tmp_path_factory.mktemp("fake_fairseq")
    for name, body in (
        ("fairseq-preprocess", FAKE_PREPROCESS),
        ("fairseq-train", FAKE_TRAIN),
        ("fairseq-generate", FAKE_GENERATE),
    ):
        path = root / name
        path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
        path.chmod(0o755)
    driver = root / "driver.py"
    driver.write_text(DRIVER.format(examples=EXAMPLES, repo=REPO, fake=str(root)))
    return driver


def start_recipe(driver, data, work, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, str(driver), "scan", "--data", str(data), "--work", str(work), "--cpu-small"]
    cmd += ["--models", "lstm,simple", "--max-update", "7", *extra]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )


def interrupted_dirs(work):
    """Directories holding the record of a step killed before it could record its files."""
    out = []
    for d, _, names in os.walk(work):
        if ownership.OWNED in names:
            with open(os.path.join(d, ownership.OWNED)) as f:
                if json.load(f).get("running"):
                    out.append(os.path.realpath(d))
    return out


action = st.one_of(
    st.tuples(st.just("place"), st.sampled_from(USER_DIRS), st.sampled_from(USER_NAMES), st.integers(0, 99)),
    st.tuples(
        st.just("run"),
        st.booleans(),  # --force
        st.booleans(),  # the training data changed
        st.sampled_from([None, None, signal.SIGINT, signal.SIGKILL]),
        st.floats(0.2, 2.5),  # when the signal comes
    ),
)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(actions=st.lists(action, min_size=2, max_size=5))
def test_user_files_survive_any_sequence_of_runs(fake_fairseq, tmp_path_factory, actions):
    root = tmp_path_factory.mktemp("ownership")
    write_tiny_layouts(root)
    data, work = root / "scan", root / "w"
    train = data / "tasks_train_addprim_jump.txt"
    original = train.read_text()
    user = {}  # path -> content of every user file placed
    for act in actions:
        if act[0] == "place":
            _, sub, name, k = act
            directory = work / sub
            if os.path.realpath(directory) in interrupted_dirs(work):
                continue  # the one case the record cannot decide (see the module's docstring)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / name).write_text(f"the user's {name} #{k}\n")
            user[directory / name] = f"the user's {name} #{k}\n"
            continue
        _, force, changed, sig, delay = act
        train.write_text(original + ("IN: jump twice OUT: I_JUMP I_JUMP\n" if changed else ""))
        before = tree_state(work) if work.exists() else None
        proc = start_recipe(fake_fairseq, data, work, *(["--force"] if force else []))
        if sig is not None:
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)
        for path, content in user.items():
            assert path.is_file() and path.read_text() == content, f"{path} lost or changed after {act}:\n{err}"
        assert "Traceback" not in err, err
        if proc.returncode == 2:  # refused: WORK byte for byte as it was
            assert "nothing was written" in err or before is None, err
            assert (tree_state(work) if work.exists() else None) == before, err
        elif proc.returncode == 0:  # finished: every run scored, from the current data
            for model in ("lstm", "simple"):
                run = work / model / "seed1"
                assert json.loads((run / "score.json").read_text())["exact_match"] == 1.0
                assert ownership.owns(str(run / "score.json"))
            assert ownership.owns(str(work / "summary.json"))


def test_checkpoint_cleaning_and_force_keep_the_users_files(fake_fairseq, tmp_path):
    """Issue 70, defect 1: a plain re-run deleted averaged.pt and model_deploy.pt from the run directory; --force
    deleted checkpoint_best_backup.pt, experiment_notes.log, generate_with_terms.txt and damage_notes.json."""
    write_tiny_layouts(tmp_path)
    work = tmp_path / "w"
    proc = start_recipe(fake_fairseq, tmp_path / "scan", work)
    assert proc.wait(timeout=300) == 0, proc.communicate()
    run = work / "simple" / "seed1"
    mine = ["averaged.pt", "model_deploy.pt", "checkpoint_best_backup.pt", "experiment_notes.log"]
    mine += ["generate_with_terms.txt", "damage_notes.json"]
    for name in mine:
        (run / name).write_text("mine")
    for extra in ((), ("--force",)):
        proc = start_recipe(fake_fairseq, tmp_path / "scan", work, *extra)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
        assert all((run / n).read_text() == "mine" for n in mine)
    used = os.path.basename(json.loads((run / "config.json").read_text())["checkpoint"])
    # the pipeline's own checkpoints but the evaluated one did go
    assert sorted(n for n in os.listdir(run) if n.endswith(".pt")) == sorted(
        {used, *(n for n in mine if n.endswith(".pt"))}
    )


def test_a_refused_run_changes_nothing(fake_fairseq, tmp_path):
    """Issue 70, defect 3: refused for a changed training file, a run said "nothing was written" but had written
    WORK/config.json; with --force and a foreign file in bin/ it rewrote data/* and removed bin/prepared.json
    before refusing."""
    write_tiny_layouts(tmp_path)
    work, train = tmp_path / "w", tmp_path / "scan" / "tasks_train_addprim_jump.txt"
    assert start_recipe(fake_fairseq, tmp_path / "scan", work).wait(timeout=300) == 0
    train.write_text(train.read_text() + "IN: jump twice OUT: I_JUMP I_JUMP\n")
    before = tree_state(work)
    proc = start_recipe(fake_fairseq, tmp_path / "scan", work)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "data differ" in err, out + err
    assert tree_state(work) == before
    (work / "bin" / "dict.tgt.txt").write_text("my own dictionary\n")
    before = tree_state(work)
    proc = start_recipe(fake_fairseq, tmp_path / "scan", work, "--force")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and f"{work}/bin/dict.tgt.txt: not written by the pipeline" in err, out + err
    assert tree_state(work) == before


def test_a_work_directory_of_the_users_own_files_is_refused_untouched(fake_fairseq, tmp_path):
    """Issue 70, defect 2: `--work .` in a project folder overwrote its data/train.src, data/test.tgt,
    lexicons/simple.tsv, config.json and preprocess.log without a word."""
    write_tiny_layouts(tmp_path)
    work = tmp_path / "project"
    for name in ("data/train.src", "data/test.tgt", "lexicons/simple.tsv", "config.json", "preprocess.log"):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(f"my {name}\n")
    before = tree_state(work)
    proc = start_recipe(fake_fairseq, tmp_path / "scan", work)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, out + err
    for name in ("data/train.src", "data/test.tgt", "lexicons/simple.tsv", "config.json", "preprocess.log"):
        assert str(work / name) in err
    assert tree_state(work) == before


def test_a_step_killed_before_it_recorded_leaves_a_run_that_resumes(fake_fairseq, tmp_path):
    """SIGKILL gives the pipeline no chance to record what fairseq-train wrote: the step's snapshot, recorded
    before it started, lets the next run take those files as its own and resume from them."""
    write_tiny_layouts(tmp_path)
    work = tmp_path / "w"
    proc = start_recipe(fake_fairseq, tmp_path / "scan", work, "--models", "simple", "--max-update", "400")
    run = work / "simple" / "seed1"
    deadline = time.time() + 120
    while not (run / "checkpoint_last.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert os.path.realpath(run) in interrupted_dirs(work)
    proc = start_recipe(fake_fairseq, tmp_path / "scan", work, "--models", "simple", "--max-update", "400")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert "taken as the pipeline's" in out and "resuming training from" in out
    assert interrupted_dirs(work) == []


def test_a_work_directory_of_an_earlier_version_is_adopted(fake_fairseq, tmp_path):
    """A WORK made before the records (no .owned_files.json anywhere): its finished runs are reused and its files
    recorded by the names the pipelines wrote then, once."""
    write_tiny_layouts(tmp_path)
    work = tmp_path / "w"
    assert start_recipe(fake_fairseq, tmp_path / "scan", work).wait(timeout=300) == 0
    for record in work.rglob(ownership.OWNED):
        record.unlink()
    proc = start_recipe(fake_fairseq, tmp_path / "scan", work)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and out.count("(done before: skipped)") == 2, out + err
    assert ownership.owns(str(work / "data" / "train.src")) and ownership.owns(
        str(work / "simple" / "seed1" / "score.json")
    )


def test_after_a_killed_step_only_what_it_wrote_is_taken(tmp_path, monkeypatch):
    """What a step killed before recording left: the files it created and the pipeline's files it changed; a user's
    file changed meanwhile stays the user's."""
    with ownership.writing(str(tmp_path)):
        (tmp_path / "train.log").write_text("ours")
    (tmp_path / "notes.txt").write_text("mine")
    step = ownership.writing(str(tmp_path))
    step.__enter__()  # ... and never leaves: SIGKILL
    monkeypatch.setattr(ownership, "_active", {})
    (tmp_path / "train.log").write_text("ours, appended to")
    (tmp_path / "checkpoint_last.pt").write_text("new")
    (tmp_path / "notes.txt").write_text("mine, edited")
    assert ownership.owns(str(tmp_path / "train.log")) and ownership.owns(str(tmp_path / "checkpoint_last.pt"))
    assert not ownership.owns(str(tmp_path / "notes.txt"))
    with ownership.writing(str(tmp_path)):  # the next step settles the record
        pass
    assert not ownership.remove(str(tmp_path / "notes.txt")) and (tmp_path / "notes.txt").read_text() == "mine, edited"
    assert ownership.remove(str(tmp_path / "checkpoint_last.pt"))


def test_a_recorded_file_changed_to_the_same_size_is_the_users(tmp_path):
    """Issue 80, point 13a: ownership is size and modification time: a file rewritten by hand to the same size is the
    user's (refused, kept), which a comparison by size alone would miss."""
    log = tmp_path / "train.log"
    with ownership.writing(str(tmp_path)):
        log.write_text("ours")
    recorded = log.stat().st_mtime_ns
    log.write_text("mine")
    os.utime(log, ns=(recorded + 10**9, recorded + 10**9))  # a new mtime, whatever the file system's resolution
    assert not ownership.owns(str(log))
    with pytest.raises(RecipeError, match=rf"^{log}: not written by the pipeline"):
        refuse_foreign_writes(str(tmp_path), RUN_WRITES, "the run")
    assert not ownership.remove(str(log)) and log.read_text() == "mine"
    with ownership.writing(str(tmp_path)):  # a step does not take it either
        pass
    assert not ownership.owns(str(log))


def test_a_file_moved_out_and_linked_back_is_the_users(tmp_path):
    """Issue 80, point 4: ownership compared os.stat's size and mtime, which follow links: a pipeline file moved out
    of WORK (mv keeps its mtime) and linked back counted as the pipeline's."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    outside.mkdir()
    with ownership.writing(str(work)):
        (work / "train.log").write_text("ours")
    os.replace(work / "train.log", outside / "train.log")
    (work / "train.log").symlink_to(outside / "train.log")
    assert not ownership.owns(str(work / "train.log"))
    assert ownership.foreign([str(work / "train.log")]) == [str(work / "train.log")]
    assert not ownership.remove(str(work / "train.log")) and (work / "train.log").is_symlink()
    with ownership.writing(str(work)):  # nor does a step take a link as written by it
        (outside / "other.log").write_text("the user's")
        (work / "other.log").symlink_to(outside / "other.log")
    assert not ownership.owns(str(work / "other.log"))


@pytest.mark.parametrize(
    "record",
    [
        '{"files": {}, "running": {}}',
        '{"files": {"train.log": [4, 1]}, "running": []}',
        '{"files": {}, "running": {"before": {}, "recorded": 5}}',
        '{"files": {"train.log": 4}, "running": null}',
        '{"files": []}',
        "[]",
        "not json",
        pytest.param("[" * 100000, id="nested deeper than json reads"),
    ],
)
def test_a_damaged_record_is_refused_in_the_checks_naming_it(tmp_path, record):
    """Issue 80, point 9a: a record with "running": {} ended in a KeyError traceback, in the middle of a step; it is
    refused where the files are checked before writing, even where no file of the names checked exists."""
    (tmp_path / ownership.OWNED).write_text(record)
    (tmp_path / "notes.txt").write_text("mine")
    message = rf"^{tmp_path}/{ownership.OWNED}: not a record of the pipeline's files \(move it away\)$"
    with pytest.raises(RecipeError, match=message):
        refuse_foreign_writes(str(tmp_path), RUN_WRITES, "the run")
    with pytest.raises(RecipeError, match=message):
        ownership.foreign([str(tmp_path / "config.json")])
    with pytest.raises(RecipeError, match=message):
        with ownership.writing(str(tmp_path)):
            pass
    assert (tmp_path / ownership.OWNED).read_text() == record and (tmp_path / "notes.txt").read_text() == "mine"


def test_force_writes_through_no_link_to_a_file_moved_out_of_work(fake_fairseq, tmp_path):
    """Issue 80, point 4, end to end: with the lexicon and a training log moved out of WORK and linked back, --force
    rebuilt the lexicon and rewrote the log through the links."""
    write_tiny_layouts(tmp_path)
    work, outside = tmp_path / "w", tmp_path / "outside"
    assert start_recipe(fake_fairseq, tmp_path / "scan", work).wait(timeout=300) == 0
    outside.mkdir()
    links = [work / "lexicons" / "simple.tsv", work / "simple" / "seed1" / "train.log"]
    for k, link in enumerate(links):
        os.replace(link, outside / f"{k}_{link.name}")
        link.symlink_to(outside / f"{k}_{link.name}")
    kept = tree_state(outside)
    before = {str(p): os.readlink(p) for p in links}
    proc = start_recipe(fake_fairseq, tmp_path / "scan", work, "--force")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "nothing was written" in err, out + err
    assert all(str(p) in err for p in links), err
    assert tree_state(outside) == kept and {str(p): os.readlink(p) for p in links} == before


def test_a_damaged_record_stops_the_pipeline_before_it_writes(fake_fairseq, tmp_path):
    """Issue 80, point 9a, end to end: a run directory's record with "running": {} ended in a KeyError traceback
    once the data-bin and the lexicon had been rewritten."""
    write_tiny_layouts(tmp_path)
    work = tmp_path / "w"
    assert start_recipe(fake_fairseq, tmp_path / "scan", work).wait(timeout=300) == 0
    run = work / "simple" / "seed1"
    record = json.loads((run / ownership.OWNED).read_text())
    (run / ownership.OWNED).write_text(json.dumps({**record, "running": {}}))
    (run / "notes.txt").write_text("mine")
    before = tree_state(work)
    proc = start_recipe(fake_fairseq, tmp_path / "scan", work, "--force")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "Traceback" not in err, out + err
    assert f"{run}/{ownership.OWNED}: not a record of the pipeline's files (move it away)" in err
    assert tree_state(work) == before


def test_force_writes_into_no_linked_folder_inside_work(fake_fairseq, tmp_path):
    """A folder of WORK moved out and linked back (WORK/lexicons -> elsewhere): the files in it are still
    recorded as the pipeline's, but writing there writes outside WORK. The checks name the link and nothing is
    written; a WORK that is itself a link (the user's choice of place) is followed as before."""
    write_tiny_layouts(tmp_path)
    work, outside = tmp_path / "w", tmp_path / "outside"
    assert start_recipe(fake_fairseq, tmp_path / "scan", work).wait(timeout=300) == 0
    outside.mkdir()
    os.replace(work / "lexicons", outside / "lexicons")
    (work / "lexicons").symlink_to(outside / "lexicons")
    kept = tree_state(outside)
    proc = start_recipe(fake_fairseq, tmp_path / "scan", work, "--force")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "nothing was written" in err and f"{work}/lexicons:" in err, out + err
    assert tree_state(outside) == kept
    os.remove(work / "lexicons")
    os.replace(outside / "lexicons", work / "lexicons")
    (tmp_path / "linked_work").symlink_to(work)
    assert start_recipe(fake_fairseq, tmp_path / "scan", tmp_path / "linked_work").wait(timeout=300) == 0
