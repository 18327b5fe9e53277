"""Training frameworks a run used, from the modules loaded in the profiled process.

Recorded in ``run.json`` as ``frameworks`` (a list of keys below), so fixes can be written
in the framework's own terms (``TrainingArguments(torch_compile=True)`` for a Hugging Face
Trainer, not ``torch.compile(model)``). Plain traces without a Run fall back on op and
annotation names (analyzers/rules/fixes.py).
"""
from __future__ import annotations

import sys
from typing import Mapping

# key -> modules whose presence says the framework drives the loop (any one suffices).
# transformers alone is only a model library; its Trainer module is what runs the loop.
FRAMEWORK_MODULES: dict[str, tuple[str, ...]] = {
    "hf_trainer": ("transformers.trainer",),
    "accelerate": ("accelerate.accelerator",),
    "lightning": ("lightning.pytorch", "pytorch_lightning"),
    "torchtitan": ("torchtitan",),
    "deepspeed": ("deepspeed",),
}
# FSDP2 is not listed: torch loads its module without it being used; its ``FSDP::`` spans in
# the trace say it ran (analyzers/rules/fixes.py).


def loaded_frameworks(modules: Mapping[str, object] | None = None) -> list[str]:
    """Keys of :data:`FRAMEWORK_MODULES` whose modules are loaded (``sys.modules`` by default)."""
    modules = sys.modules if modules is None else modules
    return [key for key, names in FRAMEWORK_MODULES.items() if any(n in modules for n in names)]
