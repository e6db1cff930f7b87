"""fairseq_lexical_recipes/process.py: running programs: fairseq-generate split over processes (--decode-jobs), the
threads each program gets, and processes run N at a time (--jobs), stopped with their children."""

import os
import sys

import pytest


FAKE_GENERATE = """
import os, sys, time
world = int(sys.argv[sys.argv.index("--distributed-world-size") + 1])
rank = int(sys.argv[sys.argv.index("--distributed-rank") + 1])
if rank == int(os.environ.get("FAIL_RANK", -1)):
    sys.exit(3)
time.sleep(float(os.environ.get("SLEEP", 0)) * (rank == 0))
for i in range(rank, 7, world):  # fairseq deals batches out to the ranks; one sentence per batch here
    print(f"H-{i}\\t-0.5\\tw{i}")
print(f"rank {rank} threads {os.environ['OMP_NUM_THREADS']}", file=sys.stderr)
"""


def test_decode_jobs_split_generation_and_concatenate_the_shards(tmp_path, monkeypatch):
    import time

    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.process import run_sharded

    script = tmp_path / "fake_generate.py"
    script.write_text(FAKE_GENERATE)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    out, log = tmp_path / "generate.txt", tmp_path / "generate.log"
    run_sharded([sys.executable, script], 3, str(out), str(log))
    hyps = [line.split("\t")[0] for line in out.read_text().splitlines()]
    assert hyps == ["H-0", "H-3", "H-6", "H-1", "H-4", "H-2", "H-5"]  # rank order; every id once
    text = log.read_text()
    assert "== shard 2 of 3 (--distributed-rank 2) ==" in text and "rank 1 threads 1" in text  # 4 cores // 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake_generate.py", "generate.log", "generate.txt"]

    # a failing shard stops the others and is named, with its command
    monkeypatch.setenv("FAIL_RANK", "1")
    monkeypatch.setenv("SLEEP", "60")
    start = time.time()
    with pytest.raises(RecipeError, match=r"(?s)shard 1 of 2, failed \(exit 3\).*--distributed-rank 1"):
        run_sharded([sys.executable, script], 2, str(out), str(log))
    assert time.time() - start < 30


def test_each_program_gets_the_idle_cores_as_threads(monkeypatch):
    """Issue 70, defect 12: a custom run trained with torch's default threads (one per core); beside one other busy
    process it fell from 8,900 to 110-130 target tokens/s, 70x slower (docs/benchmarks.md)."""
    from fairseq_lexical_recipes import process

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    for load, jobs, threads in ((0.2, 1, "4"), (1.7, 1, "2"), (3.9, 1, "1"), (0.0, 2, "2"), (2.0, 4, "1")):
        monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
        monkeypatch.setattr(process, "_IDLE_CORES", None)
        assert process.child_env(jobs)["OMP_NUM_THREADS"] == threads, (load, jobs)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice stays
    assert process.child_env(2)["OMP_NUM_THREADS"] == "3"


def test_run_concurrently_limits_logs_and_reports_each_exit_status(tmp_path, monkeypatch):
    from fairseq_lexical_recipes import process

    monkeypatch.setattr(process, "PROGRESS_EVERY", 0.2)
    code = "import sys, time; time.sleep(0.5); print('job', sys.argv[1]); sys.exit(int(sys.argv[1]))"
    statuses = (0, 3, 0, 0)
    commands = [[sys.executable, "-c", code, status] for status in statuses]
    logs = [str(tmp_path / f"{i}.log") for i in range(len(commands))]
    running, most, ended, progress = set(), [0], [], []

    def on_start(i):
        running.add(i)
        most[0] = max(most[0], len(running))

    def on_end(i, status):
        running.remove(i)
        ended.append((i, status))

    def on_progress(running, done, waiting):
        progress.append((running, done, waiting))

    codes = process.run_concurrently(commands, logs, 2, on_start=on_start, on_end=on_end, on_progress=on_progress)
    assert codes == list(statuses) and sorted(ended) == list(enumerate(statuses)) and most[0] == 2
    assert [open(log).read() for log in logs] == [f"job {status}\n" for status in statuses]
    assert progress[0] == ([0, 1], [], [2, 3])


JOB_WITH_A_CHILD = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "60"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(child.pid))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def running(pid):
    """Whether the process runs (a zombie that this container's init leaves unreaped has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_an_interrupted_run_concurrently_stops_the_jobs_with_their_children(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM on a --jobs recipe: each running child recipe is stopped with its process group, so
    that its fairseq-train goes too."""
    import time

    from fairseq_lexical_recipes import process

    monkeypatch.setattr(process, "PROGRESS_EVERY", 0.2)
    script = tmp_path / "job.py"
    script.write_text(JOB_WITH_A_CHILD)
    pid_files = [tmp_path / f"child{i}.pid" for i in range(3)]

    def interrupt_once_started(running, done, waiting):
        if all(p.exists() for p in pid_files[:2]):
            raise KeyboardInterrupt

    start = time.time()
    with pytest.raises(KeyboardInterrupt):
        process.run_concurrently(
            [[sys.executable, script, p] for p in pid_files],
            [str(tmp_path / f"{i}.log") for i in range(3)],
            2,
            on_progress=interrupt_once_started,
        )
    assert time.time() - start < 30 and not pid_files[2].exists()  # the third never started
    for pid in (int(p.read_text()) for p in pid_files[:2]):
        deadline = time.time() + 10
        while running(pid) and time.time() < deadline:
            time.sleep(0.1)
        assert not running(pid), f"the job's child (pid {pid}) still runs"
