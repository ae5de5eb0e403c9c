#!/usr/bin/env bash
# On the GPU host (from the project root, after `. .gpu-bundle/activate.sh`): which files a cold run of the default
# workflow writes outside results/ and .snakemake/ (in its copy and in the home directory's caches).
set -eu
wf=$(mktemp -d)
python3 -c "import sys; sys.path.insert(0, 'tests'); from conftest import copy_workflow; from pathlib import Path; copy_workflow(Path('$wf'))"
touch /tmp/marker.$$
sleep 1
(cd "$wf" && PYTHONPATH="$wf/tests" python3 -m snakemake --cores 1 results/report.html > /dev/null 2>&1)
echo "written in the workflow's copy, outside results/ and .snakemake/:"
find "$wf" -newer /tmp/marker.$$ -not -path "*/results/*" -not -path "*/.snakemake/*" -not -name "*.pyc" -not -type d | head -30
echo "written under \$HOME and /tmp (caches):"
find "$HOME" /tmp -maxdepth 4 -newer /tmp/marker.$$ -not -path "$wf*" 2>/dev/null | grep -v "^/tmp/marker\|pytest\|nsys-report\|/tmp/tmp" | head -30
rm -rf "$wf" /tmp/marker.$$
