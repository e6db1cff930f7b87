"""A training process asked to stop (FAIRSEQ_LEXICAL_STOP_FILE) leaves at a step boundary through Python's normal
exit, and a process beside it trains on: how a GPU campaign stops a run under MPS without harming the others."""

import os
import re
import subprocess
import sys
import time

from tests.helpers.tiny_runs import tiny_train_args
from fairseq_lexical.stop_request import ENV, STOPPED_EXIT


def start_training(toy_data, tmp_path, name, updates, stop_file):
    exe = os.path.join(os.path.dirname(sys.executable), "fairseq-train")
    args = tiny_train_args(
        toy_data / "bin", tmp_path / name, "--arch", "lex_lstm_small", "--lexicon", toy_data / "lexicon.tsv",
        updates=updates, log_interval=1, validation=False,
    )  # fmt: skip
    log = open(tmp_path / f"{name}.log", "w")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", **{ENV: str(stop_file)})
    return subprocess.Popen([exe, *args], stdout=log, stderr=subprocess.STDOUT, env=env), tmp_path / f"{name}.log"


def last_update(log) -> int:
    found = re.findall(r"num_updates=(\d+)|\| (\d+) / \d+ ", log.read_text())
    return max((int(a or b) for a, b in found), default=0)


def test_a_run_asked_to_stop_leaves_after_a_step_and_the_other_trains_on(toy_data, tmp_path):
    stopped_file, other_file = tmp_path / "stop_a", tmp_path / "stop_b"
    stopped, stopped_log = start_training(toy_data, tmp_path, "a", 100000, stopped_file)
    other, other_log = start_training(toy_data, tmp_path, "b", 60, other_file)
    try:
        end = time.time() + 240
        while time.time() < end and stopped.poll() is None and last_update(stopped_log) < 5:
            time.sleep(0.2)
        assert stopped.poll() is None, stopped_log.read_text()[-3000:]
        stopped_file.write_text("stopped on request (the test)\n")
        assert stopped.wait(timeout=120) == STOPPED_EXIT, stopped_log.read_text()[-3000:]
    finally:
        stopped.kill()
    text = stopped_log.read_text()
    assert "stop requested" in text and "leaving after an optimizer step" in text
    assert "Traceback" not in text  # SystemExit: Python's normal way out, no error
    assert other.wait(timeout=600) == 0, other_log.read_text()[-3000:]
    assert "done training" in other_log.read_text() and not other_file.exists()


def test_a_run_asked_to_stop_before_it_starts_does_not_start(toy_data, tmp_path):
    stop = tmp_path / "stop"
    stop.write_text("stopped before its start\n")
    proc, log = start_training(toy_data, tmp_path, "a", 100, stop)
    assert proc.wait(timeout=120) == STOPPED_EXIT, log.read_text()[-3000:]
    assert "leaving before its start" in log.read_text() and last_update(log) == 0
