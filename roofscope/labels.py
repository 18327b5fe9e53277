"""The annotation labels roofscope's collectors write into a trace and its stages read back: the one
vocabulary both sides share (analyzers/model/trace.py re-exports them as the readers' contract)."""
from __future__ import annotations

# A step: torch.profiler's ``ProfilerStep#N`` span (a reader of another format names its step
# spans so).
STEP_PREFIX = "ProfilerStep#"
# Module labels (collectors/modules.py writes them around each module call).
MODULE_PREFIX = "nn.Module: "
# roofscope's own annotations (the GPU drain, CUDA-graph captures and replays, forward steps)
# are never regions.
ROOFSCOPE_PREFIX = "roofscope: "
# Around roofscope's own GPU drain where recording starts and ends (collectors/torchprof.py).
DRAIN_LABEL = ROOFSCOPE_PREFIX + "drain GPU"
# Around a CUDA-graph capture and each replay, followed by the graph's id (collectors/graphs.py).
CAPTURE_LABEL = ROOFSCOPE_PREFIX + "graph capture "
REPLAY_LABEL = ROOFSCOPE_PREFIX + "graph replay "
# Around an inference forward, followed by its input shape "[B, T]" (collectors/steps.py).
FORWARD_LABEL = ROOFSCOPE_PREFIX + "forward "
