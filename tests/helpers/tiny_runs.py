"""The session's tiny training runs (each tiny model trained once, a configuration matrix: TINY_RUNS) and the
fairseq-train / fairseq-generate arguments every test that trains builds its command from."""

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import zlib

from tests.helpers.environment import USER_DIR


def tiny_train_args(
    data,
    save_dir,
    *options,
    updates=None,
    lr=0.005,
    batch_size=8,
    seed=1,
    log_format=None,
    log_interval=None,
    validation=True,
    epoch_checkpoints=False,
    criterion="lexical_cross_entropy",
    optimizer="adam",
    user_dir=USER_DIR,
):
    """fairseq-train's arguments (after the program's name) for a tiny run of the tests: every test that trains
    builds its command here. ``options``: the architecture, its lexicon and the run's own options (schedule,
    logging, distributed or mixed-precision training, ...); the keywords: what most runs set (``updates``:
    --max-update; ``seed`` 1 is fairseq's default; ``log_interval`` alone logs in the simple format; ``user_dir``
    None: stock fairseq, without the plugin)."""
    argv = [data, *(["--user-dir", user_dir] if user_dir else []), *options, "--criterion", criterion]
    argv += ["--optimizer", optimizer]
    argv += ["--lr", lr, "--batch-size", batch_size, "--seed", seed, "--num-workers", 0, "--save-dir", save_dir]
    if updates is not None:
        argv += ["--max-update", updates]
    if log_format or log_interval is not None:
        argv += ["--log-format", log_format or "simple"]
    if log_interval is not None:
        argv += ["--log-interval", log_interval]
    if not validation:
        argv.append("--disable-validation")
    if not epoch_checkpoints:
        argv.append("--no-epoch-checkpoints")
    return [str(a) for a in argv]


def tiny_generate_args(data, path, *search, subset="test", user_dir=USER_DIR):
    """fairseq-generate's arguments for a checkpoint of a tiny run: ``search`` (beam, batch size, task, ...) on the
    ``subset`` split."""
    return [str(a) for a in (data, "--user-dir", user_dir, "--path", path, "--gen-subset", subset, *search)]


TOY_LEXICON = "{toy lexicon}"  # in a TinySpec's options: the run's own copy of the toy lexicon, removed once trained


@dataclasses.dataclass(frozen=True)
class TinySpec:
    """A tiny run on the toy data: fairseq-train ``options`` (TOY_LEXICON standing for the lexicon file) and
    tiny_train_args' keywords as sorted (name, value) pairs. Equal specs are one run in a test session."""

    options: tuple
    settings: tuple = ()
    float64: bool = False  # trained with torch's default dtype float64 (a float64 model), to compare runs exactly

    def train_args(self, data, save_dir, lexicon, **changes):
        """tiny_train_args of this run, with ``lexicon`` for TOY_LEXICON and ``changes`` to its keywords."""
        options = [lexicon if o == TOY_LEXICON else o for o in self.options]
        return tiny_train_args(data, save_dir, *options, **{**dict(self.settings), **changes})


def tiny_spec(*options, float64=False, **settings):
    return TinySpec(tuple(str(o) for o in options), tuple(sorted(settings.items())), float64)


# The configuration matrix of the tiny runs (the habit of yoyodyne's tests): each family's small architecture with
# the toy lexicon, trained once per test session by the `tiny_runs` fixture and shared by every test that reads a
# trained model; and the searches that decode them. A test whose run needs other settings spells them in a
# tiny_spec (or, where the run itself is the test, calls tiny_train_args).
TINY_RUNS = {
    "lex_lstm": tiny_spec("--arch", "lex_lstm_small", "--lexicon", TOY_LEXICON, updates=20, seed=3, log_interval=5),
    "lex_transformer": tiny_spec(
        "--arch", "lex_transformer_tiny", "--lexicon", TOY_LEXICON, updates=16, seed=3, log_interval=4
    ),
    "rdangle_transformer": tiny_spec(
        *("--arch", "rdangle_transformer_tiny", "--kv-mode", "sep", "--reencode-interval", 2),
        *("--reencode-chunk-size", 8, "--relative-positions", 4, "--lexicon", TOY_LEXICON),
        updates=12,
        seed=3,
        log_interval=4,
    ),
    # the LLA schedule: two epochs of the Lexicon Unit alone, then two of the other modules (every epoch's checkpoint)
    "lla_lstm": tiny_spec(
        *("--arch", "lla_lstm_small", "--task", "lla_translation", "--lexicon-unit-epochs", 2, "--max-epoch", 4),
        seed=3,
        log_interval=5,
        epoch_checkpoints=True,
    ),
}
TINY_MAX_LEN_B = 12  # the toy targets have at most 4 words: no 200-step beams from undertrained models
TINY_SEARCHES = {
    # fairseq's translation task and search, the test split in batches of 16 (not a multiple of 8: 20 sentences)
    "beam5": ("--beam", "5", "--batch-size", "16"),
    # the hub's two searches: the keep-best search and fairseq's, with bounded outputs
    "keep_best": ("--task", "lexical_translation", "--beam", "5", "--max-len-b", TINY_MAX_LEN_B, "--batch-size", "16"),
    "fairseq": ("--task", "translation", "--beam", "5", "--max-len-b", TINY_MAX_LEN_B, "--batch-size", "16"),
}

# Runs fairseq-train and fairseq-generate jobs in one process (each program's start-up is paid once), each job's
# output (stdout and stderr) into its own file; `done` is written when a job succeeds, `remove` is removed when it
# ends, and a job whose `after` file is missing (its training failed) is skipped.
_TINY_RUNNER = r"""
import json, os, sys, traceback
import torch
import fairseq_lexical
from fairseq_cli import generate, train
for job in json.loads(sys.argv[1]):
    if job["after"] and not os.path.exists(job["after"]):
        continue
    torch.set_default_dtype(torch.float64 if job.get("float64") else torch.float32)
    # fairseq keeps a run's best validation score on these functions: a fresh start for each job
    from fairseq import checkpoint_utils
    for keeper in (train.should_stop_early, checkpoint_utils.save_checkpoint):
        keeper.__dict__.pop("best", None)
    with open(job["log"], "w") as log:
        sys.stdout.flush(), sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1), os.dup2(log.fileno(), 2)
        try:
            sys.argv = job["argv"]
            (train if job["argv"][0] == "fairseq-train" else generate).cli_main()
            open(job["done"], "w").close()
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            if job["remove"] and os.path.exists(job["remove"]):
                os.remove(job["remove"])
"""


@dataclasses.dataclass
class TinyRun:
    """A trained tiny run: ``dir`` (the save directory: checkpoint_last.pt, ...), ``log`` (fairseq-train's output)
    and ``outputs`` ({search: the file of fairseq-generate's output on the test split}). Shared by the session's
    tests: read it, write elsewhere."""

    dir: pathlib.Path
    log: str
    outputs: dict

    @property
    def checkpoint(self):
        return self.dir / "checkpoint_last.pt"

    def generate(self, search):
        """fairseq-generate's output (stdout and stderr) for ``search``, a name of TINY_SEARCHES or options."""
        return self.outputs[search].read_text()


class TinyRuns:
    """The session's tiny runs on the toy data, by spec: each trained once, the first time a test asks for it, and
    decoded once per search. ``runs(spec, *searches)`` -> TinyRun (an AssertionError with the program's output if
    it failed); ``runs.prepare(specs, searches)`` first trains and decodes what is missing of several runs side by
    side, a process a core."""

    def __init__(self, data, root):
        self.data, self.root = data, root
        self.folders = {}  # spec -> its folder: lexicon.tsv while it trains, ckpt/, train.log, generate-*.txt

    def __call__(self, spec, *searches):
        spec = TINY_RUNS[spec] if isinstance(spec, str) else spec
        self.prepare([spec], searches)
        return self._result(spec, searches)

    def prepare(self, specs, searches=()):
        groups = []  # the jobs of one run, in order
        for spec in dict.fromkeys(TINY_RUNS[s] if isinstance(s, str) else s for s in specs):
            group = []
            if spec not in self.folders:
                self.folders[spec] = self.root / f"run{len(self.folders)}"
                group.append(self._train_job(spec))
            elif not (self.folders[spec] / "trained").exists():
                continue  # its training failed: _result says so
            jobs = (self._generate_job(spec, search) for search in searches)
            group += [job for job in jobs if not os.path.exists(job["log"])]
            if group:
                groups.append(group)
        self._run(groups)

    def _train_job(self, spec):
        folder = self.folders[spec]
        folder.mkdir()
        lexicon = folder / "lexicon.tsv"
        if TOY_LEXICON in spec.options:
            shutil.copy(self.data / "lexicon.tsv", lexicon)
        argv = ["fairseq-train", *spec.train_args(self.data / "bin", folder / "ckpt", lexicon)]
        # from the end of training on, nothing may need the lexicon file
        job = dict(log=folder / "train.log", done=folder / "trained", after="", remove=lexicon)
        return dict(spec=spec, argv=argv, float64=spec.float64, **{k: str(v) for k, v in job.items()})

    def _generate_job(self, spec, search):
        folder = self.folders[spec]
        options = TINY_SEARCHES.get(search, search)
        argv = ["fairseq-generate", *tiny_generate_args(self.data / "bin", folder / "ckpt" / "checkpoint_last.pt")]
        name = zlib.crc32(repr(options).encode())
        log, done = folder / f"generate-{name:08x}.txt", folder / f"generate-{name:08x}.done"
        job = dict(log=log, done=done, after=folder / "trained", remove="")
        return dict(spec=spec, argv=argv + [str(o) for o in options], **{k: str(v) for k, v in job.items()})

    def _run(self, groups):
        if not groups:
            return
        shares = [[] for _ in range(min(len(groups), len(os.sched_getaffinity(0))))]
        for i, group in enumerate(groups):
            shares[i % len(shares)] += [{k: v for k, v in job.items() if k != "spec"} for job in group]
        env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")  # tiny models: a thread each
        procs = []
        for jobs in shares:  # what a runner says outside its jobs (fairseq's import, a crash) goes to runner.log
            with open(self.root / "runner.log", "a") as log:
                command = [sys.executable, "-c", _TINY_RUNNER, json.dumps(jobs)]
                procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        try:
            for proc in procs:
                proc.wait(timeout=900)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    def _result(self, spec, searches):
        folder = self.folders[spec]

        def output(job, what):
            if not os.path.exists(job["done"]):
                missing = f"(no output: see {self.root / 'runner.log'})"
                text = pathlib.Path(job["log"]).read_text() if os.path.exists(job["log"]) else missing
                raise AssertionError(f"{what} of the tiny run {spec} failed:\n{text[-5000:]}")
            return pathlib.Path(job["log"])

        log = output(dict(log=folder / "train.log", done=folder / "trained"), "fairseq-train").read_text()
        outputs = {s: output(self._generate_job(spec, s), f"fairseq-generate {s}") for s in searches}
        return TinyRun(folder / "ckpt", log, outputs)
