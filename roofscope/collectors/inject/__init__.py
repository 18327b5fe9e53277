"""The program run with fixes injected (``python -m roofscope.collectors.inject``): bootstrap.py runs it and
times its steps, probe.py keeps what it computed in its first steps. ``roofscope verify`` starts it."""
