"""The analysis stages, in the data's order: ingest/ (readers → Trace), cost/ (FLOPs and bytes),
place/ (the roofline), views/ (per-step views), diagnose/ (findings and fixes), compare/ (two Results),
job/ (the ranks of a job); model/ holds the contracts they pass. roofscope/analysis.py runs them in order."""
