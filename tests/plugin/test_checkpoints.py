"""Checkpoints of a lexical model: resuming, decoding from the checkpoint alone, safe loading, architecture
mismatches, averaging.

One `lex_lstm_small` setup (soft lexicon at temperature 1 so that the frozen buffer holds arbitrary floats,
dropout 0.4 so that resuming has to restore the random stream too), trained by the real fairseq programs:

* A: 10 updates in one go, a checkpoint after every update (`--save-interval-updates 1`, the last 7 kept);
* B: the run interrupted after update 5, in the middle of the first epoch (60 sentences in batches of 8 make 8
  updates per epoch): A's checkpoint of update 5 as B's `checkpoint_last.pt`, from which a second `fairseq-train`
  resumes and goes on to 10. (Stopping with `--max-update` and resuming is in tests/plugin/test_cli_end_to_end.py.)
"""

import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from tests.helpers.tiny_runs import TINY_SEARCHES, tiny_generate_args, tiny_train_args
from tests.helpers.environment import USER_DIR, needs_safe_loading

pytestmark = pytest.mark.slow
BIN = os.path.dirname(sys.executable)


def start(program, *args, cwd=None, stdin=None):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [os.path.join(BIN, program), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.PIPE if stdin is not None else None,
        text=True,
        env=env,
        cwd=cwd,
    ), stdin


def finish(started, timeout=400):
    proc, stdin = started
    out, _ = proc.communicate(input=stdin, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{proc.args[0]} failed ({proc.returncode}):\n{out[-6000:]}")
    return out


def train_args(data_bin, save_dir, lexicon, max_update):
    options = ("--arch", "lex_lstm_small", "--lexicon", lexicon, "--lexicon-temperature", "1", "--lexicon-top-k", "2")
    options += ("--save-interval-updates", "1", "--keep-interval-updates", "7")
    return tiny_train_args(data_bin, save_dir, *options, updates=max_update, seed=7, log_interval=1)


def logged_losses(log):
    """{update: loss} of the train_inner lines (fairseq logs 3 decimals)."""
    found = {}
    for m in re.finditer(r"train_inner \| .*?\bloss=([\d.]+),.*?\bnum_updates=(\d+)", log):
        found[int(m.group(2))] = m.group(1)
    return found


def load(path):
    import fairseq_lexical  # noqa: F401  (allow-lists what fairseq checkpoints pickle)

    return torch.load(path)


@pytest.fixture(scope="module")
def runs(toy_data, tmp_path_factory):
    work = tmp_path_factory.mktemp("ckpt")
    soft = "".join(f"a{x}\tB{x}\t2\na{x}\tB{x % 6 + 1}\t1\n" for x in range(1, 7))
    for name in ("lex_a.tsv", "lex_b.tsv"):
        (work / name).write_text("# method: hand-written soft toy lexicon\n" + soft)
    data = toy_data / "bin"
    logs = {"A": finish(start("fairseq-train", *train_args(data, work / "A", work / "lex_a.tsv", 10)))}
    (work / "B").mkdir()
    shutil.copy(work / "A" / "checkpoint_1_5.pt", work / "B" / "checkpoint_last.pt")
    (work / "lex_a.tsv").unlink()  # A's checkpoints must do without their lexicon file from here on

    # A minimal directory for decoding: the dictionaries, and for fairseq-generate the binarised test split.
    gen_dir, dict_dir, cwd = work / "gen_bin", work / "dicts_only", work / "elsewhere"
    for d in (gen_dir, dict_dir, cwd):
        d.mkdir()
    for f in os.listdir(data):
        if f.startswith("dict."):
            shutil.copy(data / f, gen_dir / f)
            shutil.copy(data / f, dict_dir / f)
        elif f.startswith("test."):
            shutil.copy(data / f, gen_dir / f)
    sources = (toy_data / "test.src").read_text().splitlines()[:6]
    ckpt = work / "A" / "checkpoint_last.pt"
    b2 = start("fairseq-train", *train_args(data, work / "B", work / "lex_b.tsv", 10))
    gen = start("fairseq-generate", *tiny_generate_args(gen_dir, ckpt, *TINY_SEARCHES["beam5"]), cwd=cwd)
    inter = start(
        "fairseq-interactive",
        dict_dir,
        "--user-dir",
        USER_DIR,
        "--path",
        ckpt,
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--beam",
        "5",
        cwd=cwd,
        stdin="\n".join(sources) + "\n",
    )
    logs.update(B=finish(b2), generate=finish(gen), interactive=finish(inter))
    return work, logs, sources


def test_resume_reproduces_the_uninterrupted_loss_curve(runs):
    work, logs, _ = runs
    a, b = logged_losses(logs["A"]), logged_losses(logs["B"])
    assert sorted(a) == list(range(1, 11)) and sorted(b) == list(range(6, 11))
    assert re.search(r"loaded checkpoint .*checkpoint_last\.pt \(epoch 1 @ 5 updates\)", logs["B"], re.I)
    assert b == {u: a[u] for u in range(6, 11)}  # every logged loss, as printed, dropout 0.4 included
    # and the end states are the same tensors: fairseq reseeds at every update (seed + num_updates), and the
    # checkpoint restores Adam's moments, the learning-rate schedule and the position inside the epoch
    state_a = load(work / "A" / "checkpoint_last.pt")["model"]
    state_b = load(work / "B" / "checkpoint_last.pt")["model"]
    assert state_a.keys() == state_b.keys()
    assert [k for k in state_a if not torch.equal(state_a[k], state_b[k])] == []


def test_generate_and_interactive_need_neither_the_lexicon_file_nor_the_training_data(runs):
    work, logs, sources = runs
    assert not (work / "lex_a.tsv").exists()
    gen, inter = logs["generate"], logs["interactive"]
    hyps = {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", gen, re.M)}
    srcs = {int(m.group(1)): m.group(2) for m in re.finditer(r"^S-(\d+)\t(.*)$", gen, re.M)}
    assert sorted(hyps) == list(range(20))
    by_source = {srcs[i]: hyps[i] for i in hyps}
    # fairseq-interactive from the dictionaries alone gives the same beam-5 translations
    inter_hyps = {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", inter, re.M)}
    assert sorted(inter_hyps) == list(range(len(sources)))
    assert [inter_hyps[i] for i in range(len(sources))] == [by_source[s] for s in sources]


@needs_safe_loading
def test_checkpoints_hold_only_globals_the_allow_list_admits(runs):
    work, _, _ = runs
    for ckpt in (
        work / "A" / "checkpoint_last.pt",
        work / "B" / "checkpoint_best.pt",
        work / "A" / "checkpoint_1_5.pt",
    ):
        assert set(torch.serialization.get_unsafe_globals_in_checkpoint(str(ckpt))) <= {"argparse.Namespace"}


@needs_safe_loading
def test_a_checkpoint_with_another_pickled_global_is_refused_by_fairseqs_loader(runs, tmp_path):
    """tests/plugin/test_compat.py checks torch.load on a hand-made file; this is a real checkpoint with a callable
    slipped in, through the loader fairseq-generate/-interactive/-train use."""
    from fairseq import checkpoint_utils

    work, _, _ = runs
    state = load(work / "A" / "checkpoint_last.pt")
    state["extra_state"]["payload"] = os.system  # what a malicious checkpoint would carry
    evil = tmp_path / "evil.pt"
    torch.save(state, evil)
    with pytest.raises(Exception) as err:
        checkpoint_utils.load_checkpoint_to_cpu(str(evil))
    message = str(err.value)
    assert "Weights only load failed" in message and "GLOBAL posix.system" in message
    assert "evil.pt: not a loadable fairseq checkpoint" in message  # compat's message, naming the file
    with pytest.raises(Exception, match="system"):
        checkpoint_utils.load_model_ensemble([str(evil)])


def test_a_checkpoint_loaded_as_another_architecture_fails_clearly(runs, toy_data, capsys):
    from fairseq import checkpoint_utils

    from tests.helpers.models import build_model

    work, _, _ = runs
    # fine-tuning from the wrong checkpoint: fairseq-train --arch lex_transformer_tiny --restore-file <lex_lstm>
    # (fairseq-train's entry point in this process; it fails while loading, before any update)
    from fairseq_cli import train

    argv = sys.argv
    options = ("--arch", "lex_transformer_tiny", "--lexicon", "identity")
    options += ("--reset-lexicon", "--restore-file", work / "A" / "checkpoint_last.pt")  # past the lexicon check
    options += ("--reset-optimizer", "--no-save")
    sys.argv = ["fairseq-train", *tiny_train_args(toy_data / "bin", work / "C", *options, updates=1, lr=0.001)]
    try:
        with pytest.raises(SystemExit) as err:
            train.cli_main()
    finally:
        sys.argv = argv
    # a Transformer fine-tunes Transformers (models/pretrained.py): one line naming both, before any weight loads
    assert err.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "a lex_lstm_small model; lex_transformer_tiny fine-tunes fairseq Transformers" in line
    # the state loaded into a model of the other architecture, in Python
    ckpt = str(work / "A" / "checkpoint_last.pt")
    model, _, _ = build_model(
        toy_data / "bin", "--arch", "lex_transformer_tiny", "--lexicon", "identity", "--reset-lexicon"
    )
    with pytest.raises(RuntimeError) as err:
        model.load_state_dict(load(ckpt)["model"], strict=True)
    message = str(err.value)
    assert "Error(s) in loading state_dict for LexTransformerModel" in message
    assert "Missing key(s)" in message and "Unexpected key(s)" in message
    # the same checkpoint without its head (--lexicon none) is refused too: the head's tensors are left over
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\) in state_dict: .*decoder\.lexical_head"):
        checkpoint_utils.load_model_ensemble([ckpt], arg_overrides={"lexicon": "none"})


def average_like_fairseq(paths):
    """fairseq's scripts/average_checkpoints.py (not installed with the package), step by step: sum every tensor
    of every checkpoint's "model" (half tensors as float), then divide floating-point tensors in place by the
    number of checkpoints and floor-divide the others in place."""
    params, new_state = {}, None
    for path in paths:
        state = load(path)
        new_state = new_state or state
        for k, p in state["model"].items():
            p = p.float() if p.dtype == torch.half else p
            if k not in params:
                params[k] = p.clone()
            else:
                params[k] += p
    for k, v in params.items():
        if v.is_floating_point():
            v.div_(len(paths))
        else:
            v //= len(paths)
    new_state["model"] = params
    return new_state


def interval_checkpoints(work):
    paths = sorted((work / "A").glob("checkpoint_*_*.pt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    assert len(paths) == 7  # --keep-interval-updates 7
    return paths


FROZEN = (
    "decoder.lexical_head.lexicon_weights",
    "decoder.lexical_head.lexicon_targets",
    "decoder.lexical_head.uniform_target_dist",
    "decoder.lexical_head.lexicon_uniform_rows",
)


def test_fairseq_average_checkpoints_runs_on_a_lexical_checkpoint(runs):
    # fairseq floor-divides integer tensors in place: the head's masks are uint8 (a bool could not take it)
    work, _, _ = runs
    average_like_fairseq(interval_checkpoints(work)[-2:])


@pytest.mark.parametrize("n", [2, 3, 7])  # 7: 1/6 summed 7 times is exact only in float64
def test_averaging_keeps_the_frozen_lexicon_bit_identical(runs, n):
    """fairseq's averaging of n checkpoints: the frozen lexicon's tensors (float64 tables, uint8 masks, int64
    targets) come out bit-identical, the trained ones averaged."""
    work, _, _ = runs
    paths = interval_checkpoints(work)[-n:]
    states = [load(p)["model"] for p in paths]
    assert not any(v.dtype == torch.bool for v in states[0].values())
    averaged = average_like_fairseq(paths)["model"]
    for key in FROZEN:
        assert all(torch.equal(s[key], states[0][key]) for s in states), f"{key} changed during training"
    assert [key for key in FROZEN if not torch.equal(averaged[key], states[0][key])] == []
    gate = "decoder.lexical_head.gate.weight"
    torch.testing.assert_close(averaged[gate], sum(s[gate] for s in states) / n)
    # and the averaged checkpoint decodes: it loads into the model built from its own arguments
    from fairseq import checkpoint_utils

    state = load(paths[0])
    state["model"] = averaged
    out = work / f"averaged{n}.pt"
    torch.save(state, out)
    models, _ = checkpoint_utils.load_model_ensemble([str(out)])
    assert torch.equal(models[0].decoder.lexical_head.lexicon_weights, states[0][FROZEN[0]])
    out.unlink()
