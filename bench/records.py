"""Benchmark results as records: each bench script appends one JSON line per measurement to
bench/results/<script>.jsonl (committed), and bench/render_page.py writes docs/benchmarks.md from the newest.

A record holds:
- bench: the script's name ("scale"); measurement: what was measured ("taxi_fare x100", a table's name), the
  key under which the renderer finds the newest figures;
- date (UTC, ISO 8601), commit and dirty (the measured checkout's HEAD and whether its tracked files differed
  from it, bench/results aside), command (the command line, the project folder as "." and the home as "~"),
  machine (cores, memory, CPU model, AVX512_BF16);
- figures: the script's own, as it computes them: one dict per run under "runs" (with "seed" where runs are
  seeded), figures of the whole measurement beside them;
- source: "run" for a record a script appended; note: optional, one sentence.

BENCH_RECORDS=off appends nothing (a test run of a bench script); BENCH_RESULTS_DIR appends elsewhere.
"""
from __future__ import annotations

import datetime
import glob
import json
import os
import platform
import shlex
import subprocess
import sys

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(PROJECT_ROOT, "bench", "results")
RUN = "run"


def recording() -> bool:
    """Whether append() writes: not when BENCH_RECORDS is off, 0, no or false."""
    return os.environ.get("BENCH_RECORDS", "on").strip().lower() not in ("off", "0", "no", "false")


def results_dir() -> str:
    """Where records go: BENCH_RESULTS_DIR, else bench/results of this checkout."""
    return os.environ.get("BENCH_RESULTS_DIR") or RESULTS_DIR


def machine(cpuinfo: str = "/proc/cpuinfo", meminfo: str = "/proc/meminfo") -> dict:
    """The running machine: {"cores", "memory_gib", "cpu" (model name, or None), "avx512_bf16" (None when
    unknown)}, read from /proc where there is one."""
    described = {"cores": os.cpu_count(), "memory_gib": None, "cpu": platform.processor() or None,
                 "avx512_bf16": None}
    try:
        with open(cpuinfo) as handle:
            text = handle.read()
        models = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")]
        described["cpu"] = models[0] if models else described["cpu"]
        described["avx512_bf16"] = "avx512_bf16" in text.split()
    except OSError:
        pass
    try:
        with open(meminfo) as handle:
            total = next(line for line in handle if line.startswith("MemTotal:"))
        described["memory_gib"] = round(int(total.split()[1]) * 1024 / 2**30, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return described


def code_version(folder: str = PROJECT_ROOT) -> tuple[str | None, bool | None]:
    """A checkout's (full commit, whether a tracked file outside bench/results differs from it); (None, None)
    outside git."""
    try:
        commit = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--untracked-files=no", "--", ".",
                                  ":(exclude)bench/results"], capture_output=True, text=True, check=True).stdout
        return commit, bool(changed.strip())
    except (OSError, subprocess.CalledProcessError):
        return None, None


def command_line(argv: list[str] | None = None) -> str:
    """The command that runs: `python` and the script's arguments, with this project's folder written "." and
    the home folder "~", and any other folder of the machine left out of a path (`/tmp/x/after.json` is written
    `after.json`, `--json=/tmp/x/a.json` `--json=a.json`): no machine's paths in the records."""
    argv = list(sys.argv if argv is None else argv)
    home = os.path.expanduser("~")

    def plain(argument: str) -> str:
        argument = argument.replace(PROJECT_ROOT + os.sep, "").replace(PROJECT_ROOT, ".")
        if home not in ("", "/"):
            argument = argument.replace(home, "~")
        option, equals, value = argument.partition("=") if argument.startswith("-") else ("", "", argument)
        if os.path.isabs(value):
            value = os.path.basename(value.rstrip(os.sep)) or value
        return option + equals + value

    return shlex.join(["python"] + [plain(argument) for argument in argv])


def make_record(bench: str, measurement: str, figures: dict, *, code: str = PROJECT_ROOT, note: str = "",
                argv: list[str] | None = None) -> dict:
    """Input: the script's name, what was measured, its figures, the measured checkout, an optional note and the
    command's argv (default sys.argv). Output: the record (see the module's docstring), dated now."""
    commit, dirty = code_version(code)
    moment = datetime.datetime.now(datetime.timezone.utc)
    record = {"bench": bench, "measurement": measurement,
              "date": moment.isoformat(timespec="seconds").replace("+00:00", "Z"),
              "commit": commit, "dirty": dirty, "command": command_line(argv), "machine": machine(),
              "figures": figures, "source": RUN}
    if note:
        record["note"] = note
    return record


def append(bench: str, measurement: str, figures: dict, **details) -> str | None:
    """Appends make_record(bench, measurement, figures, **details) to <results_dir>/<bench>.jsonl as one JSON
    line (sorted keys). Output: the file's path, or None when recording is off."""
    if not recording():
        return None
    folder = results_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{bench}.jsonl")
    with open(path, "a") as handle:
        handle.write(json.dumps(make_record(bench, measurement, figures, **details), sort_keys=True) + "\n")
    return path


def read(folder: str | None = None) -> dict[str, list[dict]]:
    """Every record under `folder` (default results_dir()): {bench: its records in the order they were
    appended}."""
    found = {}
    for path in sorted(glob.glob(os.path.join(folder or results_dir(), "*.jsonl"))):
        with open(path) as handle:
            found[os.path.basename(path)[:-len(".jsonl")]] = [json.loads(line) for line in handle if line.strip()]
    return found
