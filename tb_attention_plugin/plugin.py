"""The **Attention** tab of TensorBoard: a table of routes over :mod:`.server`.

Registered through the ``tensorboard_plugins`` entry point. TensorBoard loads ``/index.js`` (an
ES module built from ``frontend/``) in an iframe and calls its ``render()``; the module talks
only to the JSON routes below, under ``/data/plugin/attention/``. Every route is documented in
docs/plugin.md. Each route parses its parameters, finds the trace (:mod:`.server.selection`)
and returns what a pure function of :mod:`.server.views` builds.

Traces are found and analysed in the background (:mod:`.server.loader`); routes only look
results up, so the server answers while big traces load. Nothing here imports the analysis
engine: a worker imports it when it analyses a trace.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from tensorboard.plugins import base_plugin
from werkzeug import wrappers
from werkzeug.wrappers import Request, Response

from . import __version__, settings
from .server import overview, timeline, views
from .server.loader import Loader
from .server.params import HttpError, bad, bool_param, choice_param, error_response, int_param, json_response
from .server.selection import NotReady, fetch, fetch_state, runs_listing
from .server.static import static_response

log = logging.getLogger("tb_attention_plugin")

PLUGIN_NAME = "attention"
WsgiApp = Callable[..., Any]


@wrappers.Request.application
def _static(request: Request) -> Response:
    return static_response(request.path)


def _ranks(plugin: Any, request: Request) -> Response:
    from .server.ranks import ranks_route  # imports the engine's summaries: not at TensorBoard start

    return ranks_route(plugin, request)


class AttentionPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: Any, loader: Optional[Loader] = None):
        self._logdir = getattr(context, "logdir", None) or ""
        self.config_warnings: list[str] = []
        self._loader: Optional[Loader] = None
        if loader is not None:
            self._loader = loader
        elif self._logdir and "://" not in self._logdir:
            env = settings.from_env()
            self.config_warnings = list(env.warnings)
            self._loader = Loader(self._logdir, env.options, **env.loader_kwargs())
        elif self._logdir:
            self.config_warnings.append(f"only local log directories are supported, not {self._logdir}")
        for w in self.config_warnings:
            log.warning("tb-attention: %s", w)
        if self._loader is not None:
            self._loader.start()

    # ------------------------------------------------------------ TensorBoard API

    def get_plugin_apps(self) -> dict[str, Any]:
        return {
            "/index.js": _static,
            "/index.css": _static,
            "/static/*": _static,
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
            "/replay_script": self._route(self._replay_script),
            "/timeline": self._route(lambda r: timeline.route(self, r)),
            "/overview": self._route(lambda r: overview.route(self, r)),
            "/ranks": self._route(lambda r: _ranks(self, r)),
        }

    def is_active(self) -> bool:
        """Cheap: true once the background scan has found a trace (no disk access here)."""
        if self._loader is None:
            return False
        self._loader.first_scan_done.wait(0.2)
        return bool(self._loader.files())

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Attention", disable_reload=False)

    def close(self) -> None:
        if self._loader is not None:
            self._loader.stop()

    # ------------------------------------------------------------ plumbing

    @property
    def loader(self) -> Loader:
        if self._loader is None:
            raise HttpError(503, "no local log directory: start tensorboard with --logdir DIR")
        return self._loader

    def _route(self, handler: Callable[[Request], Response]) -> WsgiApp:
        @wrappers.Request.application
        def app(request: Request) -> Response:
            if request.method not in ("GET", "HEAD"):
                return error_response(HttpError(405, "only GET is supported"))
            try:
                return handler(request)
            except NotReady as e:  # still loading, or failed: its state, not an HTTP error
                return json_response(e.pending.body, code=e.pending.code)
            except HttpError as e:
                return error_response(e)
            except Exception:  # a bug in one route must not take the server down
                log.exception("tb-attention: %s failed", request.path)
                return error_response(HttpError(500, "internal error (see the tensorboard log)"))

        return app

    # ------------------------------------------------------------ routes

    def _runs(self, request: Request) -> Response:
        if request.args.get("rescan") == "1":
            self.loader.poke()
        return json_response(runs_listing(self.loader))

    def _status(self, request: Request) -> Response:
        return json_response(dict(self.loader.status(), version=__version__, config_warnings=self.config_warnings))

    def _summary(self, request: Request) -> Response:
        return json_response(views.summary(*fetch(self.loader, request.args, need_index=False)))

    def _phases(self, request: Request) -> Response:
        return json_response(views.phases(*fetch(self.loader, request.args, need_index=False)))

    def _kernels(self, request: Request) -> Response:
        q = views.kernel_query(request.args)  # validate before any waiting
        return json_response(views.kernels(*fetch(self.loader, request.args, need_index=True), q))

    def _kernel(self, request: Request) -> Response:
        kid = int_param(request.args, "id", -1, 0, 1 << 40)
        if kid < 0:
            raise bad("missing parameter 'id'")
        return json_response(views.kernel(*fetch(self.loader, request.args, need_index=True), kid))

    def _roofline(self, request: Request) -> Response:
        scope = choice_param(request.args, "scope", views.SCOPES, "attention") or "attention"
        group = bool_param(request.args, "group", True)
        limit = int_param(request.args, "limit", 2000, 1, 20000)
        snap, sel = fetch(self.loader, request.args, need_index=True)
        return json_response(views.roofline_points(snap, sel, scope, group, limit))

    def _compare(self, request: Request) -> Response:
        base = fetch_state(self.loader, request.args, need_index=True, prefix="base_", run_key="base")
        new = fetch_state(self.loader, request.args, need_index=True, prefix="new_", run_key="new")
        body, code = views.compare(base, new)
        return json_response(body, code=code)

    def _report(self, request: Request) -> Response:
        data, name = views.report_download(*fetch(self.loader, request.args, need_index=True, wait=10.0))
        return json_response(data, headers=[("Content-Disposition", f'attachment; filename="{name}"')])

    def _memory(self, request: Request) -> Response:
        return json_response(views.memory(*fetch(self.loader, request.args, need_index=False)))

    def _replay_script(self, request: Request) -> Response:
        """The replay script of the trace's attention calls (tb-attention replay --emit), a download."""
        text, name = views.replay_script(*fetch(self.loader, request.args, need_index=True, wait=10.0))
        return Response(
            text,
            content_type="text/x-python; charset=utf-8",
            headers=[
                ("Content-Disposition", f'attachment; filename="{name}"'),
                ("X-Content-Type-Options", "nosniff"),
                ("Cache-Control", "no-cache"),
            ],
        )

    def _annotated(self, request: Request) -> Response:
        """The trace with attention phases as timeline tracks, streamed as a download. The file
        comes from the run table only, never from a path."""
        loader = self.loader
        snap, sel = fetch(loader, request.args, need_index=True, wait=10.0)
        body, name, gz = views.annotated_download(sel.info, snap, loader.logdir, loader.options.max_bytes)
        return Response(
            body,
            direct_passthrough=True,
            content_type="application/gzip" if gz else "application/json",
            headers=[
                ("Content-Disposition", f'attachment; filename="{name}"'),
                ("X-Content-Type-Options", "nosniff"),
                ("Cache-Control", "no-cache"),
            ],
        )
