"""What a job's command line says of its workload: the per-GPU batch, precision and gradient
accumulation it trains at, else the reference study's batch of 64 in fp32 without accumulation;
and the framework it runs. The flags read are those of tf_cnn_benchmarks (``--batch_size=64``,
``--use_fp16``), Hugging Face's Trainer (``--per_device_train_batch_size``, ``--fp16``,
``--gradient_accumulation_steps``), Megatron-LM (``--micro-batch-size``, ``--bf16``), NVIDIA's
DeepLearningExamples (``--amp``), PyTorch Lightning (``--trainer.precision 16-mixed``), Horovod's
examples, torchvision's reference scripts (``-b 32`` beside ``--model``) and ringleader's own bench;
the network the script's own ``--model``/``--arch`` flag names; and the DeepSpeed configuration such a line names
(``--deepspeed_config ds.json``, the Trainer's ``--deepspeed ds.json``), read once at submit. The
queue weighs a job's placements with that workload, as `get`, `--dry-run` and `--steps` price it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ringleader.scheduler.types import Workload

# Images per GPU per micro-batch.
_BATCH_FLAGS = ("--batch_size", "--batch-size", "--per_device_train_batch_size", "--per-device-train-batch-size",
                "--micro-batch-size", "--micro_batch_size")  # fmt: skip
_PRECISION_FLAGS = ("--precision", "--trainer.precision")
# Micro-batches summed per optimizer step: Hugging Face's Trainer, DeepSpeed and NVIDIA's BERT
# (--gradient_accumulation_steps), Horovod's examples (--backward-passes-per-step).
_ACCUMULATION_FLAGS = ("--gradient_accumulation_steps", "--gradient-accumulation-steps", "--accumulation_steps",
                       "--accumulation-steps", "--backward_passes_per_step", "--backward-passes-per-step")  # fmt: skip
# Switches that turn mixed precision on (a following true/false, as the Trainer takes, is theirs):
# NVIDIA's DeepLearningExamples train fp16 under --amp.
_PRECISION_SWITCHES = {"--use_fp16": "fp16", "--fp16": "fp16", "--amp": "fp16", "--bf16": "bf16"}
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
# Where a line names its DeepSpeed configuration; the Trainer's --deepspeed takes the file, while
# DeepSpeed's own --deepspeed is a switch beside --deepspeed_config.
_CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--deepspeed_config_file", "--deepspeed")
CONFIG_BYTES = 1 << 20  # a DeepSpeed configuration is a few hundred bytes; more is not one
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")  # as the model names them (model.tables)
# Lightning's precision names (Trainer(precision=...)) as the model names them.
_LIGHTNING_PRECISIONS = {"16": "fp16", "16-mixed": "fp16", "bf16-mixed": "bf16", "32": "fp32", "32-true": "fp32"}


def count_of(text: str) -> int | None:
    """A batch or micro-batch count as written (a flag's value, an annotation): a whole number
    from 1 to 2**20, else None."""
    short = len(text) <= len(str(1 << 20))  # before int(): thousands of digits are refused by it, slowly
    return int(text) if short and text.isascii() and text.isdigit() and 0 < int(text) <= 1 << 20 else None


def workload_hints(command: Sequence[str]) -> Workload:
    """The per-GPU batch, precision and gradient accumulation named on the command line, else
    the reference study's batch of 64 in fp32 without accumulation (``Workload()``)."""
    default = Workload()
    batch, precision, accumulation = default.batch_size, default.precision, default.accumulation
    words = list(command)
    for i, word in enumerate(words):
        key, equals, value = word.partition("=")
        following = words[i + 1] if i + 1 < len(words) else ""
        if not equals and key in (*_BATCH_FLAGS, *_PRECISION_FLAGS, *_ACCUMULATION_FLAGS, _SHORT_BATCH):
            value = following
        short_batch = key == _SHORT_BATCH and model_named(words) is not None
        if (key in _BATCH_FLAGS or short_batch) and count_of(value):
            batch = int(value)
        elif key in _ACCUMULATION_FLAGS and count_of(value):
            accumulation = int(value)
        elif key in _PRECISION_FLAGS and value in PRECISIONS:
            precision = value
        elif key in _PRECISION_FLAGS and value in _LIGHTNING_PRECISIONS:
            precision = _LIGHTNING_PRECISIONS[value]
        elif key in _PRECISION_SWITCHES:
            said = (value if equals else following if following.lower() in (*_TRUE, *_FALSE) else "true").lower()
            if said in _TRUE:
                precision = _PRECISION_SWITCHES[key]
    return Workload(batch, precision, accumulation)


# Where a training script takes the network it trains: tf_cnn_benchmarks (``--model=vgg16``),
# Horovod's synthetic benchmarks and torchvision's reference scripts (``--model resnet50``), and
# PyTorch's ImageNet example (``-a resnet18``, ``--arch``).
_MODEL_FLAGS = ("--model", "--arch", "-a", "--model_name", "--model-name")
# The batch flag of torchvision's reference scripts and PyTorch's ImageNet example, read only
# beside one of the model flags above (elsewhere -b means anything).
_SHORT_BATCH = "-b"


def model_named(command: Sequence[str]) -> tuple[str, str] | None:
    """The network a training script's own flags name, and the flag as written
    (``("vgg16", "--model=vgg16")``); None where no model flag is given. The name is as written:
    the model checks it."""
    named = None
    for key, value, equals in _flag_values(command, _MODEL_FLAGS):
        if value and not value.startswith("-"):
            named = (value, f"{key}={value}" if equals else f"{key} {value}")
    return named


def config_named(command: Sequence[str]) -> str | None:
    """The DeepSpeed configuration file a command line names (the last one), None where none."""
    named = None
    for _, value, _ in _flag_values(command, _CONFIG_FLAGS):
        if value.endswith(".json"):
            named = value
    return named


def _flag_values(command: Sequence[str], flags: Collection[str]) -> Iterator[tuple[str, str, bool]]:
    """Each of ``flags`` a command line gives, in order: the flag, its value (``--f=v`` or
    ``--f v``; "" at the end of the line) and whether it was written with ``=``."""
    words = list(command)
    for i, word in enumerate(words):
        key, equals, value = word.partition("=")
        if key in flags:
            yield key, value if equals else words[i + 1] if i + 1 < len(words) else "", bool(equals)


def workload_from_config(config: Mapping[str, Any], line: Workload, world: int) -> Workload:
    """``line`` (what the command line says) with what a DeepSpeed configuration sets explicitly
    for a job of ``world`` data-parallel ranks (GPUs): ``train_micro_batch_size_per_gpu``,
    ``gradient_accumulation_steps``, ``fp16``/``bf16`` (``bfloat16``) enabled, and what DeepSpeed
    derives from ``train_batch_size`` (= micro-batch x accumulation x world) where one of the
    other two is left out. DeepSpeed trains with its configuration; the Trainer's "auto" leaves a
    value to its flags."""

    def count(key: str) -> int | None:
        value = config.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and count_of(str(value)) else None

    total, micro, steps = count("train_batch_size"), count("train_micro_batch_size_per_gpu"), count(
        "gradient_accumulation_steps")  # fmt: skip
    if steps is None:  # left out: DeepSpeed's 1 (or what the rest implies); "auto": the flags'
        steps = line.accumulation if "gradient_accumulation_steps" in config else None
    if total is not None and "train_micro_batch_size_per_gpu" not in config:
        steps = steps or 1
        micro = count_of(str(total // (world * steps)))
    elif total is not None and micro is not None and "gradient_accumulation_steps" not in config:
        steps = count_of(str(total // (micro * world)))
    work = line
    if micro is not None:
        work = replace(work, batch_size=micro)
    if steps is not None:
        work = replace(work, accumulation=steps)
    for section, precision in (("fp16", "fp16"), ("bf16", "bf16"), ("bfloat16", "bf16")):
        given = config.get(section)
        if isinstance(given, dict) and given.get("enabled") is True:
            work = replace(work, precision=precision)
    return work


def read_workload(command: Sequence[str], folder: str, world: int) -> Workload:
    """What ``command`` trains at on ``world`` GPUs: its flags, and the DeepSpeed configuration it
    names, read from ``folder`` (where its ranks start) when this machine has it. A configuration
    that cannot be read, or is not a JSON object, leaves the flags' word: DeepSpeed itself reports
    it to the ranks, and the file may be one only the job's image holds."""
    line = workload_hints(command)
    named = config_named(command)
    if named is None:
        return line
    path = os.path.join(folder, named)
    try:
        if not os.path.isfile(path):  # a FIFO would block the submit
            return line
        with open(path, "rb") as fh:
            data = fh.read(CONFIG_BYTES + 1)
        config = json.loads(data) if len(data) <= CONFIG_BYTES else None
    except (OSError, ValueError, RecursionError):
        return line
    return workload_from_config(config, line, world) if isinstance(config, dict) else line


# What a job's command line says it runs: (a word it contains, the framework), first match wins.
_FRAMEWORK_WORDS = (
    ("tf_cnn_benchmarks", "TensorFlow (tf_cnn_benchmarks)"), ("tensorflow", "TensorFlow"),
    ("torchrun", "PyTorch"), ("torch.distributed", "PyTorch"), ("deepspeed", "PyTorch"), ("mxnet", "MXNet"),
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
