"""What a profiling session (collectors/session.py) does between its start and its stop: which
steps the profiler records (policy.py, with the rules it applies in rules.py), what runs beside the
profiler while it may record (recorders.py), and run.json's fields from all of it (runjson.py)."""
