"""The config checked before any job runs: the schema, with short errors that name the key and a fix, and the
checks a schema cannot express, in one place.

Snakemake's own ``validate`` prints the whole schema on an error (200 lines for a misspelt key); here the
error is the most relevant one, with its key path and, for an unknown key, the closest known keys.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

import yaml

from nsightflow.errors import ConfigError
from nsightflow.rules.sweep import COMMAND_ONLY

# Workload dtypes the harness and the peaks know (torch attribute names).
DTYPES = ("float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2")


def _path(err: Any) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "(top level)"


def _message(err: Any) -> str:
    where = _path(err)
    if err.validator == "additionalProperties":
        allowed = list(err.schema.get("properties", {}))
        extra = [k for k in err.instance if k not in allowed]
        hints = []
        for key in extra:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return f"config {where}: unknown key(s) {', '.join(hints)}; known keys: {', '.join(allowed)}"
    if err.validator == "propertyNames":
        return f"config {where}: key {err.instance!r} is not allowed: {err.message}"
    if err.validator == "pattern":
        return f"config {where}: {err.instance!r} does not match {err.validator_value!r}"
    if err.validator == "enum":
        return f"config {where}: {err.instance!r} is not one of {err.validator_value}"
    if err.validator == "required":
        return f"config {where}: {err.message}"
    return f"config {where}: {err.message}"


_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(\.[0-9]*)?[eE][-+]?[0-9]+)")
_WORDS = {"true": True, "false": False, "null": None, "~": None}


def _scalar(text: str) -> Any:
    """A command-line string as the number, boolean or null it spells, only where nothing is lost: an integer
    without leading zeros, a float that prints back as written (or in exponent form), true/false/null/~. ``'010'``,
    ``'1.10'``, ``'off'`` and ``''`` stay strings (PyYAML's YAML 1.1 made them 8, 1.1, False and None: a workload's
    argument changed under it)."""
    if text.lower() in _WORDS:
        return _WORDS[text.lower()]
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        value = float(text)
        exponent = "e" in text.lower()
        return value if exponent or repr(value) == text.lstrip("+") else text
    return text


def _types(spec: dict[str, Any]) -> set[str]:
    t = spec.get("type", [])
    return set(t if isinstance(t, list) else [t])


def _json_type(value: Any) -> set[str]:
    """The JSON schema types a parsed scalar satisfies."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    return {"number"}


def coerce(value: Any, spec: dict[str, Any]) -> Any:
    """``value`` with strings turned into the numbers, booleans or nulls the schema asks for (Snakemake 9 passes
    ``--config select='{top_n: 3}'`` as {'top_n': '3'}); workload ``args`` take plain numbers and booleans."""
    if isinstance(value, dict):
        props = spec.get("properties", {})
        extra = spec.get("additionalProperties") if isinstance(spec.get("additionalProperties"), dict) else None
        out = {}
        for k, v in value.items():
            sub = props.get(k, extra)
            if k == "args" and isinstance(v, dict) and "callable" in props:  # a workload's free-form arguments
                out[k] = {a: _scalar(x) if isinstance(x, str) else x for a, x in v.items()}
            elif sub is not None:
                out[k] = coerce(v, sub)
            else:
                out[k] = v
        return out
    if isinstance(value, list) and isinstance(spec.get("items"), dict):
        return [coerce(v, spec["items"]) for v in value]
    if isinstance(value, str) and _types(spec) & {"integer", "number", "boolean", "null"}:
        parsed = _scalar(value)
        if parsed is not value and _json_type(parsed) & _types(spec):  # '2' stays a string where a string is allowed
            return parsed
    return value


def normalize(config: dict[str, Any], schema_path: str | Path) -> None:
    """Coerce command-line strings in ``config`` (in place) to the types the schema asks for."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    fixed = coerce(config, schema)
    config.clear()
    config.update(fixed)


def check(config: dict[str, Any], schema_path: str | Path) -> None:
    """Raise ConfigError for the first schema violation (most relevant first) or semantic problem."""
    import jsonschema

    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = list(validator.iter_errors(config))
    if errors:
        raise ConfigError(_message(jsonschema.exceptions.best_match(errors)))
    semantic(config)


SEVERAL_PROCESSES = ("rank", "gpus")  # also a callable's, when it runs as several processes (nprocs)


def _program(i: int, name: str, w: dict[str, Any]) -> None:
    """A workload is a callable or a command, never both; a command's placeholders all have values."""
    where = f"config workloads[{i}] ({name})"
    if ("callable" in w) == ("command" in w):
        raise ConfigError(
            f"{where}: give either callable: (package.module:function) or command: (an argv list), "
            + ("not both" if "callable" in w else "neither is there")
        )
    if "callable" in w:
        several = (w.get("nprocs") or 1) > 1  # a job of several processes: a rank and GPUs to choose
        only = [k for k in COMMAND_ONLY if not (several and k in SEVERAL_PROCESSES)]
        extra = [k for k in only if w.get(k) not in (None, {}, [], 0, "auto") and (k, w.get(k)) != ("gpus", 1)]
        if extra:
            raise ConfigError(
                f"{where}: {', '.join(extra)} apply to a command: workload only"
                + ("" if several else " (rank and gpus also to a callable with nprocs > 1)")
                + "; remove them"
            )
        return
    if (w.get("nprocs") or 1) != 1:
        raise ConfigError(
            f"{where}: nprocs applies to a callable; a command starts its own processes (e.g. command: [torchrun, "
            "--nproc_per_node, '2', script.py]): remove nprocs"
        )
    if w.get("step_functions") and (w.get("domain") is not None or w.get("stages") is not None):
        raise ConfigError(
            f"{where}: step_functions name the stages (the calls of each function are its steps); domain: and stages: "
            "name them by NVTX ranges: keep one of the two"
        )
    unknown = sorted(set(w.get("step_inputs") or {}) - set(w.get("step_functions") or {}))
    if unknown:
        raise ConfigError(
            f"{where}.step_inputs: {', '.join(unknown)} name(s) no stage of step_functions "
            f"({sorted(w.get('step_functions') or {}) or 'none'}): step_inputs summarise the calls of a step function; "
            "name one of its stages"
        )
    cwd = w.get("cwd")
    if cwd is not None and not Path(cwd).is_dir():
        raise ConfigError(
            f"{where}.cwd: {cwd!r} is not a folder (from {Path.cwd()}, where snakemake runs): give the program's own "
            "folder, absolute or relative to where snakemake runs"
        )
    from nsightflow.capture.launch.command_call import PLACEHOLDER

    known = set(w.get("args") or {}) | set(w.get("sweep") or {})
    for arg in w["command"]:
        for m in PLACEHOLDER.finditer(arg):
            if m.group(1) not in known:
                raise ConfigError(
                    f"{where}.command: {arg!r} has the placeholder {{{m.group(1)}}} with no value; give "
                    f"{m.group(1)} under args: or sweep: (known: {sorted(known) or 'none'})"
                )


def semantic(config: dict[str, Any]) -> None:
    """What the schema cannot say: dtypes, JSON-able workload arguments, a selection criterion."""
    for i, w in enumerate(config.get("workloads") or []):
        name = w.get("name", f"#{i}")
        _program(i, name, w)
        try:
            json.dumps(w.get("args") or {})
        except TypeError as exc:
            raise ConfigError(
                f"config workloads[{i}] ({name}).args: {exc}; write dates and other YAML types as quoted strings"
            ) from exc
        # Every value a run will take, swept ones included, is checked here: not only the first point's.
        dtypes = [("args.dtype", (w.get("args") or {}).get("dtype"))]
        dtypes += [(f"sweep.dtype[{j}]", v) for j, v in enumerate((w.get("sweep") or {}).get("dtype") or [])]
        for where, dtype in dtypes:
            if dtype is not None and dtype not in DTYPES:
                close = difflib.get_close_matches(str(dtype).lower(), DTYPES, n=1, cutoff=0.6)
                raise ConfigError(
                    f"config workloads[{i}] ({name}).{where}: {dtype!r} is not a dtype nsightflow knows "
                    f"({', '.join(DTYPES)})" + (f"; did you mean {close[0]!r}?" if close else "")
                )
    from nsightflow.rules.sweep import expand

    try:  # run ids: unique, inside results/, short enough for a file system
        expand(config.get("workloads") or [])
    except ValueError as exc:
        raise ConfigError(f"config workloads: {exc}") from exc
    select = config.get("select") or {}
    if "top_n" in select and "coverage" in select and select["top_n"] is None and select["coverage"] is None:
        raise ConfigError(
            "config select: top_n and coverage are both null; give at least one (the report's focus: "
            "the top kernels by time)"
        )
