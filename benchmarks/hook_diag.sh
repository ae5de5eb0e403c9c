#!/usr/bin/env bash
# Diagnose how ncu starts a Python program: which interpreter, prefix and path its sitecustomize sees.
mkdir -p /tmp/s
cat > /tmp/s/sitecustomize.py <<'PY'
import os, sys
print("SITE pid", os.getpid(), "ppid", os.getppid(), "exe", os.readlink("/proc/self/exe"), "executable", sys.executable,
      "prefix", sys.prefix, "argv", sys.argv, "path", sys.path, "builtin _posixsubprocess", "_posixsubprocess" in sys.builtin_module_names,
      "LD_PRELOAD", os.environ.get("LD_PRELOAD"), file=sys.stderr)
PY
echo "which python3: $(which python3)"; ls -la /opt/torch/.venv/bin/python3
PYTHONPATH=/tmp/s ncu --profile-from-start off /opt/torch/.venv/bin/python3 -c "import sys; print('MAIN', sys.executable)" 2>&1 | head -20
echo ---
PYTHONPATH=/tmp/s ncu --profile-from-start off python3 -c "import sys; print('MAIN', sys.executable)" 2>&1 | head -20
