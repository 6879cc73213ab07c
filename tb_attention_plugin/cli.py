"""``tb-attention``: the analysis from the command line, for scripts and CI.

Exit codes: 0 every input analysed; 2 some input could not be read (the good ones are still
reported; one ``error: <file>: <problem>`` line per bad file on stderr, never a traceback).
``check`` (docs/ci.md) also exits 1 when the budget is exceeded.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import shutil
import sys
from typing import Any, Optional

import msgspec

from . import __version__, settings
from .attention import patterns as P
from .cache import ReportCache
from .jsonout import to_json
from .roofline import devices as D
from .settings import Settings

# The analysis modules (numpy and friends) are imported when a trace is actually analysed, so a
# cache hit prints without paying for them.

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2
EXIT_USAGE = 3  # check: no budget given, or a budget that cannot be read (not an unreadable trace: 2)


def _common(p: argparse.ArgumentParser) -> None:
    # Flags that override a TB_ATTENTION_* variable default to None ("not given") and are parsed
    # by settings.py, with the environment's parsers (settings.SETTINGS).
    g = p.add_argument_group("analysis")
    g.add_argument(
        "--peaks",
        metavar="SPEC",
        help="device peaks for an unknown GPU or to override: a JSON file, or "
        "'bf16=312,fp32=19.5,memory=1.5' (TFLOP/s and TB/s)",
    )
    g.add_argument(
        "--peak-basis",
        choices=("measured", "datasheet"),
        help="use measured peaks where the table has them (default) or datasheet peaks",
    )
    g.add_argument(
        "--module-pattern",
        help=f"regex on nn.Module class names that scope attention (default: {P.DEFAULT_MODULE_PATTERN})",
    )
    g.add_argument(
        "--annotation-pattern",
        help=f"regex on record_function names that scope attention (default: {P.DEFAULT_ANNOTATION_PATTERN})",
    )
    g.add_argument("--step", help="analyse one profiler step only (e.g. 3 or ProfilerStep#3)")
    g.add_argument(
        "--reference",
        metavar="TRACE",
        help="for kernels replayed from CUDA graphs: a trace (or a run directory holding one) of the same step "
        "run eagerly, compiled without graphs, or of the graph capture; their op, module, shapes and cost are "
        "carried over from it",
    )
    g.add_argument("--max-bytes", metavar="SIZE", help="refuse traces that decompress to more than this (default 16G)")
    g.add_argument("--no-cache", action="store_true", help="do not read or write the report cache")
    g.add_argument("--cache-dir", help="report cache directory (default ~/.cache/tb-attention)")


def _wide_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wide",
        action="store_true",
        help="print every column and whole names; by default text fits the terminal width "
        "(COLUMNS, else the terminal, else 100)",
    )


def _width(a) -> Optional[int]:
    """Columns text output may use: None (no limit) with --wide; else COLUMNS, the terminal's
    width, or 100 when output is not a terminal; never under formats.MIN_WIDTH."""
    if getattr(a, "wide", False):
        return None
    from .formats import MIN_WIDTH

    return max(MIN_WIDTH, shutil.get_terminal_size((100, 24)).columns)


def _compare_opts(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("comparison")
    g.add_argument(
        "--normalize",
        choices=("auto", "per-step", "total"),
        default="auto",
        help="compare per-step averages (auto: when the step counts differ) or totals",
    )
    g.add_argument("--top", type=int, default=12, help="kernel groups listed (default 12, 0 = all)")


def _settings(a) -> Settings:
    """The environment's settings (settings.py) with this command line's flags over them."""
    flags = {s.flag: getattr(a, s.flag[2:].replace("-", "_")) for s in settings.SETTINGS if s.flag}
    try:
        s = settings.with_flags(getattr(a, "env_settings", None) or settings.from_env(plugin=False), flags)
    except ValueError as e:
        raise SystemExit(_fail(f"error: {_one_line(str(e))}")) from None
    ref = getattr(a, "reference", None)
    if ref is not None and os.path.isdir(ref):  # a run's directory, as the traces themselves may be given
        from .trace.files import expand_paths

        found = [p for p, _ in expand_paths([ref])]
        if len(found) != 1:
            what = "no trace file" if not found else f"{len(found)} trace files (name one)"
            raise SystemExit(_fail(f"error: {ref}: --reference: the directory holds {what}"))
        ref = found[0]
    if ref is not None and not os.path.isfile(ref):
        raise SystemExit(_fail(f"error: {ref}: --reference: not a readable trace file"))
    return dataclasses.replace(
        s,
        options=dataclasses.replace(
            s.options, step=a.step, allow_partial=bool(getattr(a, "allow_partial", False)), reference=ref
        ),
    )


def _cache(s: Settings) -> Optional[ReportCache]:
    return None if s.no_cache else ReportCache(s.cache_dir)


def _partial_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="analyse the events before the cut of a truncated trace (marked partial in every "
        "output) instead of failing with exit 2",
    )


def _fail(msg: str) -> int:
    print(msg, file=sys.stderr)
    return EXIT_BAD_INPUT


def _usage(msg: str) -> int:
    """A gate asked for wrongly (no budget, a budget that cannot be read): its own exit code, so CI
    tells a misconfigured gate from an unreadable trace."""
    print(msg, file=sys.stderr)
    return EXIT_USAGE


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _one_line(text: str) -> str:
    """One line of plain text: whitespace collapsed, other control characters (terminal escapes)
    and bytes that are not UTF-8 shown escaped."""
    from .trace.files import shown_path

    text = " ".join(shown_path(str(text)).split())
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


_CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """Text reports hold names from the trace (kernels, ops, modules): their control characters
    are shown escaped, so a kernel named ``\\x1b]2;...`` cannot drive the user's terminal.
    Newlines and tabs stay (the report's own layout); JSON and CSV keep the data as it is."""
    return _CONTROL_IN_TEXT.sub(lambda m: repr(m.group())[1:-1], text)


def _shown(path: str) -> str:
    """A file name in an error line: every control character escaped (a newline in a name must
    not start a second line), bytes that are not UTF-8 as ``\\xff``."""
    from .trace.files import shown_path

    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], shown_path(str(path)))


def _files(paths: list[str]) -> list[str]:
    from .trace.files import expand_paths

    return [f for f, _ in expand_paths(paths)]


def _reports(a, paths: list[str]) -> tuple[list[dict], list[dict]]:
    from .analyze import analyze_path, read_ahead

    s = _settings(a)
    opt, cache = s.options, _cache(s)
    ok: list[dict] = []
    bad: list[dict] = []
    files = _files(paths)
    if not files:
        bad.append({"path": ", ".join(paths), "status": "error", "error": "no trace files found"})
    with read_ahead(files, opt, cache) as ahead:
        for f in files:
            rep = _known_error(a, f) or analyze_path(f, opt, cache, ahead)
            (ok if rep.get("status") == "ok" else bad).append(rep)
    return ok, bad


def _analyze_json(a, out) -> list[dict]:
    """Write the JSON envelope trace by trace; returns the error entries. A trace whose JSON is
    in the cache is copied from it without analysing anything."""
    from .jsonout import envelope_head

    s = _settings(a)
    opt, cache = s.options, _cache(s)
    files = _files(a.paths)
    bad = []
    if not files:
        bad.append({"path": ", ".join(a.paths), "status": "error", "error": "no trace files found"})
    out.write(envelope_head())
    _write_traces(a, out, files, opt, cache, bad)
    for b in bad:
        if b["path"] == ", ".join(a.paths) and not files:
            out.write(to_json(b))
    out.write(b"]}\n")
    return bad


def _write_traces(a, out, files: list[str], opt, cache, bad: list[dict]) -> None:
    """Each trace's JSON in turn: copied from the cache, or analysed and written (and cached).
    From the first trace analysed on, the job's next file is read while one is analysed
    (trace/ahead.py); a run served from the cache never imports the engine."""
    from .jsonout import iter_trace_body, trace_json_head
    from .trace.files import shown_path

    ahead: Any = None  # the ReadAhead, made at the first trace analysed
    with contextlib.ExitStack() as stack:
        for i, f in enumerate(files):
            if i:
                out.write(b",")
            key = None
            if cache is not None:
                try:
                    key = cache.key(f, os.stat(f), opt.key())
                except OSError:
                    key = None
                chunks = cache.get_json(key) if key else None
                if chunks is not None:
                    out.write(trace_json_head(shown_path(f)))
                    for c in chunks:
                        out.write(c)
                    continue
            from .analyze import analyze_path, read_ahead

            if ahead is None:
                ahead = stack.enter_context(read_ahead(files[i:], opt, cache))
            rep = _known_error(a, f) or analyze_path(f, opt, cache, ahead)
            if rep.get("status") != "ok":
                bad.append(rep)
                out.write(to_json(rep))
                continue
            writer = cache.json_writer(key) if (cache is not None and key) else None
            out.write(trace_json_head(shown_path(f)))
            for c in iter_trace_body(rep):
                out.write(c)
                if writer:
                    writer.write(c)
            if writer:
                writer.commit()


def _emit(text: str, output: Optional[str]) -> None:
    if output and output != "-":
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def cmd_analyze(a) -> int:
    if a.scheduler or a.workers is not None:
        rc = _analyze_on_cluster(a)
        if rc is not None:
            return rc
    if a.format == "json" and not a.pretty:
        if a.output and a.output != "-":
            with open(a.output, "wb") as f:
                bad = _analyze_json(a, f)
        else:
            bad = _analyze_json(a, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        for b in bad:
            print(f"error: {_shown(b['path'])}: {_one_line(b['error'])}", file=sys.stderr)
        return EXIT_BAD_INPUT if bad else EXIT_OK
    from .formats import render_csv, render_text
    from .report import envelope

    ok, bad = _reports(a, a.paths)
    for b in bad:
        print(f"error: {_shown(b['path'])}: {_one_line(b['error'])}", file=sys.stderr)
    if a.format == "json":
        text = msgspec.json.format(to_json(envelope(ok + bad)), indent=1).decode() + "\n"
    elif a.format == "csv":
        text = render_csv(ok, memory=a.memory)
    else:
        text = _printable(render_text(ok, markdown=a.format == "markdown", top=a.top, memory=a.memory, width=_width(a)))
    _emit(text, a.output)
    return EXIT_BAD_INPUT if bad else EXIT_OK


def cmd_annotate(a) -> int:
    from .analyze import analyze_path
    from .annotate import AnnotateError, annotate_file

    s = _settings(a)
    opt, cache = s.options, _cache(s)
    try:
        st = annotate_file(
            a.trace,
            a.output,
            per_kernel=a.per_kernel,
            max_bytes=opt.max_bytes,
            analyze=lambda p: analyze_path(p, opt, cache),
        )
    except (AnnotateError, OSError) as e:
        return _fail(f"error: {_shown(a.trace)}: {_one_line(str(getattr(e, 'strerror', None) or e))}")
    print(
        f"wrote {a.output}: {st['phase_spans']} phase spans and {st['call_spans']} attention-call spans on "
        f"{st['tracks']} track(s), {st['original_entries']} original events kept"
    )
    if not st["phase_spans"]:
        print("note: no attention GPU kernels in this trace, so the copy has no attention tracks", file=sys.stderr)
    return EXIT_OK


def cmd_replay(a) -> int:
    """``replay``: the distinct attention calls (--list), the replay script (--emit), or both and a
    run here (--run); see docs/replay.md."""
    import shlex

    from .replay import command as RC

    extra = shlex.split(a.script_args or "")
    if a.run and "cpu" not in extra:
        problem = RC.gpu_problem()
        if problem:
            target = a.emit or "the script of `tb-attention replay --emit FILE`"
            return _fail(
                f"error: --run needs PyTorch and a CUDA GPU on this machine: {problem}; emit the script "
                f"(--emit FILE) and run it on the machine with the GPU (python {target}), then put the "
                f".replay.json it writes beside the trace"
            )
    ok, bad = _reports(a, a.paths)
    for b in bad:
        print(f"error: {_shown(b['path'])}: {_one_line(b['error'])}", file=sys.stderr)
    if not ok:
        return EXIT_BAD_INPUT
    if a.list or not (a.emit or a.run):
        if a.format == "json":
            sys.stdout.write(to_json(RC.list_json(ok)).decode() + "\n")
        else:
            sys.stdout.write(_printable(RC.list_text(ok, _width(a))))
    if a.emit or a.run:
        import tempfile

        path = a.emit or os.path.join(tempfile.mkdtemp(prefix="tb-attention-"), "replay.py")
        w = RC.write_script(ok, path)
        note = sys.stderr if (a.list and a.format == "json") else sys.stdout
        print(
            f"wrote {path}: {w.calls} distinct attention call(s) of {w.traces} trace(s); {w.sentence()}. Run it on "
            f"the machine with the GPU (python {os.path.basename(path)}) and put the .replay.json files it writes "
            "beside the traces",
            file=note,
        )
        if a.run:
            rc, placed = RC.run_script(path, ok, extra)
            for p in placed:
                print(f"wrote {p}", file=note)
            if rc:
                return _fail(f"error: {_shown(path)}: the replay script exited with {rc}")
    return EXIT_BAD_INPUT if bad else EXIT_OK


def cmd_devices(a) -> int:
    rows = D.table()
    if a.format == "json":
        sys.stdout.write(to_json(rows).decode() + "\n")
        return EXIT_OK
    from .formats import render_devices

    sys.stdout.write(render_devices(rows, _width(a)))
    return EXIT_OK


def _side(a, path: str, label: str):
    """A comparison side from a trace file or a directory (all its traces aggregated); on bad input
    the error entries instead."""
    from .compare import aggregate, summarize

    ok, bad = _reports(a, [path])
    if bad:
        return None, bad
    return aggregate([summarize(r, label if len(ok) == 1 else None) for r in ok], label), []


def _compare(a, base_path: str, new_path: str):
    from .compare import compare_reports

    base, bad_b = _side(a, base_path, base_path)
    new, bad_n = _side(a, new_path, new_path)
    bad = bad_b + bad_n
    for b in bad:
        print(f"error: {_shown(b['path'])}: {_one_line(b['error'])}", file=sys.stderr)
    if bad:
        return None
    return compare_reports(base, new, normalize=a.normalize.replace("-", "_"), top=a.top)


def cmd_compare(a) -> int:
    from .compare import render

    cmp = _compare(a, a.base, a.new)
    if cmp is None:
        return EXIT_BAD_INPUT
    if a.format == "json":
        text = msgspec.json.format(to_json(cmp), indent=1).decode() + "\n"
    else:
        text = _printable(render(cmp, markdown=a.format == "markdown", width=_width(a)))
    _emit(text, a.output)
    return EXIT_OK


def cmd_check(a) -> int:
    from .compare import check, parse_share

    if a.max_regression is None and a.max_attention_share is None:
        return _usage("error: check: give --max-regression PCT and/or --max-attention-share X")
    if a.max_regression is not None and not a.baseline:
        return _usage("error: check: --max-regression needs --baseline BASE")
    share = None
    if a.max_attention_share is not None:
        try:
            share = parse_share(a.max_attention_share)
        except ValueError:
            return _usage(f"error: --max-attention-share: not a share: {a.max_attention_share!r} (e.g. 0.4 or 40%)")
    cmp = _compare(a, a.baseline or a.new, a.new)
    if cmp is None:
        return EXIT_BAD_INPUT
    res = check(cmp, a.max_regression if a.baseline else None, share)
    if a.format == "json":
        sys.stdout.write(to_json({**res, "comparison": cmp}).decode() + "\n")
    else:
        # one line, not wrapped: CI logs and greps read the verdict as one paragraph (docs/ci.md)
        print(_printable(("PASS: " if res["passed"] else "FAIL: ") + res["explanation"]))
    return EXIT_OK if res["passed"] else EXIT_FAIL


# ---------------------------------------------------------------- many ranks, Dask (ranks/)


def _distributed(p: argparse.ArgumentParser, auto: bool = True) -> None:
    """``auto``: without --workers, more than a few files to analyse start a local cluster."""
    g = p.add_argument_group("distributed (Dask)")
    g.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run the per-file analyses on an existing Dask cluster (e.g. tcp://host:8786); its "
        "workers must see the same paths",
    )
    g.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes of a local Dask cluster (0: in this process; default: "
        + ("a cluster of one per CPU when more than a few files need analysing)" if auto else "in this process)"),
    )
    g.add_argument(
        "--worker-memory",
        type=_size_arg,
        metavar="SIZE",
        help="memory limit per local worker (default: this machine's memory shared equally)",
    )


def _size_arg(text: str) -> int:
    try:
        return settings.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _known_error(a, path: str) -> Optional[dict]:
    """The error a Dask worker already reported for ``path`` (analyze --scheduler/--workers)."""
    return (getattr(a, "known_errors", None) or {}).get(path)


def _summaries(a, paths: list[str], keep_json: bool = False):
    """(summaries in file order, run info) or an exit code after printing the error line."""
    from .ranks.distributed import ClusterError, summarize_files

    files = _files(paths)
    if not files:
        return _fail(f"error: {_shown(', '.join(paths))}: no trace files found")
    if a.workers is not None and a.workers < 0:
        return _fail("error: --workers: must be 0 or more")
    try:
        s = _settings(a)
        return summarize_files(
            files,
            s.options,
            s.cache_dir,
            not s.no_cache,
            scheduler=a.scheduler,
            workers=a.workers,
            worker_memory=a.worker_memory,
            keep_json=keep_json,
            timeout=s.dask_timeout,
        )
    except ClusterError as e:
        return _fail(
            f"error: {'--scheduler ' + a.scheduler if a.scheduler else 'local Dask cluster'}: {_one_line(str(e))}"
        )


def _analyze_on_cluster(a) -> Optional[int]:
    """Analyse every file on Dask workers, which keep the reports in the shared cache; the normal
    path then prints them from the cache. None to continue, or an exit code."""
    if _settings(a).no_cache:
        return _fail(
            "error: --scheduler/--workers: analyze needs the report cache to bring reports back "
            "(drop --no-cache; with a remote cluster give --cache-dir on a shared path)"
        )
    res = _summaries(a, a.paths, keep_json=a.format == "json" and not a.pretty)
    if isinstance(res, int):
        return res
    sums, _ = res
    a.known_errors = {
        f: {"path": s["path"], "status": "error", "error": s["error"]}
        for f, s in zip(_files(a.paths), sums)
        if s.get("status") != "ok"
    }
    return None


def cmd_ranks(a) -> int:
    from .ranks.job import job_view
    from .ranks.render import render_csv, render_text

    res = _summaries(a, a.paths)
    if isinstance(res, int):
        return res
    sums, _ = res
    view = job_view(sums)
    for b in view["errors"]:
        print(f"error: {_shown(b['path'])}: {_one_line(b['error'])}", file=sys.stderr)
    if a.format == "json":
        text = msgspec.json.format(msgspec.json.encode(view), indent=1).decode() + "\n"
    elif a.format == "csv":
        text = render_csv(view)
    else:
        text = _printable(render_text(view, markdown=a.format == "markdown", width=_width(a)))
    _emit(text, a.output)
    return EXIT_BAD_INPUT if view["errors"] else EXIT_OK


def cmd_summarize(a) -> int:
    import time

    if _settings(a).no_cache:
        return _fail("error: summarize: fills the report cache; drop --no-cache")
    t0 = time.monotonic()
    res = _summaries(a, [os.path.realpath(p) for p in a.paths])
    if isinstance(res, int):
        return res
    sums, info = res
    bad = [s for s in sums if s.get("status") != "ok"]
    for b in bad:
        print(f"error: {_shown(b['path'])}: {_one_line(b['error'])}", file=sys.stderr)
    runs: dict = {}
    for s in sums:
        if s.get("status") == "ok":
            runs.setdefault(os.path.dirname(s["path"]), []).append(s)
    how = {
        "inprocess": "in this process",
        "local": f"on a local Dask cluster of {info['workers']} worker(s)",
        "scheduler": f"on the Dask cluster at {a.scheduler}",
    }[info["mode"]]
    cache_dir = _settings(a).cache_dir
    print(
        f"summarized {len(sums) - len(bad)} trace(s) in {len(runs)} run(s): {info['cached']} already cached, "
        f"{info['analysed']} analysed {how} in {time.monotonic() - t0:.1f} s; {len(bad)} failed; cache {cache_dir}"
    )
    return EXIT_BAD_INPUT if bad else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tb-attention", description="Where attention spends GPU time in PyTorch profiler traces."
    )
    p.add_argument("--version", action="version", version=f"tb-attention {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    an = sub.add_parser(
        "analyze",
        aliases=["analyse"],
        help="analyse traces (files or directories)",
        description="Analyse torch.profiler traces: attention kernels, phases, roofline, bounds.",
    )
    an.add_argument("paths", nargs="+", metavar="PATH", help="trace file (.json, .json.gz) or directory")
    an.add_argument("--format", "-f", choices=("table", "json", "csv", "markdown"), default="table")
    an.add_argument("--output", "-o", help="write to this file instead of stdout")
    an.add_argument("--pretty", action="store_true", help="indent JSON output")
    an.add_argument("--top", type=int, default=10, help="attention kernels listed in table/markdown (default 10)")
    an.add_argument(
        "--memory",
        action="store_true",
        help="add the memory section (allocations, KV footprint, data movement) to table/markdown/csv; "
        "JSON always has the 'memory' block",
    )
    _wide_opt(an)
    _common(an)
    _partial_opt(an)
    _distributed(an, auto=False)
    an.set_defaults(func=cmd_analyze)
    at = sub.add_parser(
        "annotate",
        help="write a copy of a trace with attention phases as timeline tracks",
        description="Copy a trace, adding attention calls and phases as their own tracks on the GPU "
        "time axis (Perfetto, chrome://tracing). Original events are kept byte for byte.",
    )
    at.add_argument("trace", metavar="TRACE", help="trace file (.json or .json.gz)")
    at.add_argument("--output", "-o", required=True, metavar="OUT", help="output file (gzip when it ends in .gz)")
    at.add_argument(
        "--per-kernel",
        action="store_true",
        help="one slice per attention kernel instead of one per run of same-phase kernels",
    )
    _common(at)
    at.set_defaults(func=cmd_annotate)
    cp = sub.add_parser(
        "compare",
        help="compare two runs: per phase, fused vs decomposed, kernel groups",
        description="Compare the attention of two runs (BASE, NEW: a trace file, or a directory "
        "whose traces are aggregated). Times are per-step averages when the runs hold "
        "different numbers of profiler steps.",
    )
    cp.add_argument("base", metavar="BASE", help="baseline: trace file or directory")
    cp.add_argument("new", metavar="NEW", help="new run: trace file or directory")
    cp.add_argument("--format", "-f", choices=("table", "json", "markdown"), default="table")
    cp.add_argument("--output", "-o", help="write to this file instead of stdout")
    _compare_opts(cp)
    _wide_opt(cp)
    _common(cp)
    _partial_opt(cp)
    cp.set_defaults(func=cmd_compare)
    ck = sub.add_parser(
        "check",
        help="CI gate: fail when attention time regressed beyond a budget",
        description="Exit 0 within budget, 1 when NEW's attention time exceeds BASE's by more than "
        "PCT percent (or its attention share exceeds X), 2 on unreadable input.",
    )
    ck.add_argument("new", metavar="NEW", help="the run to check: trace file or directory")
    ck.add_argument("--baseline", "-b", metavar="BASE", help="baseline trace file or directory")
    ck.add_argument(
        "--max-regression", type=float, metavar="PCT", help="fail when attention time grew by more than PCT percent"
    )
    ck.add_argument(
        "--max-attention-share", metavar="X", help="fail when attention exceeds this share of GPU time (0.4 or 40%%)"
    )
    ck.add_argument("--format", "-f", choices=("text", "json"), default="text")
    _compare_opts(ck)
    _common(ck)
    _partial_opt(ck)
    ck.set_defaults(func=cmd_check)
    rk = sub.add_parser(
        "ranks",
        help="one row per rank of a multi-GPU job: spread and stragglers",
        description="Summarise every trace of a job (one per rank), in rank order: attention and "
        "compute busy time, phases, communication; the spread over ranks and the ranks "
        "whose attention is well above the median (stragglers), with the phases that "
        "explain it.",
    )
    rk.add_argument("paths", nargs="+", metavar="PATH", help="trace files or a directory (e.g. the job's log dir)")
    rk.add_argument("--format", "-f", choices=("table", "json", "csv", "markdown"), default="table")
    rk.add_argument("--output", "-o", help="write to this file instead of stdout")
    _wide_opt(rk)
    _common(rk)
    _partial_opt(rk)
    _distributed(rk)
    rk.set_defaults(func=cmd_ranks)
    sm = sub.add_parser(
        "summarize",
        help="analyse a log directory ahead of time (the cache TensorBoard reads)",
        description="Analyse every trace under LOGDIR and keep the reports and rank summaries in the "
        "report cache, so that the Attention tab opens a job of many ranks at once. Use "
        "the same analysis options (and cache directory) as the TensorBoard plugin.",
    )
    sm.add_argument("paths", nargs="+", metavar="LOGDIR", help="log directory (or trace files)")
    _common(sm)
    _distributed(sm)
    sm.set_defaults(func=cmd_summarize)
    rp = sub.add_parser(
        "replay",
        help="what-if replay: list the attention calls, emit a script that times them under every backend",
        description="List the distinct attention calls of traces (--list, the default), write one self-contained "
        "PyTorch script that rebuilds each with random inputs of the recorded shapes and times it under "
        "every backend (--emit FILE), or emit and run it here (--run, needs a CUDA GPU). Put the "
        "<trace file>.replay.json it writes beside the trace: the analysis then uses the measured times.",
    )
    rp.add_argument("paths", nargs="+", metavar="PATH", help="trace file (.json, .json.gz) or run directory")
    rp.add_argument("--list", action="store_true", help="print the distinct calls (default when nothing else is asked)")
    rp.add_argument("--format", "-f", choices=("table", "json"), default="table", help="--list output")
    rp.add_argument("--emit", metavar="FILE", help="write the replay script to FILE")
    rp.add_argument("--run", action="store_true", help="emit and run the script here (needs torch and a CUDA GPU)")
    rp.add_argument(
        "--script-args",
        metavar="ARGS",
        help="arguments for the script with --run, e.g. '--repeats 20' or '--device cpu --scale-down'",
    )
    _wide_opt(rp)
    _common(rp)
    _partial_opt(rp)
    rp.set_defaults(func=cmd_replay)
    dv = sub.add_parser("devices", help="list the built-in device peaks and their sources")
    dv.add_argument("--format", "-f", choices=("table", "json"), default="table")
    _wide_opt(dv)
    dv.set_defaults(func=cmd_devices)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if not getattr(a, "command", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    if hasattr(a, "max_bytes"):  # a command that analyses: the environment's settings apply
        a.env_settings = settings.from_env(plugin=False)
        for w in a.env_settings.warnings:
            print(f"warning: {_one_line(w)}", file=sys.stderr)
    try:
        return a.func(a)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK


def run() -> None:
    """The ``tb-attention`` command: :func:`main`, then exit without tearing the interpreter
    down. The output is complete and flushed by then; freeing a large trace's objects one by one
    at exit only adds time (~0.1 s at 250 MB)."""
    rc = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc if isinstance(rc, int) else 1)


if __name__ == "__main__":
    run()
