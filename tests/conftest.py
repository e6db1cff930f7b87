import dataclasses
import json
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import zlib

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
EXAMPLES = os.path.join(REPO, "examples")
sys.path.insert(0, REPO)

import fairseq_lexical  # noqa: E402,F401  (compatibility fixes, e.g. checkpoint loading, for every test module)


def _torch_at_least(major, minor):
    import torch

    return tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2]) >= (major, minor)


# torch >= 2.6 loads with weights_only=True by default; compat.py's allow-list is what makes checkpoints load there.
# Older torch (the range starts at 2.4) loads everything, so tests of that behaviour have nothing to test.
needs_safe_loading = pytest.mark.skipif(
    not _torch_at_least(2, 6), reason="torch < 2.6 does not load checkpoints with weights_only=True by default"
)


def _cuda_available():
    import torch

    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not _cuda_available(), reason="no CUDA device")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=needs_cuda)], ids=["cpu", "cuda"])
def device(request):
    """The device a model-level check or a numeric test runs on: the CPU always, CUDA where there is one
    (`-k cuda` selects those variants)."""
    return request.param


def examples_env(**extra):
    """os.environ for a program of examples/ started as a script (examples/custom/run.py, ...): examples/ (the
    recipes package, examples/recipes) and this checkout first on PYTHONPATH, as the examples' run.sh set them.
    In-process, tests import the package as `recipes` (pytest.ini's pythonpath)."""
    path = os.pathsep.join(p for p in (EXAMPLES, REPO, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def program_module(name):
    """The module behind the installed program fairseq-lexical-<name> (tools/<name>.py only runs its main)."""
    import importlib

    for package in ("lexical_offline", "fairseq_lexical"):
        if os.path.exists(os.path.join(REPO, package, "cli", f"{name}.py")):
            return importlib.import_module(f"{package}.cli.{name}")
    raise LookupError(f"no program {name} in lexical_offline/cli or fairseq_lexical/cli")


def tool_module(name, folder="tools"):
    """<folder>/<name>.py as a module (tools/ and examples/<task>/ are not packages)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, folder, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def shared_data(*parts):
    """Path under ../shared/data, or skip the test with the reason."""
    path = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent (../shared/data is not part of the repository)")
    return path


SOURCE_WORDS = ["a1", "a2", "a3", "a4", "a5", "a6", "and", "twice"]
LEXICON = {"a1": "B1", "a2": "B2", "a3": "B3", "a4": "B4", "a5": "B5", "a6": "B6"}


def make_toy_pairs(n, seed):
    """A tiny compositional task: 'aX' -> 'BX', 'aX twice' -> 'BX BX', 'P and Q' -> 'P' 'Q'."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):

        def phrase():
            w = rng.choice(list(LEXICON))
            if rng.random() < 0.3:
                return f"{w} twice", f"{LEXICON[w]} {LEXICON[w]}"
            return w, LEXICON[w]

        s, t = phrase()
        if rng.random() < 0.5:
            s2, t2 = phrase()
            s, t = f"{s} and {s2}", f"{t} {t2}"
        pairs.append((s, t))
    return pairs


def write_split(prefix, pairs):
    with open(prefix + ".src", "w") as fs, open(prefix + ".tgt", "w") as ft:
        for s, t in pairs:
            fs.write(s + "\n")
            ft.write(t + "\n")


_PRIMS = {"walk": "I_WALK", "run": "I_RUN", "look": "I_LOOK", "jump": "I_JUMP"}


def scan_line(rng):
    """One SCAN-grammar command and its actions (a small part of the grammar: primitives, turn, twice/thrice,
    and)."""

    def phrase():
        if rng.random() < 0.25:
            d = rng.choice(["left", "right"])
            cmd, act = f"turn {d}", [f"I_TURN_{d.upper()}"]
        else:
            w = rng.choice(list(_PRIMS))
            cmd, act = w, [_PRIMS[w]]
            if rng.random() < 0.3:
                d = rng.choice(["left", "right"])
                cmd, act = f"{w} {d}", [f"I_TURN_{d.upper()}", _PRIMS[w]]
        r = rng.choice([1, 1, 2, 3])
        if r > 1:
            cmd, act = f"{cmd} {'twice' if r == 2 else 'thrice'}", act * r
        return cmd, act

    cmd, act = phrase()
    if rng.random() < 0.4:
        c2, a2 = phrase()
        cmd, act = f"{cmd} and {c2}", act + a2
    return f"IN: {cmd} OUT: {' '.join(act)}"


def scan_full_line(rng):
    """One command of SCAN's whole grammar (Lake & Baroni 2018, figure 6: opposite, around, and, after included) and
    its actions: a stand-in for SCAN's training file with its share of function words and long outputs."""

    def direction_phrase():
        d = rng.choice(["left", "right"])
        turn = f"I_TURN_{d.upper()}"
        verb = rng.choice(["turn", *_PRIMS])
        act = [] if verb == "turn" else [_PRIMS[verb]]
        how = rng.choice(["", "opposite", "around"])
        if how == "opposite":
            return f"{verb} opposite {d}", [turn, turn] + act
        if how == "around":
            return f"{verb} around {d}", ([turn] + act) * 4
        return f"{verb} {d}", [turn] + act

    def phrase():
        if rng.random() < 0.3:
            w = rng.choice(list(_PRIMS))
            cmd, act = w, [_PRIMS[w]]
        else:
            cmd, act = direction_phrase()
        r = rng.choice([1, 2, 3])
        if r > 1:
            cmd, act = f"{cmd} {'twice' if r == 2 else 'thrice'}", act * r
        return cmd, act

    cmd, act = phrase()
    join = rng.choice(["", "and", "after"])
    if join:
        c2, a2 = phrase()
        cmd, act = f"{cmd} {join} {c2}", (act + a2 if join == "and" else a2 + act)
    return f"IN: {cmd} OUT: {' '.join(act)}"


def write_tiny_layouts(root):
    """Minimal files of every recipe task's layout (examples/*/run.sh --data), for the fast checks (nothing is
    trained on them)."""
    rng = random.Random(1)
    scan = root / "scan" / "template_split"
    scan.mkdir(parents=True)
    for name in ("tasks_train_template_around_right.txt", "tasks_test_template_around_right.txt"):
        (scan / name).write_text("".join(scan_line(rng) + "\n" for _ in range(20)))
    (root / "scan" / "tasks_train_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(20)))
    (root / "scan" / "tasks_test_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(5)))
    cogs = root / "cogs"
    cogs.mkdir()
    line = "A cat ran .\tcat ( x _ 1 ) AND run . agent ( x _ 2 , x _ 1 )\t{}\n"
    (cogs / "train.tsv").write_text(line.format("in_distribution") * 5)
    (cogs / "dev.tsv").write_text(line.format("in_distribution") * 2)
    (cogs / "gen.tsv").write_text(line.format("prim_to_subj_common") + line.format("cp_recursion"))
    eng = root / "eng_cmn"
    eng.mkdir()
    for split in ("train", "dev", "test"):
        (eng / f"cmn.txt_{split}_tokenized.tsv").write_text("I am here .\t我 在 这里 。\n" * 3)


def tree_state(root):
    """Every file under ``root`` (relative path -> SHA-1 of its bytes): equal before and after means untouched."""
    import hashlib

    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory):
    """Raw and fairseq-preprocessed toy data: 60 train, 20 valid, 20 test pairs, and a lexicon file."""
    root = tmp_path_factory.mktemp("toy")
    write_split(str(root / "train"), make_toy_pairs(60, 1))
    write_split(str(root / "valid"), make_toy_pairs(20, 2))
    write_split(str(root / "test"), make_toy_pairs(20, 3))
    with open(root / "lexicon.tsv", "w") as f:
        f.write("# method: hand-written toy lexicon\n")
        for s, t in LEXICON.items():
            f.write(f"{s}\t{t}\t1\n")
    binarise(root, root / "bin")
    return root


def binarise(folder, dest, *options, name="{}", languages=("src", "tgt")):
    """fairseq-preprocess of a parallel corpus: FOLDER/NAME.src and .tgt for NAME train, valid and test (``name``: a
    pattern of the split's name) into ``dest``, with ``options`` (--joined-dictionary, ...); ``languages``: the
    suffixes of the source and target files (and so of the data-bin's files)."""
    splits = [(f"--{split}pref", os.path.join(folder, name.format(split))) for split in ("train", "valid", "test")]
    prefixes = [a for pair in splits for a in pair]
    languages = ("--source-lang", languages[0], "--target-lang", languages[1])
    run_cli("fairseq-preprocess", *languages, *prefixes, *options, "--destdir", dest, "--workers", "1")


def run_cli(program, *args, check=True, input=None, cwd=None):
    """Run a fairseq console script from the same environment as the tests; return the completed process."""
    exe = os.path.join(os.path.dirname(sys.executable), program)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [exe, *map(str, args)], capture_output=True, text=True, env=env, input=input, cwd=cwd, timeout=600
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{program} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def build_model(data_dir, *model_args):
    """Build a model and its task in-process from fairseq-train style arguments."""
    from fairseq_lexical.analysis.checkpoints import build_model as build

    return build(data_dir, *model_args)


def toy_lexical_model(toy_data):
    """(model, task, args): an untrained lex_lstm_small with the toy lexicon under --task lexical_translation."""
    return build_model(
        toy_data / "bin",
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        toy_data / "lexicon.tsv",
        "--task",
        "lexical_translation",
    )


def save_checkpoint(path, args, model, without=()):
    """A checkpoint fairseq's loaders read, as fairseq-train writes it (config, model, an optimizer history);
    `without`: model settings left out of the saved config, as an older version of the code saved it."""
    import torch
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True, enum_to_str=True)
    for name in without:  # (the conversion fills in the parser's defaults)
        delattr(cfg["model"], name)
    torch.save(
        {
            "cfg": cfg,
            "model": model.state_dict(),
            "extra_state": {"train_iterator": {"epoch": 1}},
            "optimizer_history": [
                {
                    "criterion_name": "lexical_cross_entropy",
                    "optimizer_name": "adam",
                    "lr_scheduler_state": {},
                    "num_updates": 0,
                }
            ],
        },
        path,
    )


# -- tiny training runs --------------------------------------------------------------------------------------------
USER_DIR = os.path.join(REPO, "fairseq_lexical")


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


@pytest.fixture(scope="session")
def tiny_runs(toy_data, tmp_path_factory):
    """The session's tiny runs (TinyRuns): ``tiny_runs("lex_lstm", "beam5")`` or ``tiny_runs(tiny_spec(...))``."""
    return TinyRuns(toy_data, tmp_path_factory.mktemp("tiny_runs"))
