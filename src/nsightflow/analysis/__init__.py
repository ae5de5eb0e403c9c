"""Analysis: a run's tables from its captures, whatever the backend. Counters to FLOPs, bytes, peaks and
utilisations (metrics), the consistency checks where inputs meet (checks), the aggregation per backend, captures
made elsewhere (imported), torch.profiler traces (torchprof), and the run files the report reads (runfiles).
Depends on nsightflow.capture (the timeline, the plan, the export readers) and the core modules."""
