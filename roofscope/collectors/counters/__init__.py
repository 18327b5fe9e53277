"""The counters pass (`roofscope counters`, `roofscope run --counters`): Nsight Compute over the recorded steps
(ncu.py, with ncu_target.py inside the profiled process), its CSV read (ncu_csv.py) and joined to the trace's
kernels (join.py); the probe of torch.profiler's CUPTI counter path (cupti_probe.py)."""
