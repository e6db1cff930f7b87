"""A campaign's results.json and its run records, as a finished lease leaves them (collect's input)."""

import json


def result_file(path, started, runs):
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(
        json.dumps(
            {
                "environment": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0"},
                "plan": "paper",
                "manifest": {},
                "started": started,
                "budget_s": 900,
                "mps": None,
                "measured": {"r1": 20.0},
                "runs": runs,
            }
        )
    )
    return str(path)


def run_record(seed, em, status="finished", updates=8000):
    return {
        "id": f"scan_jump-simple-s{seed}",
        "group": "scan_jump",
        "task": "scan",
        "split": "jump",
        "model": "simple",
        "seed": seed,
        "options": [],
        "priority": seed,
        "status": status,
        "score": {"exact_match": em} if em is not None else None,
        "max_update": 8000,
        "training": {"updates": updates, "early_stop": False},
        "time_limited": updates < 8000,
        "times": {"train_s": 300.0, "generate_s": 30.0},
        "wall_s": 340.0,
        "gpu_share_s": 120.0,
        "config": {
            "label": "LSTM + Lex.: Simple (--arch lex_lstm)",
            "settings": "paper",
            "commands": {"train": "fairseq-train ..."},
        },
    }
