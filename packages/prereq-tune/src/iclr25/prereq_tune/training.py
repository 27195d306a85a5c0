"""The two training stages of Prereq-Tune (spec §1.3, §1.5, §1.6).

* :func:`train_knowledge_adapter` — stage 1: one knowledge LoRA on a knowledge corpus with the
  ordinary causal-LM loss on all tokens; the base and every other adapter frozen.
* :func:`train_skill_adapter` — stage 2: the skill LoRA with a knowledge LoRA active but frozen:

  - **multi-version routing** (``multi_version=True``): at every loss computation one fictitious
    knowledge adapter ``k`` is drawn, its version ``v`` parsed from the name, and the micro-batch
    holds only version-``v`` rows (one row of each sampled subject). The official sampler instead
    loads all V versions of each subject and masks the loss of the others (V rows forwarded per
    counted row); it is kept as ``sampler="all_versions"``;
  - **mixed real/fictitious mode** (rows with ``fake=False``): fictitious rows with a fictitious
    knowledge LoRA + skill, real rows with the real knowledge LoRA + skill, one token-mean CE over
    both, plus ``real_weight`` × CE of the real rows with the skill LoRA alone;
  - **alternating groups** (``alternate_groups=True``): the ordered adapter list is split into a
    first and second half; loss computation ``c`` draws from the first half when ``c`` is even
    (the counter advances per micro-batch, as in the official trainer).

  With no knowledge adapter it is plain single-LoRA SFT (the SFT_real / SFT_fictitious baselines).

Frozen invariant (issue #23): the optimiser holds the trained adapter's parameters only;
``requires_grad`` is re-applied to every other parameter after each activation and asserted (with
"no gradient") before each step; all other tensors are hashed (sha256) before and after training
and across ``--resume``, and any difference raises :class:`~iclr25.prereq_tune.lora.FrozenTensorError`.

Full scale: pass an ``accelerate.Accelerator`` (``accelerate launch``, DDP or DeepSpeed ZeRO-2).
Each process reads a disjoint shard of every epoch's order; gradients are averaged over processes
(DeepSpeed: by its engine; DDP: an explicit all-reduce of the trainable gradients, because the
mixed mode runs several forward passes per backward).

The code is split by job: :mod:`.losses`, :mod:`.merged_forward`, :mod:`.groups` (adapter groups and routing), :mod:`.samplers`,
:mod:`.loop` (settings, result, optimiser, checkpoints), :mod:`.knowledge_stage` and :mod:`.skill_stage`; this
module re-exports their public names.
"""

from __future__ import annotations

from .groups import adapter_groups
from .knowledge_stage import train_knowledge_adapter
from .loop import (
    KNOWLEDGE_ARGS_BIO_PASSAGE,
    KNOWLEDGE_ARGS_BIO_STATEMENT,
    KNOWLEDGE_ARGS_TINY,
    RNG_FILE,
    SKILL_ARGS_BIO,
    SKILL_ARGS_POPQA,
    SKILL_ARGS_TINY,
    STATE_FILE,
    TrainArgs,
    TrainResult,
    checkpoint_exists,
)
from .losses import completion_loss
from .merged_forward import merged_knowledge_weights
from .skill_stage import train_skill_adapter

__all__ = [
    "TrainArgs",
    "TrainResult",
    "KNOWLEDGE_ARGS_TINY",
    "SKILL_ARGS_TINY",
    "merged_knowledge_weights",
    "KNOWLEDGE_ARGS_BIO_STATEMENT",
    "KNOWLEDGE_ARGS_BIO_PASSAGE",
    "SKILL_ARGS_BIO",
    "SKILL_ARGS_POPQA",
    "train_knowledge_adapter",
    "train_skill_adapter",
    "adapter_groups",
    "completion_loss",
    "checkpoint_exists",
    "STATE_FILE",
    "RNG_FILE",
]
