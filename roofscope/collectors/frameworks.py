"""Training frameworks a run used, from the modules loaded in the profiled process.

Recorded in ``run.json`` as ``frameworks`` (a list of keys below), so fixes can be written
in the framework's own terms (``TrainingArguments(torch_compile=True)`` for a Hugging Face
Trainer, not ``torch.compile(model)``). Plain traces without a Run fall back on op and
annotation names (analyzers/diagnose/program.py).
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
# the trace say it ran (analyzers/diagnose/program.py).


def _accelerator_created(modules: Mapping[str, object]) -> bool:
    """Whether an ``Accelerator`` was made: transformers imports accelerate whenever it is
    installed (an HF ``generate()`` script on the H100 had ``accelerate.accelerator`` loaded and was
    told to use ``Accelerator(dynamo_backend=...)``), but only an Accelerator fills the state
    singleton it shares."""
    state = getattr(modules.get("accelerate.state"), "AcceleratorState", None)
    return bool(getattr(state, "_shared_state", None))


def loaded_frameworks(modules: Mapping[str, object] | None = None) -> list[str]:
    """Keys of :data:`FRAMEWORK_MODULES` whose modules are loaded (``sys.modules`` by default);
    accelerate only when an Accelerator was made."""
    modules = sys.modules if modules is None else modules
    return [key for key, names in FRAMEWORK_MODULES.items() if any(n in modules for n in names)
            and (key != "accelerate" or _accelerator_created(modules))]
