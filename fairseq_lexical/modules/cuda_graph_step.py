"""`--cuda-graphs`: a model's training forward pass, and so its backward pass, replayed as CUDA graphs.

A paper-sized LSTM training step is bound by kernel launches, not arithmetic: each of its ~48 target steps launches
dozens of small kernels from Python (docs/benchmarks.md, "CUDA graphs"). Here each batch is padded up to a few fixed
shapes (``bucket_size``: batch, source and target lengths), and for each such bucket the model's static-shape forward
(``model.static_training_forward``: no packing, nothing read on the host) is captured once with
``torch.cuda.make_graphed_callables``, forward and backward, then replayed for every batch of that bucket. The
outputs are cut back to the batch's own shape before the criterion sees them, so the loss, its gradients and what
the criterion logs are those of the unpadded batch (the padding's positions get no gradient and change no valid
position: the decoder is causal, the encoder masked, the attention masked). The criterion, clipping and the
optimizer's update stay eager (fairseq's trainer owns them; docs/benchmarks.md says why).

``CudaGraphStep`` is the one owner of "is capture safe here, and if not why": where it is not (a CPU, half-precision
or autocast training, gradient accumulation, distributed training, left-padded targets, a lexicon override, tensors
replaced after capture, a failed capture) it says so in one log line and the model trains eagerly, exactly as
without the option. Validation and generation (eval mode, no autograd, incremental decoding) are always eager.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import time
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from .precision import autocast_on

logger = logging.getLogger(__name__)

# The most graphs one model keeps: each holds its own outputs, their gradients and the parameters' gradients, so
# batches of a shape beyond them run eagerly (--batch-size gives one batch size; --max-tokens many)
MAX_GRAPHS = 48


def bucket_size(n: int) -> int:
    """The padded size of a dimension of ``n``: the next multiple of 8 up to 64, of 16 up to 128, of 32 up to 256,
    and so on (at most a quarter of padding above 64, a few graphs per doubling)."""
    step, limit = 8, 64
    while n > limit:
        step, limit = step * 2, limit * 2
    return -(-n // step) * step


def replica_count(model: nn.Module) -> int:
    """R of a model holding stacked replicas (`--replica-seeds`), 1 for a single model."""
    return len(getattr(model, "replica_seeds", None) or (None,))


class _TrainingForward(nn.Module):
    """The module a graph captures: ``model.static_training_forward`` (its parameters are the model's). One per
    bucket, and never a submodule of the model (make_graphed_callables replaces its ``forward``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor):
        return self.model.static_training_forward(src_tokens, src_lengths, prev_output_tokens)


def _settings(args) -> Dict[str, object]:
    """What decides, before any batch, whether capture is safe: the training options of ``args``."""
    update_freq = getattr(args, "update_freq", None) or [1]
    return {
        "update_freq": max(update_freq) if isinstance(update_freq, (list, tuple)) else int(update_freq),
        "world_size": int(getattr(args, "distributed_world_size", None) or 1),
        "half": next(
            (f for f in ("fp16", "bf16", "memory_efficient_fp16", "memory_efficient_bf16") if getattr(args, f, False)),
            None,
        ),
        "amp": bool(getattr(args, "amp", False)),
        "left_pad_target": bool(getattr(args, "left_pad_target", False)),
    }


class CudaGraphStep:
    """The training forward of one model as CUDA graphs, one per padded bucket, with the decision whether that is
    safe.

    Args:
        args: the model's arguments (`--update-freq`, `--distributed-world-size`, `--fp16`, `--bf16`, `--amp`,
            `--left-pad-target` where present).
        source, target: (padding id, end-of-sentence id) of each side's dictionary (a padding row holds one
            end-of-sentence token on each side).
        left_pad_source: whether the model reads left-padded sources (its encoder's ``left_pad``).
        capture: False runs the padded static-shape forward eagerly instead of capturing it (to compare the two,
            ``tools/cuda_graph_check.py``).
    """

    def __init__(
        self, args, source: Tuple[int, int], target: Tuple[int, int], left_pad_source: bool, capture: bool = True
    ):
        self.settings = _settings(args)
        self.source, self.target, self.left_pad_source = source, target, left_pad_source
        self.capture = capture
        self.graphs: Dict[Tuple[int, int, int], nn.Module] = {}
        self.refused: Optional[str] = None  # why the model trains eagerly, once decided
        self.decided = False
        self.pool = None
        self.snapshot: Optional[List[int]] = None  # the data pointers of the model's tensors at the first capture
        self.capture_s = 0.0
        self._logged: set = set()

    # -- is capture safe? ---------------------------------------------------------------------------------------
    def refusal(self, model: nn.Module) -> Optional[str]:
        """Why the model cannot train through graphs here, or None; decided once, before the first batch."""
        s = self.settings
        if s["update_freq"] > 1:
            return (
                f"--update-freq {s['update_freq']}: a graph's gradient buffers become the parameters' gradients, "
                "which the next micro-batch's replay would overwrite before the update"
            )
        if s["world_size"] > 1:
            return f"distributed training ({s['world_size']} processes) is not validated with graphs"
        if s["half"]:
            return f"--{s['half'].replace('_', '-')}: only fp32 training (TF32 allowed) is validated with graphs"
        if s["amp"]:
            return "--amp: autocast is not captured"
        dtypes = {p.dtype for p in model.parameters()}
        if dtypes != {torch.float32}:
            return f"parameters of {', '.join(sorted(str(d) for d in dtypes))}: only fp32 training is captured"
        if s["left_pad_target"]:
            return "--left-pad-target: padding the targets to a bucket would put steps before their first token"
        head = getattr(getattr(model, "decoder", None), "lexical_head", None)
        if head is not None and head.was_overridden:
            return "a lexicon override replaces the head's rows in memory, which a graph would not see"
        device = next(model.parameters()).device
        if device.type != "cuda":
            return f"the model is on {device.type}, and CUDA graphs need a CUDA device"
        return None

    def _refuse(self, reason: str) -> None:
        self.refused = reason
        self.graphs.clear()
        logger.warning("--cuda-graphs: training without CUDA graphs (eagerly, as without the option): %s", reason)

    def _once(self, key: str, message: str) -> None:
        if key not in self._logged:
            self._logged.add(key)
            logger.warning("--cuda-graphs: %s", message)

    def tensors_of(self, model: nn.Module) -> List[int]:
        """The data pointers of the model's parameters and buffers: a graph reads them where they were captured."""
        return [t.data_ptr() for t in itertools.chain(model.parameters(), model.buffers())]

    # -- padding to a bucket ------------------------------------------------------------------------------------
    def pad_batch(self, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor, replicas: int = 1):
        """The batch padded to its bucket (``bucket_size`` of each dimension), with no host read: the extra rows
        hold one end-of-sentence token on each side (the loss never sees them), the extra positions padding.
        Stacked replicas' rows (``replicas.py``: R x B, replica-major) are padded replica by replica.

        Args:
            src_tokens: RB x S, padded on the model's side.
            src_lengths: RB.
            prev_output_tokens: RB x T, right-padded.
            replicas: R (1: a single model).

        Returns:
            (src_tokens RB' x S', src_lengths RB', prev_output_tokens RB' x T') of the bucket.
        """
        (total, src_len), tgt_len = src_tokens.shape, prev_output_tokens.size(1)
        bsz = total // replicas
        rows, width, steps = bucket_size(bsz), bucket_size(src_len), bucket_size(tgt_len)
        (src_pad, src_eos), (tgt_pad, tgt_eos) = self.source, self.target
        src = src_tokens.new_full((replicas, rows, width), src_pad)
        if self.left_pad_source:
            src[:, :bsz, width - src_len :] = src_tokens.reshape(replicas, bsz, src_len)
            src[:, bsz:, -1] = src_eos
        else:
            src[:, :bsz, :src_len] = src_tokens.reshape(replicas, bsz, src_len)
            src[:, bsz:, 0] = src_eos
        lengths = src_lengths.new_ones(replicas, rows)
        lengths[:, :bsz] = src_lengths.reshape(replicas, bsz)
        prev = prev_output_tokens.new_full((replicas, rows, steps), tgt_pad)
        prev[:, :bsz, :tgt_len] = prev_output_tokens.reshape(replicas, bsz, tgt_len)
        prev[:, bsz:, 0] = tgt_eos
        return src.view(replicas * rows, width), lengths.view(-1), prev.view(replicas * rows, steps)

    @staticmethod
    def unpad(net_output, total: int, src_len: int, tgt_len: int, replicas: int = 1):
        """A padded batch's (log_probs, extra) cut back to the batch's own RB x T (and the attention's S),
        contiguous as the eager outputs are (criterions view them)."""
        log_probs, extra = net_output
        bsz = total // replicas

        def cut(x, *rest):  # RB' x T' x ... -> RB x T x ..., replica by replica
            x = x.reshape(replicas, -1, *x.shape[1:])[:, :bsz, :tgt_len]
            if rest:
                x = x[..., : rest[0]]
            return x.reshape(total, *x.shape[2:]).contiguous()

        out = {}
        for key, value in extra.items():
            out[key] = [cut(a, src_len) for a in value] if key == "attn" else cut(value)
        return cut(log_probs), out

    def padded_forward(self, model: nn.Module, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor):
        """What a graph replays, run eagerly: the static-shape forward of the padded batch, cut back."""
        replicas = replica_count(model)
        padded = self.pad_batch(src_tokens, src_lengths, prev_output_tokens, replicas)
        output = model.static_training_forward(*padded)
        return self.unpad(output, *src_tokens.shape, prev_output_tokens.size(1), replicas)

    # -- the training forward -------------------------------------------------------------------------------------
    def __call__(self, model: nn.Module, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor):
        """The model's training forward through graphs: (log_probs, extra) as ``model.forward``'s, or None where
        the model must run eagerly (the caller then does)."""
        if not self.decided:
            self.decided = True
            reason = self.refusal(model)
            if reason:
                self._refuse(reason)
        if self.refused:
            return None
        if autocast_on("cuda"):
            self._once("autocast", "autocast is on: this batch runs eagerly (autocast is not captured)")
            return None
        if any(p.grad is not None for p in model.parameters()):
            # a later micro-batch of one update (or gradients not cleared): a replay would overwrite them
            self._once("accumulating", "a parameter already holds a gradient: such batches run eagerly")
            return None
        if self.snapshot is not None and self.tensors_of(model) != self.snapshot:
            self._refuse("the model's parameters or buffers were replaced after capture (moved, reloaded, overridden)")
            return None
        if not self.capture:
            return self.padded_forward(model, src_tokens, src_lengths, prev_output_tokens)
        replicas = replica_count(model)
        padded = self.pad_batch(src_tokens, src_lengths, prev_output_tokens, replicas)
        key = (padded[0].size(0), padded[0].size(1), padded[2].size(1))
        graphed = self.graphs.get(key)
        if graphed is None and len(self.graphs) >= MAX_GRAPHS:
            self._once("full", f"{MAX_GRAPHS} buckets captured: batches of other shapes run eagerly")
            return None
        if graphed is None:
            graphed = self._capture(model, padded, key)
            if graphed is None:
                return None
        return self.unpad(graphed(*padded), *src_tokens.shape, prev_output_tokens.size(1), replicas)

    def _capture(self, model: nn.Module, padded: Tuple[Tensor, Tensor, Tensor], key: Tuple[int, int, int]):
        """The graphed forward of one bucket, captured on this (padded) batch; None (and eager training from now on)
        if the capture fails."""
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()  # one pool: buckets are replayed one at a time
        pool = {"pool": self.pool} if "pool" in inspect.signature(torch.cuda.make_graphed_callables).parameters else {}
        start = time.perf_counter()
        try:
            graphed = torch.cuda.make_graphed_callables(
                _TrainingForward(model), padded, num_warmup_iters=3, allow_unused_input=True, **pool
            )
            torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001  (an operation that cannot be captured: train eagerly, say why)
            self._refuse(f"capturing bucket {' x '.join(map(str, key))} failed ({type(err).__name__}: {err})")
            return None
        seconds = time.perf_counter() - start
        self.capture_s += seconds
        self.graphs[key] = graphed
        self.snapshot = self.tensors_of(model)
        logger.info(
            "--cuda-graphs: captured bucket %s (batch x source x target) in %.1f s; %d graphs",
            " x ".join(map(str, key)),
            seconds,
            len(self.graphs),
        )
        return graphed

    # a copy of the model (deepcopy, pickle) starts without graphs: they hold the original's memory
    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(graphs={}, pool=None, snapshot=None, decided=False, refused=None, _logged=set())
        return state
