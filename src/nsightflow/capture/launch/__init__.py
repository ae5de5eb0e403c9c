"""Code that launches the tools and the program: command lines, child processes and their lifetime, the timed, nsys,
torch.profiler and ncu launches, the host's facts."""
