import os
import random
import re
import subprocess
import sys

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
    run_cli(
        "fairseq-preprocess",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--trainpref",
        root / "train",
        "--validpref",
        root / "valid",
        "--testpref",
        root / "test",
        "--destdir",
        root / "bin",
        "--workers",
        "1",
    )
    return root


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
