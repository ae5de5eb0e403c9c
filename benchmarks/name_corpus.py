"""Build tests/data/kernel_names from a recording of benchmarks/gpu_record.py's ``names`` part.

Input: RECORDING/corpus.sqlite (nsys) and RECORDING/corpus.{demangled,mangled,function}.raw.csv (ncu's export
of the same program printed on each kernel-name base). Output, in OUT_DIR:
- ``names.csv``: one row per distinct kernel: the program that first launched it, nsys's demangled and
  mangled names, ncu's demangled, mangled and function names;
- ``launches.csv``: the launches both tools saw, in launch order, joined by position (the longest run of
  launches whose nsys and ncu mangled names agree one for one): name id, nsys grid and block, ncu grid and
  block. The join itself is not by name, so the test can check names against it.

Usage: python3 benchmarks/name_corpus.py RECORDING OUT_DIR
"""

from __future__ import annotations

import csv
import difflib
import sqlite3
import sys
from pathlib import Path

import pandas as pd

from nsightflow.capture.read.ncu_csv import parse_nvtx


def _export(path: Path) -> pd.DataFrame:
    rows = list(csv.reader(path.open()))
    return pd.DataFrame(rows[2:], columns=rows[0])


def main() -> None:
    rec, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    d, m, f = (_export(rec / f"corpus.{b}.raw.csv") for b in ("demangled", "mangled", "function"))
    assert (d["ID"] == m["ID"]).all() and (d["ID"] == f["ID"]).all()
    nvtx = next(c for c in d.columns if "Push/Pop" in c)
    program = [
        next((e["range"].split("/")[0].removeprefix("LLM@") for e in parse_nvtx(c) if e["domain"] == "LLM"), "-")
        for c in d[nvtx]
    ]
    con = sqlite3.connect(rec / "corpus.sqlite")
    k = pd.read_sql_query(
        "SELECT s1.value AS dem, s2.value AS man, '(' || gridX || ', ' || gridY || ', ' || gridZ || ')' AS grid, "
        "'(' || blockX || ', ' || blockY || ', ' || blockZ || ')' AS block FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s1 ON s1.id = k.demangledName JOIN StringIds s2 ON s2.id = k.mangledName "
        "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId ORDER BY r.start, k.start",
        con,
    )
    ncu = pd.DataFrame(
        {
            "program": program,
            "ncu_demangled": d["Kernel Name"],
            "ncu_mangled": m["Kernel Name"],
            "ncu_function": f["Kernel Name"],
            "ncu_grid": d["Grid Size"],
            "ncu_block": d["Block Size"],
        }
    )
    # Join by launch order: ncu's sequence is the nsys sequence with some runs missing (a compiled model's
    # autotuning launched more under nsys; the recording stopped before the end).
    sm = difflib.SequenceMatcher(None, list(k["man"]), list(ncu["ncu_mangled"]), autojunk=False)
    pairs = [(a + i, b + i) for a, b, n in sm.get_matching_blocks() for i in range(n)]
    nsys_i, ncu_i = zip(*pairs, strict=True)
    joined = pd.concat(
        [k.iloc[list(nsys_i)].reset_index(drop=True), ncu.iloc[list(ncu_i)].reset_index(drop=True)], axis=1
    )
    names = joined.drop_duplicates("man")[
        ["program", "dem", "man", "ncu_demangled", "ncu_mangled", "ncu_function"]
    ].rename(columns={"dem": "nsys_demangled", "man": "nsys_mangled"})
    names = names.reset_index(drop=True)
    names.index.name = "name_id"
    names.to_csv(out / "names.csv")
    ids = {m: i for i, m in enumerate(names["nsys_mangled"])}
    launches = pd.DataFrame(
        {
            "name_id": joined["man"].map(ids),
            "nsys_grid": joined["grid"],
            "nsys_block": joined["block"],
            "ncu_grid": joined["ncu_grid"],
            "ncu_block": joined["ncu_block"],
        }
    )
    launches.to_csv(out / "launches.csv", index=False)
    print(f"{len(names)} distinct kernels from {names['program'].nunique()} programs; {len(launches)} launches")


if __name__ == "__main__":
    main()
