"""The process of tests/plugin/test_distributed.py's launches (under torchrun, or alone): a script, so it imports
nothing of the tests (run as a file, `tests` is not importable).

    python ddp_worker.py SPEC.json OUT_DIR
"""

import json
import os
import sys

import torch


def worker(spec_path, out_dir):
    """Run each job of ``spec_path`` ({name: fairseq-train argv}) in this process, as fairseq-train would, and write
    per job and rank: ``rank{R}.json`` (losses, the sample ids of each update, parameter and buffer names),
    ``rank{R}.pt`` (the model's state after training) and ``init{R}.pt`` (its state before the first update)."""
    import fairseq_lexical  # noqa: F401  (the fixes of compat.py, as --user-dir would apply them)
    from fairseq import trainer as trainer_module
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import train

    current = {}
    original_init = trainer_module.Trainer.__init__
    original_step = trainer_module.Trainer.train_step

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        current["trainer"] = self
        current["init"] = {k: v.detach().clone() for k, v in self.get_model().state_dict().items()}

    def train_step(self, samples, *args, **kwargs):
        out = original_step(self, samples, *args, **kwargs)
        current["ids"].append(sorted(i for sample in samples if sample for i in sample["id"].tolist()))
        if out is not None:
            current["losses"].append(out["loss"])
        return out

    trainer_module.Trainer.__init__ = init
    trainer_module.Trainer.train_step = train_step
    with open(spec_path) as f:
        spec = json.load(f)
    for name, argv in spec.items():
        current.update(losses=[], ids=[])
        print(f"@@ job {name}", flush=True)
        sys.argv = ["fairseq-train", *argv]
        train.cli_main()
        trainer = current["trainer"]
        model = trainer.get_model()
        rank = distributed_utils.get_data_parallel_rank() if torch.distributed.is_initialized() else 0
        world = distributed_utils.get_data_parallel_world_size() if torch.distributed.is_initialized() else 1
        job_dir = os.path.join(out_dir, name)
        os.makedirs(job_dir, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(job_dir, f"rank{rank}.pt"))
        torch.save(current["init"], os.path.join(job_dir, f"init{rank}.pt"))
        record = dict(
            losses=current["losses"],
            ids=current["ids"],
            num_updates=trainer.get_num_updates(),
            world_size=world,
            parameters=[n for n, _ in model.named_parameters()],
            buffers=[n for n, _ in model.named_buffers()],
        )
        with open(os.path.join(job_dir, f"rank{rank}.json"), "w") as f:
            json.dump(record, f)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2])
