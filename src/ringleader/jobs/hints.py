"""What a job's command line says of its workload: the per-GPU batch, precision and gradient
accumulation it trains at (tf_cnn_benchmarks' ``--batch_size=64``/``--use_fp16``,
``--batch-size``/``--precision``, ``--gradient_accumulation_steps``), else the reference study's
batch of 64 in fp32 without accumulation; and the framework it runs. The queue weighs a job's
placements with that workload, as `get`, `--dry-run` and `--steps` price it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ringleader.scheduler.types import Workload

_BATCH_FLAGS = ("--batch_size", "--batch-size")
_PRECISION_FLAGS = ("--precision",)
# Micro-batches summed per optimizer step: Hugging Face's Trainer, DeepSpeed and NVIDIA's BERT
# (--gradient_accumulation_steps), Horovod's examples (--backward-passes-per-step).
_ACCUMULATION_FLAGS = ("--gradient_accumulation_steps", "--gradient-accumulation-steps", "--accumulation_steps",
                       "--accumulation-steps", "--backward_passes_per_step", "--backward-passes-per-step")  # fmt: skip
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")  # as the model names them (model.tables)


def count_of(text: str) -> int | None:
    """A batch or micro-batch count as written (a flag's value, an annotation): a whole number
    from 1 to 2**20, else None."""
    return int(text) if text.isascii() and text.isdigit() and 0 < int(text) <= 1 << 20 else None


def workload_hints(command: Sequence[str]) -> Workload:
    """The per-GPU batch, precision and gradient accumulation named on the command line, else
    the reference study's batch of 64 in fp32 without accumulation (``Workload()``)."""
    default = Workload()
    batch, precision, accumulation = default.batch_size, default.precision, default.accumulation
    words = list(command)
    for i, word in enumerate(words):
        key, _, value = word.partition("=")
        if not value and i + 1 < len(words) and key in (*_BATCH_FLAGS, *_PRECISION_FLAGS, *_ACCUMULATION_FLAGS):
            value = words[i + 1]
        if key in _BATCH_FLAGS and count_of(value):
            batch = int(value)
        elif key in _ACCUMULATION_FLAGS and count_of(value):
            accumulation = int(value)
        elif key in _PRECISION_FLAGS and value in PRECISIONS:
            precision = value
        elif key == "--use_fp16" and value.lower() in ("", "true", "1"):
            precision = "fp16"
    return Workload(batch, precision, accumulation)


# What a job's command line says it runs: (a word it contains, the framework), first match wins.
_FRAMEWORK_WORDS = (
    ("tf_cnn_benchmarks", "TensorFlow (tf_cnn_benchmarks)"), ("tensorflow", "TensorFlow"),
    ("torchrun", "PyTorch"), ("torch.distributed", "PyTorch"), ("mxnet", "MXNet"),
    ("paddle", "PaddlePaddle"), ("oneflow", "OneFlow"),
)  # fmt: skip


def job_framework(command: Sequence[str]) -> str | None:
    """The training framework a job's command line names (tf_cnn_benchmarks.py, torchrun,
    `ringleader bench train`, ...), None where it names none."""
    words = [w.lower() for w in command]
    if "bench" in words and "train" in words and any("ringleader" in w for w in words):
        return "PyTorch"  # ringleader's own bench
    for word in words:
        for needle, framework in _FRAMEWORK_WORDS:
            if needle in word:
                return framework
    return None
