"""The **Attention** tab of TensorBoard.

Registered through the ``tensorboard_plugins`` entry point. TensorBoard loads ``/index.js`` (an
ES module built from ``frontend/``) in an iframe and calls its ``render()``; the module talks
only to the JSON routes below, under ``/data/plugin/attention/``. Every route is documented in
docs/plugin.md.

Traces are found and analysed in the background (:mod:`.server.loader`); routes only look
results up, so the server answers while big traces load.
"""
from __future__ import annotations

import logging
import mimetypes
import os
import re
from typing import Optional

from werkzeug import wrappers
from werkzeug.wrappers import Response

from tensorboard.plugins import base_plugin

from . import __version__, settings
from .server import overview, timeline
from .compare import compare_reports
from .server.discovery import FileInfo, still_inside
from .server.index import BOUNDS, SORT_KEYS, KernelQuery, facets, find_kernel, query_kernels, roofline
from .server.loader import Loader, Snapshot
from .server.ranks import ranks_route
from .server.params import (HttpError, bad, bool_param, choice_param, error_response, int_param,
                            json_response, list_param, name_param, not_found, step_param, text_param)

log = logging.getLogger("tb_attention_plugin")

PLUGIN_NAME = "attention"
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
PHASES = ("qkv_proj", "qk_matmul", "scale", "mask", "softmax", "dropout", "pv_matmul", "out_proj",
          "fused_attention", "rotary", "layout", "other", "none")
_CONTENT_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                  ".svg": "image/svg+xml", ".png": "image/png", ".json": "application/json"}
WAIT_SUMMARY = 1.5      # seconds a route waits for an analysis before answering "loading"


class AttentionPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context, loader: Optional[Loader] = None):
        self._logdir = getattr(context, "logdir", None) or ""
        self.config_warnings: list[str] = []
        if loader is not None:
            self._loader = loader
        elif self._logdir and "://" not in self._logdir:
            env = settings.from_env()
            self.config_warnings = list(env.warnings)
            self._loader = Loader(self._logdir, env.options, **env.loader_kwargs())
        else:
            self._loader = None
            if self._logdir:
                self.config_warnings.append(f"only local log directories are supported, not {self._logdir}")
        for w in self.config_warnings:
            log.warning("tb-attention: %s", w)
        if self._loader is not None:
            self._loader.start()

    # ------------------------------------------------------------ TensorBoard API

    def get_plugin_apps(self):
        return {
            "/index.js": self._serve_static,
            "/index.css": self._serve_static,
            "/static/*": self._serve_static,
            "/runs": self._route(self._runs),
            "/status": self._route(self._status),
            "/summary": self._route(self._summary),
            "/phases": self._route(self._phases),
            "/kernels": self._route(self._kernels),
            "/kernel": self._route(self._kernel),
            "/roofline": self._route(self._roofline),
            "/compare": self._route(self._compare),
            "/report": self._route(self._report),
            "/memory": self._route(self._memory),
            "/annotated": self._route(self._annotated),
            "/timeline": self._route(lambda r: timeline.route(self, r)),
            "/overview": self._route(lambda r: overview.route(self, r)),
            "/ranks": self._route(lambda r: ranks_route(self, r)),
        }

    def is_active(self) -> bool:
        """Cheap: true once the background scan has found a trace (no disk access here)."""
        if self._loader is None:
            return False
        self._loader.first_scan_done.wait(0.2)
        return bool(self._loader.files())

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Attention",
                                            disable_reload=False)

    def close(self) -> None:
        if self._loader is not None:
            self._loader.stop()

    # ------------------------------------------------------------ plumbing

    def _route(self, handler):
        @wrappers.Request.application
        def app(request):
            if request.method not in ("GET", "HEAD"):
                return error_response(HttpError(405, "only GET is supported"))
            try:
                if self._loader is None:
                    raise HttpError(503, "no local log directory: start tensorboard with --logdir DIR")
                return handler(request)
            except HttpError as e:
                return error_response(e)
            except Exception:  # a bug in one route must not take the server down
                log.exception("tb-attention: %s failed", request.path)
                return error_response(HttpError(500, "internal error (see the tensorboard log)"))
        return app

    @wrappers.Request.application
    def _serve_static(self, request):
        path = request.path
        name = path.rsplit("/", 1)[-1]
        try:
            allowed = set(os.listdir(STATIC_DIR))
        except OSError:
            allowed = set()
        if name not in allowed or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith("."):
            return error_response(not_found("no such file"))
        ext = os.path.splitext(name)[1]
        ctype = _CONTENT_TYPES.get(ext) or mimetypes.guess_type(name)[0] or "application/octet-stream"
        with open(os.path.join(STATIC_DIR, name), "rb") as f:
            body = f.read()
        return Response(body, content_type=ctype,
                        headers=[("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-cache")])

    # ------------------------------------------------------------ the run table

    def _table(self) -> dict:
        """run -> {"files": {name: (FileInfo, Snapshot|None)}}"""
        runs: dict[str, dict] = {}
        for info, snap in self._loader.listing():
            runs.setdefault(info.run, {})[info.name] = (info, snap)
        return runs

    @staticmethod
    def _span_key(span: Optional[str]):
        return (span is not None, int(span) if span and span.isdigit() else 0, span or "")

    def _select(self, args, prefix: str = "", run_key: str = "run") -> tuple[FileInfo, Optional[str], dict]:
        """(file, step, selection echo) from run/worker/span/file/step parameters."""
        run = name_param(args, run_key, required=True, what="run")
        worker = name_param(args, prefix + "worker", what="worker")
        span = name_param(args, prefix + "span", what="span")
        fname = name_param(args, prefix + "file", what="file")
        step = step_param(args, prefix + "step")
        table = self._table()
        files = table.get(run)
        if files is None:
            raise not_found(f"no run '{run}'", param=run_key)
        if fname is not None:
            hit = files.get(fname)
            if hit is None:
                raise not_found(f"no trace file '{fname}' in run '{run}'", param=prefix + "file")
            info = hit[0]
        else:
            infos = [f[0] for f in files.values()]
            if worker is None and span is None:      # default: prefer traces that analysed fine
                good = [f[0] for f in files.values() if f[1] is not None and f[1].state == "ready"]
                infos = good or infos
            if worker is not None:
                infos = [i for i in infos if i.worker == worker]
                if not infos:
                    raise not_found(f"no worker '{worker}' in run '{run}'", param=prefix + "worker")
            else:
                first = sorted({i.worker for i in infos})[0]
                infos = [i for i in infos if i.worker == first]
            if span is not None:
                infos = [i for i in infos if (i.span or "") == span]
                if not infos:
                    raise not_found(f"no span '{span}' for that worker in run '{run}'", param=prefix + "span")
            info = sorted(infos, key=lambda i: (self._span_key(i.span), i.name))[-1]
        sel = {"run": info.run, "worker": info.worker, "span": info.span, "file": info.name, "step": step}
        return info, step, sel

    def _get(self, args, need_index: bool, prefix: str = "", run_key: str = "run",
             wait: float = WAIT_SUMMARY) -> tuple[Optional[Snapshot], dict, Optional[Response]]:
        """The analysed entry, or a response saying why it is not there (yet)."""
        info, step, sel = self._select(args, prefix, run_key)
        if step is not None:
            base = self._loader.request(info.rel, None, need_index=False, wait=wait)
            if base is None:
                raise not_found(f"trace '{info.rel}' disappeared")
            if base.state != "ready":
                return None, sel, self._pending(base, sel)
            steps = [s.get("name") for s in base.summary.get("steps") or []]
            if step not in steps:
                raise not_found(f"no step '{step}' in this trace (steps: {', '.join(steps) or 'none'})",
                                param=prefix + "step")
        snap = self._loader.request(info.rel, step, need_index=need_index, wait=wait)
        if snap is None:
            raise not_found(f"trace '{info.rel}' disappeared")
        if snap.state == "ready" and (snap.loaded is not None or not need_index):
            return snap, sel, None
        return None, sel, self._pending(snap, sel)

    def _pending(self, snap: Snapshot, sel: dict) -> Response:
        if snap.state in ("error", "incomplete"):     # incomplete: a truncated file (loader.STATES)
            return json_response({"state": snap.state, "error": snap.message, "selection": sel})
        state = snap.state if snap.state != "ready" else "loading"
        return json_response({"state": state, "message": snap.message, "selection": sel,
                              "counts": self._loader.counts()}, code=202)

    # ------------------------------------------------------------ routes

    def _runs(self, request) -> Response:
        self._loader.poke() if request.args.get("rescan") == "1" else None
        out = []
        for run, files in sorted(self._table().items()):
            rows, workers = [], {}
            for name, (info, snap) in sorted(files.items()):
                rows.append(self._file_json(info, snap))
                workers.setdefault(info.worker, []).append(info)
            wl = []
            for w in sorted(workers):
                spans = sorted(workers[w], key=lambda i: (self._span_key(i.span), i.name))
                wl.append({"worker": w, "spans": [{"span": i.span, "index": n + 1, "file": i.name}
                                                   for n, i in enumerate(spans)]})
            counts = {}
            for r in rows:
                counts[r["state"]] = counts.get(r["state"], 0) + 1
            out.append({"run": run, "files": rows, "workers": wl, "counts": counts})
        st = self._loader
        return json_response({"logdir": st.logdir, "runs": out, "counts": st.counts(),
                              "scanned": st.first_scan_done.is_set(), "scan_error": st.scan_error,
                              "skipped_links": st.scan_skipped_links, "poll_secs": st.poll_secs})

    @staticmethod
    def _file_json(info: FileInfo, snap: Optional[Snapshot]) -> dict:
        d = {"file": info.name, "path": info.rel, "worker": info.worker, "span": info.span,
             "size": info.size, "mtime": info.mtime_ns / 1e9,
             "state": snap.state if snap else "waiting", "message": snap.message if snap else None,
             "seconds": snap.seconds if snap else None}
        if snap is not None and snap.progress is not None:
            d["progress"] = snap.progress
        if snap is not None and snap.state == "ready" and snap.summary is not None:
            s = snap.summary
            d["device"] = (s.get("device") or {}).get("label")
            d["steps"] = [x.get("name") for x in s.get("steps") or []]
            d["attention_time_us"] = s.get("attention_time_us")
            d["notices"] = [n.get("code") for n in s.get("notices") or []]
        return d

    def _status(self, request) -> Response:
        st = self._loader.status()
        st["version"] = __version__
        st["config_warnings"] = self.config_warnings
        return json_response(st)

    def _summary(self, request) -> Response:
        snap, sel, pending = self._get(request.args, need_index=False)
        if pending is not None:
            return pending
        return json_response({"state": "ready", "selection": sel, "seconds": snap.seconds,
                              "summary": snap.summary})

    def _phases(self, request) -> Response:
        snap, sel, pending = self._get(request.args, need_index=False)
        if pending is not None:
            return pending
        s = snap.summary
        by_dir: dict = {}
        for p in s.get("phases") or []:
            d = by_dir.setdefault(p["direction"], {"direction": p["direction"], "time_us": 0.0, "phases": []})
            d["time_us"] = round(d["time_us"] + (p.get("time_us") or 0.0), 3)
            d["phases"].append({"phase": p["phase"], "label": p["label"], "time_us": p.get("time_us")})
        return json_response({"state": "ready", "selection": sel, "phases": s.get("phases") or [],
                              "directions": [by_dir[k] for k in ("forward", "backward") if k in by_dir],
                              "attention_time_us": s.get("attention_time_us"),
                              "thresholds": s.get("thresholds")})

    def _kernel_query(self, args) -> KernelQuery:
        sort = choice_param(args, "sort", SORT_KEYS, "dur_us")
        order = choice_param(args, "order", ("asc", "desc"), None)
        return KernelQuery(
            offset=int_param(args, "offset", 0, 0, 1 << 40),
            limit=int_param(args, "limit", 50, 1, 1000),
            sort=sort,
            descending=(order == "desc") if order else sort in ("dur_us", "flops", "bytes", "intensity",
                                                                   "achieved_flops_per_s", "achieved_bytes_per_s",
                                                                   "compute_util", "memory_util", "occupancy_pct"),
            phase=list_param(args, "phase", PHASES),
            direction=choice_param(args, "direction", ("forward", "backward")),
            bound=list_param(args, "bound", BOUNDS),
            kind=choice_param(args, "kind", ("kernel", "memcpy", "memset")),
            scope=choice_param(args, "scope", ("attention", "all", "other"), "attention"),
            q=text_param(args, "q", max_len=4096),    # a whole C++ kernel name (the timeline and roofline search by it)
        )

    def _kernels(self, request) -> Response:
        q = self._kernel_query(request.args)       # validate before any waiting
        snap, sel, pending = self._get(request.args, need_index=True)
        if pending is not None:
            return pending
        t = snap.loaded.kernels
        out = query_kernels(t, q)
        out.update({"state": "ready", "selection": sel, "facets": facets(t)})
        return json_response(out)

    def _kernel(self, request) -> Response:
        kid = int_param(request.args, "id", -1, 0, 1 << 40)
        if kid < 0:
            raise bad("missing parameter 'id'")
        snap, sel, pending = self._get(request.args, need_index=True)
        if pending is not None:
            return pending
        row = find_kernel(snap.loaded.kernels, kid)
        if row is None:
            raise not_found(f"no kernel with id {kid}", param="id")
        return json_response({"state": "ready", "selection": sel, "kernel": row})

    def _roofline(self, request) -> Response:
        scope = choice_param(request.args, "scope", ("attention", "all", "other"), "attention")
        group = bool_param(request.args, "group", True)
        limit = int_param(request.args, "limit", 2000, 1, 20000)
        snap, sel, pending = self._get(request.args, need_index=True)
        if pending is not None:
            return pending
        out = roofline(snap.loaded, scope=scope, group=group, limit=limit)
        out.update({"state": "ready", "selection": sel})
        return json_response(out)

    def _compare(self, request) -> Response:
        args = request.args
        b, bsel, bpend = self._get(args, need_index=True, prefix="base_", run_key="base")
        n, nsel, npend = self._get(args, need_index=True, prefix="new_", run_key="new")
        if bpend is not None or npend is not None:
            states = {"base": b.state if b else _state_of(bpend), "new": n.state if n else _state_of(npend)}
            if "error" in states.values() or "incomplete" in states.values():
                errs = {k: _error_of(p) for k, p in (("base", bpend), ("new", npend)) if p is not None}
                return json_response({"state": "error", "states": states, "errors": errs,
                                      "selection": {"base": bsel, "new": nsel}})
            return json_response({"state": "loading", "states": states,
                                  "selection": {"base": bsel, "new": nsel}}, code=202)
        # the engine's comparison (compare.py), as `tb-attention compare` computes it
        out = compare_reports(dict(b.summary, kernels=b.loaded.kernels), dict(n.summary, kernels=n.loaded.kernels))
        out.update({"state": "ready", "selection": {"base": bsel, "new": nsel}})
        return json_response(out)

    def _report(self, request) -> Response:
        snap, sel, pending = self._get(request.args, need_index=True, wait=10.0)
        if pending is not None:
            return pending
        report = snap.loaded.report()
        try:
            from .jsonout import iter_json          # the engine's streaming writer (as the CLI's)
            data = iter_json({"traces": [report]})
        except ImportError:
            from .report import envelope
            data = envelope([report])
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", sel["file"])[:120] or "trace"
        if sel.get("step"):
            base += "." + re.sub(r"[^A-Za-z0-9]+", "", sel["step"])
        return json_response(data, headers=[("Content-Disposition", f'attachment; filename="{base}.report.json"')])


    def _memory(self, request) -> Response:
        """The report's ``memory`` block (memory/; docs/report-schema.md)."""
        snap, sel, pending = self._get(request.args, need_index=False)
        if pending is not None:
            return pending
        s = snap.summary
        return json_response({"state": "ready", "selection": sel, "memory": s.get("memory"),
                              "attention_time_us": s.get("attention_time_us"), "steps": s.get("steps") or [],
                              "step": s.get("step")})

    def _annotated(self, request) -> Response:
        """The trace with attention phases as timeline tracks (annotate.py), streamed as a
        download. The file comes from the run table only (``_select``), never from a path."""
        from .annotate import AnnotateError, annotated_name, build_events, kernel_rows, locate, splice
        info, _, _ = self._select(request.args)
        snap, sel, pending = self._get(request.args, need_index=True, wait=10.0)
        if pending is not None:
            return pending
        max_bytes = self._loader.options.max_bytes
        # The only route that reads a trace at request time: the file (or a directory above it)
        # may have been swapped for a symlink out of the logdir since the last scan.
        if not still_inside(info, self._loader.logdir):
            raise not_found("no such trace file")
        try:
            st = os.stat(info.abspath)
        except OSError:
            raise not_found("the trace file is gone") from None
        if (st.st_size, st.st_mtime_ns) != (info.size, info.mtime_ns):
            raise HttpError(409, "the trace changed since it was analysed; try again in a few seconds")
        try:
            close_at, entries, pids = locate(info.abspath, max_bytes)
        except AnnotateError as e:
            raise HttpError(409, f"cannot annotate this trace: {e}") from None
        events, _ = build_events(kernel_rows(snap.loaded.report()), pids)
        gz = info.name.endswith(".gz")
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", annotated_name(info.name))[:160] or "trace.attention.json"
        body = splice(info.abspath, close_at, entries, events, gz, max_bytes)
        return Response(body, direct_passthrough=True,
                        content_type="application/gzip" if gz else "application/json",
                        headers=[("Content-Disposition", f'attachment; filename="{name}"'),
                                 ("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-cache")])


def _state_of(resp: Response) -> str:
    import json
    try:
        return json.loads(resp.get_data()).get("state", "loading")
    except ValueError:
        return "loading"


def _error_of(resp: Response) -> Optional[str]:
    import json
    try:
        return json.loads(resp.get_data()).get("error")
    except ValueError:
        return None

