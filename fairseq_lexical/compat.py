"""Fixes for defects of fairseq-fixed 0.12.3.1 (under torch >= 2.6), applied once when the plugin is imported.

1. torch.load defaults to ``weights_only=True`` since torch 2.6, and fairseq checkpoints pickle an
   ``argparse.Namespace``, omegaconf containers and a few other objects, so ``fairseq-generate`` and resuming
   ``fairseq-train`` fail (and numpy arrays, after ``--eval-bleu``). We allow-list exactly the globals fairseq
   checkpoints contain (``torch.serialization.add_safe_globals``) instead of turning safe loading off for the whole
   process.
2. ``fairseq.data.data_utils.batch_by_size`` drops the last batch when its size is not a multiple of
   ``--required-batch-size-multiple`` (default 8): ``fairseq-generate`` on 20 sentences translates 16 and
   validation skips samples, without a word. We keep that batch.
3. With ``--cpu``, fairseq's default ``--ddp-backend pytorch_ddp`` hands torch's DistributedDataParallel
   ``device_ids=[0]`` for a CPU module, which torch refuses ("device_ids and output_device arguments only work
   with single-device/multiple-device GPU modules or CPU modules"), so multi-process CPU training (gloo) cannot
   start. For a module whose parameters are all on the CPU we pass ``device_ids=None``, what torch expects.
4. Launched by ``torchrun`` (or ``torch.distributed.launch``), fairseq reads RANK / WORLD_SIZE from the environment
   only if ``--distributed-world-size`` (default: the number of visible GPUs, so 1 on a CPU or one-GPU machine) is
   above 1; otherwise every process silently trains alone on all the data and they overwrite each other's
   checkpoints. Given a world size above 1 on a machine without GPUs, it fails picking the device
   (``device_id = rank % torch.cuda.device_count()``: integer modulo by zero). We take the world size from
   WORLD_SIZE when the launcher set it, and on a machine without GPUs give every process device id 0 (unused on the
   CPU).
5. ``--bf16`` (and ``--memory-efficient-bf16``) set ``--tpu`` in ``fairseq.options.parse_args_and_arch``, so on a
   CPU or GPU training stops with ``'NoneType' object has no attribute 'xla_device'``. Where torch_xla is not
   installed (no TPU can be used) we undo that: bf16 then runs on the CPU or GPU, as ``--bf16`` says. This is done
   in the architecture configuration functions, the first code of ours that runs after fairseq set the flag.
7. ``--fp16`` on a CPU ends in an ``AssertionError: Torch not compiled with CUDA enabled`` traceback from
   fairseq's FP16Optimizer (it keeps its fp32 copy of the parameters on the GPU), and ``--fp16 --amp`` in a bare
   ``AssertionError`` from the trainer. In the same architecture configuration functions a fairseq program refuses
   both in one line, naming what does train (``--bf16``, ``--memory-efficient-fp16``, fp32).
6. A file that is not a fairseq checkpoint given as ``--path`` (or to ``from_pretrained``, the analysis tools) fails
   in ``torch.load`` with an ``UnpicklingError`` whose only advice is to re-run with ``weights_only=False``, which
   would execute whatever the file holds (a damaged file: a zip-reader error without the file's name).
   ``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` now says instead that the file is not a loadable fairseq
   checkpoint, naming it.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import logging
import os

import numpy as np
import torch

logger = logging.getLogger(__name__)

_applied = False


def _numpy_globals() -> list:
    """What a pickled numpy array or scalar refers to: the array and dtype classes, the per-dtype classes
    (numpy >= 1.25), and the reconstruct / scalar functions (``numpy._core`` in numpy 2, ``numpy.core`` before)."""
    import importlib

    names = []
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            multiarray = importlib.import_module(module)
        except ImportError:
            continue
        names += [getattr(multiarray, f) for f in ("_reconstruct", "scalar") if hasattr(multiarray, f)]
        break
    kinds = (np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_)
    return [np.ndarray, np.dtype, *names, *{type(np.dtype(k)) for k in kinds}]


def fairseq_checkpoint_globals() -> list:
    """The globals that fairseq checkpoints pickle beyond what torch's safe loader already allows.

    fairseq 0.12 stores the training arguments as an ``argparse.Namespace`` (under ``cfg.model`` for the legacy
    model registry). Training with ``--eval-bleu`` also leaves numpy arrays in the checkpoint: the BLEU n-gram
    counts of the validation meters in ``extra_state["metrics"]``. Everything else (omegaconf containers converted
    to dicts, tensors, optimizer state, numbers) is already safe. Measured with
    ``torch.serialization.get_unsafe_globals_in_checkpoint`` on checkpoints of every architecture of the plugin
    and of an ``--eval-bleu`` run.
    """
    return [argparse.Namespace, *_numpy_globals()]


def _allow_fairseq_checkpoint_globals():
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is None:  # torch < 2.4 loads without the allow-list
        return
    add(fairseq_checkpoint_globals())


class CheckpointLoadError(RuntimeError):
    """A file given as a checkpoint that torch's safe loader refuses (not a checkpoint, damaged, or unsafe)."""


def _clear_checkpoint_errors():
    import pickle

    from fairseq import checkpoint_utils

    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "_fairseq_lexical_clear_errors", False):
        return

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return original(path, *args, **kwargs)
        except (pickle.UnpicklingError, EOFError, RuntimeError) as err:
            if isinstance(err, RuntimeError) and "PytorchStreamReader" not in str(err):  # not the file's fault
                raise
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            # torch's first sentence, and the line naming the refused global where there is one
            reason = (
                "; ".join([lines[0].split(". ")[0]] + [x for x in lines if "GLOBAL" in x][:1])
                if lines
                else (type(err).__name__)
            )
            raise CheckpointLoadError(
                f"{path}: not a loadable fairseq checkpoint (torch's safe loader refused it: {reason[:300]}). "
                f"It is damaged, of another program, or holds objects a checkpoint of fairseq and this plugin "
                f"never does; do not load a file you do not trust with weights_only=False"
            ) from None

    load_checkpoint_to_cpu._fairseq_lexical_clear_errors = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu


def _keep_last_batch():
    from fairseq.data import data_utils

    original = data_utils.batch_by_size
    if getattr(original, "_fairseq_lexical_keeps_last_batch", False):
        return

    def batch_by_size(indices, *args, **kwargs):
        batches = original(indices, *args, **kwargs)
        if kwargs.get("fixed_shapes") is not None or (len(args) >= 6 and args[5] is not None):
            return batches
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        batched = sum(len(b) for b in batches)
        if batched < len(indices):
            # Batches are consecutive slices of `indices`; the one fairseq dropped is the tail.
            batches = list(batches) + [np.asarray(indices[batched:], dtype=np.int64)]
        return batches

    batch_by_size._fairseq_lexical_keeps_last_batch = True
    batch_by_size.original = original
    data_utils.batch_by_size = batch_by_size


def _cpu_ddp_without_device_ids():
    from fairseq.models import distributed_fairseq_model as dfm

    original = dfm.DistributedDataParallel
    if getattr(original, "_fairseq_lexical_cpu_ok", False):
        return

    class DistributedDataParallel(original):
        _fairseq_lexical_cpu_ok = True

        def __init__(self, module, *args, **kwargs):
            devices = {p.device.type for p in module.parameters()}
            if devices == {"cpu"}:
                kwargs["device_ids"] = None
                kwargs["output_device"] = None
            super().__init__(module, *args, **kwargs)

    DistributedDataParallel.__name__ = DistributedDataParallel.__qualname__ = original.__name__
    DistributedDataParallel.original = original
    dfm.DistributedDataParallel = DistributedDataParallel


_LAUNCHER_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def _torchrun_world_size_and_cpu():
    from fairseq.distributed import utils as du

    if getattr(du.infer_init_method, "_fairseq_lexical_torchrun", False):
        return
    original_infer = du.infer_init_method
    original_launch_init = du._infer_torch_distributed_launch_init

    def infer_init_method(cfg, force_distributed=False):
        launched = all(key in os.environ for key in _LAUNCHER_VARIABLES)
        if launched and cfg.distributed_init_method is None and not cfg.tpu:
            world = int(os.environ["WORLD_SIZE"])
            if world > 1 and cfg.distributed_world_size != world:
                logger.info("distributed world size %d from WORLD_SIZE (the launcher's)", world)
                cfg.distributed_world_size = world
        return original_infer(cfg, force_distributed)

    def _infer_torch_distributed_launch_init(cfg):
        if torch.cuda.device_count() > 0:
            return original_launch_init(cfg)
        cfg.distributed_init_method = "env://"
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        cfg.distributed_rank = int(os.environ["RANK"])
        cfg.device_id = 0  # no GPU to pick (fairseq would call torch.cuda.set_device for a non-zero id)
        cfg.distributed_no_spawn = True  # the launcher made the processes

    infer_init_method._fairseq_lexical_torchrun = True
    infer_init_method.original = original_infer
    du.infer_init_method = infer_init_method
    du._infer_torch_distributed_launch_init = _infer_torch_distributed_launch_init


def _undo_bf16_tpu(args) -> None:
    if getattr(args, "bf16", False) and getattr(args, "tpu", False) and importlib.util.find_spec("torch_xla") is None:
        logger.info(
            "--bf16 without torch_xla: training in bf16 on the %s, not on a TPU (fairseq 0.12 sets --tpu with --bf16)",
            "CPU" if getattr(args, "cpu", False) or not torch.cuda.is_available() else "GPU",
        )
        args.tpu = False


def _refuse_fp16_that_cannot_train(args) -> None:
    from .errors import in_fairseq_program, usage_error

    if not getattr(args, "fp16", False) or not in_fairseq_program():
        return
    if getattr(args, "amp", False):
        usage_error("--fp16 and --amp are two ways of half precision: give one (--amp keeps fp32 weights)")
    on_cpu = getattr(args, "cpu", False) or not torch.cuda.is_available()
    if on_cpu and not getattr(args, "memory_efficient_fp16", False):  # (its optimizer keeps no fp32 copy: trains)
        usage_error(
            "--fp16 needs a CUDA device (fairseq's FP16Optimizer keeps its fp32 copy of the parameters there); on a "
            "CPU train with --bf16, --memory-efficient-fp16 or in fp32"
        )


def bf16_without_tpu() -> None:
    """Fixes 5 and 7: wrap every architecture configuration function registered so far (ours and fairseq's own).
    Called once the plugin's models are registered (idempotent)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    for name, configure in list(ARCH_CONFIG_REGISTRY.items()):
        if getattr(configure, "_fairseq_lexical_bf16", False):
            continue

        @functools.wraps(configure)
        def configure_without_tpu(args, _configure=configure):
            _undo_bf16_tpu(args)
            _refuse_fp16_that_cannot_train(args)
            return _configure(args)

        configure_without_tpu._fairseq_lexical_bf16 = True
        ARCH_CONFIG_REGISTRY[name] = configure_without_tpu


def apply():
    """Apply the fixes (idempotent)."""
    global _applied
    if _applied:
        return
    _allow_fairseq_checkpoint_globals()
    _clear_checkpoint_errors()
    _keep_last_batch()
    _cpu_ddp_without_device_ids()
    _torchrun_world_size_and_cpu()
    _applied = True
