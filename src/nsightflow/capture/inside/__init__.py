"""Code that runs inside the profiled program: the hook a command's processes load, the harness and passes that run a
callable, the analytic count, the probe that names launches."""
