"""Every architecture trains under fairseq's distributed data parallel training (torch DDP, gloo, 2 CPU processes).

Two launches of the same fairseq-train jobs on the toy data, started at the same time:

* DDP: ``torchrun --nproc_per_node 2`` running fairseq-train's own entry point (``fairseq_cli.train.cli_main``)
  with ``--cpu --distributed-backend gloo`` (the default ``--ddp-backend pytorch_ddp``, i.e. torch's
  DistributedDataParallel, which fails on a parameter that gets no gradient);
* reference: one process, ``--update-freq 2``.

Both use ``--batch-size 5`` on 60 sentences (12 batches of exactly 5, ``--required-batch-size-multiple 1``) and the
same seed, so they shuffle the same batch list: update u of the DDP run has batch 2u on rank 0 and batch 2u+1 on
rank 1, the reference accumulates the same two batches. With dropout 0 the two runs compute the same updates; only
the order of floating-point sums could differ (the all-reduce of gradients), so the test wants the losses fairseq
logs (3 decimals) within 2e-3 and parameters within 1e-5; measured: bit-identical for every architecture (a sum of
two gradients does not depend on the order, and DDP's division by 2 is undone exactly). With dropout they would
differ: fairseq reseeds with seed + num_updates at every update, so each DDP rank draws the masks that the reference
draws for its *first* sub-batch only.

To pay fairseq's start-up once per process, each process runs the four jobs one after the other
(tests/helpers/ddp_worker.py, a script: it sets ``sys.argv`` and calls ``cli_main``, exactly what the fairseq-train
script does), and records per rank the losses fairseq logs and the model's state after training, so that the ranks can
be compared with each other (parameters must be bit-identical: the same averaged gradients went into the same Adam
update) and with the reference."""

import json
import os
import signal
import socket
import subprocess
import sys

import pytest
import torch

from tests.helpers.tiny_runs import tiny_train_args

WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers", "ddp_worker.py")

slow = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jobs(toy, joined_bin, lexicon, soft_lexicon, save_dir):
    """name -> fairseq-train arguments (without the distributed options), each saved in ``save_dir``/name."""
    settings = dict(batch_size=5, seed=3, log_interval=1, validation=False)

    def job(name, data, *options, **more):
        options = (*options, "--cpu", "--required-batch-size-multiple", "1", "--dropout", "0")
        return tiny_train_args(data, os.path.join(save_dir, name), *options, **settings, **more)

    bin_ = str(toy / "bin")
    tiny = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32"]
    tiny += ["--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64"]
    tiny += ["--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
    return {
        # frozen lexicon: a buffer, no --find-unused-parameters needed
        "lex_lstm": job("lex_lstm", bin_, "--arch", "lex_lstm_small", "--lexicon", lexicon, updates=6),
        # trainable lexicon: a parameter that DDP must synchronise
        "lex_transformer": job(
            "lex_transformer",
            bin_,
            *("--arch", "lex_transformer_tiny", "--lexicon", soft_lexicon, "--lexicon-temperature", "1"),
            *("--lexicon-top-k", "2", "--lexicon-trainable"),
            updates=6,
        ),
        # the identity lexicon (copy) on a joined dictionary, at a reduced size
        "pgn_transformer": job("pgn_transformer", joined_bin, "--arch", "pgn_transformer", *tiny, updates=6),
        # two epochs: the Lexicon Unit alone, then the other modules; unused parameters by design in each phase
        "lla_lstm": job(
            "lla_lstm",
            bin_,
            *("--arch", "lla_lstm_small", "--lexicon-unit-epochs", "1", "--max-epoch", "2"),
            *("--task", "lla_translation", "--lexicon-unit-selection", "last"),  # (no validation here)
            "--find-unused-parameters",
        ),
        # source keys re-encoded with the target prefix every 2 steps, with the copy head on top
        "rdangle_transformer": job(
            "rdangle_transformer",
            bin_,
            *("--arch", "rdangle_transformer_tiny", "--reencode-interval", "2", "--lexicon", lexicon),
            updates=6,
        ),
    }


@pytest.fixture(scope="module")
def joined_bin(toy_data, tmp_path_factory):
    """The toy data binarised with one dictionary for both sides (pgn_transformer copies strings)."""
    from fairseq import options
    from fairseq_cli import preprocess

    dest = tmp_path_factory.mktemp("ddp_joined") / "bin"
    parser = options.get_preprocessing_parser()
    args = parser.parse_args(
        [
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            str(toy_data / "train"),
            "--destdir",
            str(dest),
            "--workers",
            "1",
            "--joined-dictionary",
        ]
    )
    preprocess.main(args)
    return str(dest)


@pytest.fixture(scope="module")
def runs(toy_data, joined_bin, tmp_path_factory):
    work = tmp_path_factory.mktemp("ddp")
    soft = work / "soft_lexicon.tsv"
    with open(soft, "w") as f:
        for x in range(1, 7):
            f.write(f"a{x}\tB{x}\t2\na{x}\tB{x % 6 + 1}\t1\n")
    procs, logs = {}, {}
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    for launch in ("ddp", "single"):
        spec = jobs(toy_data, joined_bin, str(toy_data / "lexicon.tsv"), str(soft), str(work / launch))
        if launch == "ddp":
            spec = {name: args + ["--distributed-backend", "gloo"] for name, args in spec.items()}
            command = [
                torchrun,
                "--nproc_per_node",
                "2",
                "--master_addr",
                "127.0.0.1",
                "--master_port",
                str(free_port()),
                WORKER,
            ]
        else:
            spec = {name: args + ["--update-freq", "2"] for name, args in spec.items()}
            command = [sys.executable, WORKER]
        (work / f"{launch}.json").write_text(json.dumps(spec))
        logs[launch] = open(work / f"{launch}.log", "w")
        procs[launch] = subprocess.Popen(
            command + [str(work / f"{launch}.json"), str(work / launch)],
            stdout=logs[launch],
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(work),
            start_new_session=True,
        )
    for launch, proc in procs.items():
        try:
            proc.wait(timeout=500)
        finally:
            if proc.poll() is None:  # torchrun's workers too: they are in its session
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            logs[launch].close()
        if proc.returncode != 0:
            raise AssertionError(
                f"{launch} run failed ({proc.returncode}):\n" + (work / f"{launch}.log").read_text()[-6000:]
            )
    return work


def results(work, launch, name, rank):
    record = json.loads((work / launch / name / f"rank{rank}.json").read_text())
    state = torch.load(work / launch / name / f"rank{rank}.pt")
    return record, state


ARCHS = ["lex_lstm", "lex_transformer", "pgn_transformer", "lla_lstm", "rdangle_transformer"]


@slow
@pytest.mark.parametrize("name", ARCHS)
def test_ddp_matches_one_process_with_update_freq_2(runs, name):
    ddp, ddp_state = results(runs, "ddp", name, 0)
    single, single_state = results(runs, "single", name, 0)
    assert ddp["world_size"] == 2 and single["world_size"] == 1
    expected_updates = 12 if name == "lla_lstm" else 6
    assert ddp["num_updates"] == single["num_updates"] == expected_updates
    # the same examples in each update (rank 0's and rank 1's together), and the same loss to fairseq's 3 decimals
    ddp1, _ = results(runs, "ddp", name, 1)
    together = [sorted(a + b) for a, b in zip(ddp["ids"], ddp1["ids"])]
    assert together == single["ids"]
    assert all(len(ids) == 10 for ids in together) and all(len(ids) == 5 for ids in ddp["ids"])
    assert ddp["losses"] == pytest.approx(single["losses"], abs=2e-3)
    assert ddp_state.keys() == single_state.keys()
    for key, tensor in ddp_state.items():
        torch.testing.assert_close(tensor, single_state[key], rtol=1e-4, atol=1e-5, msg=f"{name}: {key}")


@slow
@pytest.mark.parametrize("name", ARCHS)
def test_ranks_end_with_identical_parameters_and_buffers(runs, name):
    _, rank0 = results(runs, "ddp", name, 0)
    _, rank1 = results(runs, "ddp", name, 1)
    assert rank0.keys() == rank1.keys()
    different = [k for k in rank0 if not torch.equal(rank0[k], rank1[k])]
    assert not different, f"{name}: tensors differ across ranks: {different}"


def load_checkpoint(path):
    import fairseq_lexical  # noqa: F401  (allow-lists what fairseq checkpoints pickle)

    return torch.load(path)


@slow
def test_frozen_lexicon_is_a_buffer_and_unchanged(runs):
    record, state = results(runs, "ddp", "lex_lstm", 0)
    assert "decoder.lexical_head.lexicon_weights" in record["buffers"]
    assert not any("lexicon" in p for p in record["parameters"])
    init = torch.load(runs / "ddp" / "lex_lstm" / "init0.pt")
    assert torch.equal(state["decoder.lexical_head.lexicon_weights"], init["decoder.lexical_head.lexicon_weights"])
    # the checkpoint rank 0 saved holds the same lexicon
    ckpt = load_checkpoint(runs / "ddp" / "lex_lstm" / "checkpoint_last.pt")
    assert torch.equal(
        ckpt["model"]["decoder.lexical_head.lexicon_weights"], init["decoder.lexical_head.lexicon_weights"]
    )


@slow
def test_trainable_lexicon_is_trained_and_synchronised(runs):
    key = "decoder.lexical_head.lexicon_logits"
    record, rank0 = results(runs, "ddp", "lex_transformer", 0)
    _, rank1 = results(runs, "ddp", "lex_transformer", 1)
    assert key in record["parameters"]
    init = torch.load(runs / "ddp" / "lex_transformer" / "init0.pt")[key]
    assert not torch.equal(rank0[key], init), "the lexicon did not move: the synchronisation check would be empty"
    assert torch.equal(rank0[key], rank1[key])
    ckpt = load_checkpoint(runs / "ddp" / "lex_transformer" / "checkpoint_last.pt")
    _, single = results(runs, "single", "lex_transformer", 0)
    torch.testing.assert_close(ckpt["model"][key], single[key], rtol=1e-4, atol=1e-5)


@slow
@pytest.mark.parametrize("name", ARCHS)
def test_checkpoints_of_every_architecture_need_only_the_allowed_global(runs, name):
    """compat.py allow-lists argparse.Namespace alone, "measured on checkpoints of every architecture": checked."""
    ckpt = str(runs / "ddp" / name / "checkpoint_last.pt")
    assert set(torch.serialization.get_unsafe_globals_in_checkpoint(ckpt)) <= {"argparse.Namespace"}
    assert load_checkpoint(ckpt)["cfg"]["model"].arch


@slow
def test_lla_schedule_runs_both_phases_under_ddp(runs):
    log = (runs / "ddp.log").read_text()
    assert "lla_lstm schedule: epoch 1: training lexicon unit only" in log
    assert "lla_lstm schedule: epoch 2: training encoder, decoder and adversary" in log


# ---------------------------------------------------------------------------- compat.py's launcher fixes, unit
def test_torchrun_environment_sets_the_world_size_and_a_cpu_device(monkeypatch):
    """Under torchrun with --distributed-world-size left at its default (1 without GPUs), fairseq would train in
    every process alone; on a machine without GPUs it would divide by zero picking the device."""
    from types import SimpleNamespace

    import fairseq_lexical  # noqa: F401
    from fairseq.distributed import utils as distributed_utils

    def config(**kwargs):  # the fields of fairseq's DistributedTrainingConfig that infer_init_method reads
        fields = dict(
            distributed_world_size=1,
            distributed_init_method=None,
            distributed_rank=0,
            distributed_port=-1,
            distributed_no_spawn=False,
            device_id=0,
            tpu=False,
            pipeline_model_parallel=False,
        )
        return SimpleNamespace(**{**fields, **kwargs})

    for key, value in dict(
        MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", WORLD_SIZE="4", RANK="3", LOCAL_RANK="1"
    ).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    cfg = config()
    distributed_utils.infer_init_method(cfg)
    assert (cfg.distributed_world_size, cfg.distributed_rank, cfg.distributed_init_method) == (4, 3, "env://")
    assert cfg.device_id == 0 and cfg.distributed_no_spawn
    # an explicit init method is left alone (the per-process tcp:// launch)
    cfg = config(distributed_world_size=2, distributed_init_method="tcp://127.0.0.1:1")
    distributed_utils.infer_init_method(cfg)
    assert cfg.distributed_world_size == 2 and cfg.distributed_rank == 0
    # no launcher: a one-process run stays one process
    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(key)
    cfg = config()
    distributed_utils.infer_init_method(cfg)
    assert cfg.distributed_init_method is None and cfg.distributed_world_size == 1


def test_cpu_models_are_wrapped_without_device_ids(monkeypatch):
    import fairseq_lexical  # noqa: F401
    from fairseq.models import distributed_fairseq_model as dfm

    seen = {}

    def fake_init(self, module, *args, **kwargs):
        seen.update(kwargs)
        torch.nn.Module.__init__(self)

    monkeypatch.setattr(dfm.DistributedDataParallel.original, "__init__", fake_init)
    dfm.DistributedDataParallel(torch.nn.Linear(2, 2), device_ids=[0], output_device=0, process_group=None)
    assert seen["device_ids"] is None and seen["output_device"] is None
