"""fairseq-generate output written by hand, the hand-scored samples, and tools/score.py's main run in-process (the
scoring tests' shared material)."""

import importlib.util
import os

from tests.helpers.environment import REPO

SCORE_PY = os.path.join(REPO, "tools", "score.py")


def load_score_cli():
    spec = importlib.util.spec_from_file_location("score_cli", SCORE_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


score_cli = load_score_cli()


def write_generate(path, samples, order=None, with_sources=True, with_targets=True):
    """Write fairseq-generate output: samples = [(source, target, hypothesis)], printed in ``order`` of ids."""
    lines = ["2024-01-01 00:00:00 | INFO | fairseq_cli.generate | a log line"]
    for i in order if order is not None else range(len(samples)):
        src, tgt, hyp = samples[i]
        if with_sources:
            lines.append(f"S-{i}\t{src}")
        if with_targets:
            lines.append(f"T-{i}\t{tgt}")
        lines += [f"H-{i}\t-0.{i + 1}\t{hyp}", f"D-{i}\t-0.{i + 1}\t{hyp}", f"P-{i}\t-0.1000 -0.2000"]
    lines.append("Generate test with beam=5: BLEU4 = 0.00, 0.0/0.0/0.0/0.0 (BP=1.000, ratio=1.000)")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def run_main(capsys, *argv):
    code = score_cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# (source, reference, hypothesis); per-sentence values worked out by hand (P, R over types; P', R' over tokens):
#   0: identical                               EM 1  P 1    R 1    P' 1    R' 1    acc 1
#   1: h = A C, r = A B C D: types {A, C} = 2 of 2 and 4; tokens the same
#                                               EM 0  P 1    R 2/4  P' 2/2  R' 2/4  acc: A=A, C!=B -> 1/4
#   2: h = A B B B, r = A A B: types {A, B} = 2 of 2 and 2; tokens min(1,2) A + min(3,1) B = 2 of 4 and 3
#                                               EM 0  P 1    R 1    P' 2/4  R' 2/3  acc: A=A, B!=A, B=B -> 2/4
#   3: empty hypothesis, r = X                  EM 0  P 0    R 0    P' 0    R' 0    acc 0/1
#   4: same tokens, other spacing               EM 1  P 1    R 1    P' 1    R' 1    acc 1
SAMPLES = [
    ("a b c", "A B C", "A B C"),
    ("a b c d", "A B C D", "A C"),
    ("a a b", "A A B", "A B B B"),
    ("x", "X", ""),
    ("a b", "A  B", " A B "),
]
HAND_EM = 2 / 5
HAND_PRECISION = (1 + 1 + 1 + 0 + 1) / 5  # 0.8
HAND_RECALL = (1 + 0.5 + 1 + 0 + 1) / 5  # 0.7
HAND_PRECISION_TOKENS = (1 + 1 + 0.5 + 0 + 1) / 5  # 0.7
HAND_RECALL_TOKENS = (1 + 0.5 + 2 / 3 + 0 + 1) / 5  # 19/30
HAND_TOKEN_ACCURACY = (1 + 0.25 + 0.5 + 0 + 1) / 5  # 0.55
