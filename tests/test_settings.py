"""Configuration at the edge (tb_attention_plugin/settings.py): one parser per kind of value, the
same rules for the CLI and the plugin, and no environment read anywhere else."""

from __future__ import annotations

import ast
import dataclasses
import os

import pytest

from helpers import ROOT
from tb_attention_plugin import settings
from tb_attention_plugin.options import Options
from tb_attention_plugin.settings import SETTINGS, parse_duration, parse_size

PKG = os.path.join(ROOT, "tb_attention_plugin")
# The edges: they may read the environment. Everything else gets its values passed in.
EDGES = ("settings.py", "cli.py", "plugin.py", "server" + os.sep)


@pytest.mark.parametrize(
    "text, want",
    [
        ("16G", 16 << 30),
        ("16GB", 16 << 30),
        ("16GiB", 16 << 30),
        ("16 gib", 16 << 30),
        ("512M", 512 << 20),
        ("1.5G", 3 << 29),
        ("64k", 64 << 10),
        ("2T", 2 << 40),
        ("100B", 100),
        ("1048576", 1 << 20),
        (" 7 ", 7),
    ],
)
def test_sizes_use_binary_units_whatever_their_spelling(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["", "abc", "G", "0", "0G", "0.5", "-1", "-1G", "nan", "inf", "1e400", "16 GHz"])
def test_a_size_is_at_least_one_byte(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_zero_is_a_size_only_where_it_means_something():
    assert parse_size("0", allow_zero=True) == 0
    with pytest.raises(ValueError):
        parse_size("-1", allow_zero=True)
    assert settings.from_env({"TB_ATTENTION_PARALLEL_MIN_BYTES": "0"}).options.parallel_min_bytes == 0


@pytest.mark.parametrize(
    "text, want", [("3", 3.0), ("0.5", 0.5), ("2s", 2.0), ("500ms", 0.5), ("1m", 60.0), ("1H", 3600.0)]
)
def test_durations(text, want):
    assert parse_duration(text) == want


@pytest.mark.parametrize("text", ["", "soon", "0", "-1", "nan", "inf", "3 days"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_the_environment_builds_options_and_loader_settings():
    s = settings.from_env(
        {
            "TB_ATTENTION_PEAKS": "bf16=500,memory=3",
            "TB_ATTENTION_PEAK_BASIS": "datasheet",
            "TB_ATTENTION_MODULE_PATTERN": "MyAttn",
            "TB_ATTENTION_ANNOTATION_PATTERN": "attn_region",
            "TB_ATTENTION_MAX_BYTES": "2GB",
            "TB_ATTENTION_JOBS": "1",
            "TB_ATTENTION_PARALLEL_MIN_BYTES": "1M",
            "TB_ATTENTION_DEBUG": "1",
            "TB_ATTENTION_CACHE_DIR": "/tmp/c",
            "TB_ATTENTION_NO_CACHE": "yes",
            "TB_ATTENTION_POLL_SECS": "500ms",
            "TB_ATTENTION_WORKERS": "3",
            "TB_ATTENTION_WORKER_MODE": "thread",
            "TB_ATTENTION_MEMORY_MB": "64",
        }
    )
    assert not s.warnings
    o = s.options
    assert o.user_peaks["entries"][0]["flops"] == {"bf16": 500e12} and o.peak_basis == "datasheet"
    assert (o.module_pattern, o.annotation_pattern) == ("MyAttn", "attn_region")
    assert (o.max_bytes, o.read_jobs, o.parallel_min_bytes, o.debug) == (2 << 30, 1, 1 << 20, True)
    assert s.loader_kwargs() == {
        "poll_secs": 0.5,
        "workers": 3,
        "mode": "thread",
        "memory_budget": 64 << 20,
        "cache_dir": "/tmp/c",
        "use_cache": False,
    }


def test_an_empty_environment_gives_the_defaults():
    s = settings.from_env({"XDG_CACHE_HOME": "/x"})
    assert s.options == Options() and not s.warnings
    assert s.loader_kwargs() == {
        "poll_secs": 3.0,
        "workers": 1,
        "mode": "process",
        "memory_budget": 1 << 30,
        "cache_dir": "/x/tb-attention",
        "use_cache": True,
    }


@pytest.mark.parametrize(
    "name, value",
    [
        ("TB_ATTENTION_PEAKS", "bogus=1"),
        ("TB_ATTENTION_PEAKS", "/no/such/peaks.json"),
        ("TB_ATTENTION_PEAK_BASIS", "guess"),
        ("TB_ATTENTION_MODULE_PATTERN", "("),
        ("TB_ATTENTION_ANNOTATION_PATTERN", "[a"),
        ("TB_ATTENTION_MAX_BYTES", "0"),
        ("TB_ATTENTION_MAX_BYTES", "-5G"),
        ("TB_ATTENTION_MAX_BYTES", "lots"),
        ("TB_ATTENTION_JOBS", "two"),
        ("TB_ATTENTION_JOBS", "0"),
        ("TB_ATTENTION_PARALLEL_MIN_BYTES", "-1"),
        ("TB_ATTENTION_POLL_SECS", "0.01"),
        ("TB_ATTENTION_POLL_SECS", "x"),
        ("TB_ATTENTION_WORKERS", "99"),
        ("TB_ATTENTION_WORKER_MODE", "fiber"),
        ("TB_ATTENTION_MEMORY_MB", "1G"),
    ],
)
def test_a_bad_environment_value_is_a_warning_and_the_default(name, value):
    s = settings.from_env({name: value, "XDG_CACHE_HOME": "/x"})
    assert len(s.warnings) == 1 and s.warnings[0].startswith(f"{name} ignored: "), s.warnings
    assert s == dataclasses.replace(settings.from_env({"XDG_CACHE_HOME": "/x"}), warnings=s.warnings)


def test_the_cli_skips_the_plugins_own_variables():
    s = settings.from_env({"TB_ATTENTION_WORKERS": "many", "TB_ATTENTION_MAX_BYTES": "1G"}, plugin=False)
    assert not s.warnings and s.options.max_bytes == 1 << 30 and s.workers == 1


def test_flags_override_the_environment_with_the_same_parsers():
    env = settings.from_env({"TB_ATTENTION_MAX_BYTES": "1G", "TB_ATTENTION_PEAK_BASIS": "datasheet"})
    s = settings.with_flags(env, {"--max-bytes": "16GB", "--peak-basis": None, "--no-cache": True})
    assert s.options.max_bytes == 16 << 30 and s.options.peak_basis == "datasheet" and s.no_cache
    for flag, bad in (
        ("--max-bytes", "0"),
        ("--max-bytes", "-1"),
        ("--max-bytes", "lots"),
        ("--module-pattern", "("),
        ("--peaks", "bogus=1"),
    ):
        with pytest.raises(ValueError, match=f"^{flag}: "):
            settings.with_flags(env, {flag: bad})


def test_every_flag_of_the_table_exists_on_the_cli():
    from tb_attention_plugin.cli import build_parser

    text = build_parser().parse_args(["analyze", "x"])
    for s in SETTINGS:
        if s.flag:
            assert hasattr(text, s.flag[2:].replace("-", "_")), s.flag


def test_options_change_with_replace_and_keep_every_field():
    o = Options(module_pattern="X", max_bytes=5, read_jobs=1, debug=True)
    o2 = dataclasses.replace(o, step="3")
    assert o2.step == "3" and dataclasses.replace(o2, step=None) == o
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.step = "4"  # type: ignore[misc]
    # how a trace is read never changes a report: the cache key leaves those fields out
    assert Options().key() == Options(max_bytes=5, read_jobs=1, parallel_min_bytes=0, debug=True).key()
    assert Options().key() != Options(step="3").key()


def _reads_environment(tree: ast.AST) -> list[int]:
    """Lines that touch os.environ / os.getenv / os.putenv (any spelling of the import)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "environb", "getenv", "putenv", "unsetenv"):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(a.name in ("environ", "environb", "getenv", "putenv", "unsetenv") for a in node.names):
                lines.append(node.lineno)
    return lines


def test_no_module_outside_the_edges_reads_the_environment():
    offenders = []
    for d, dirs, files in os.walk(PKG):
        dirs[:] = [x for x in dirs if x not in ("__pycache__", "static")]
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, PKG)
            if rel in EDGES or rel.startswith(EDGES[-1]):
                continue
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), path)
            offenders += [f"{rel}:{n}" for n in _reads_environment(tree)]
    assert not offenders, f"read the environment outside settings.py/cli.py/plugin.py/server/: {offenders}"


def test_the_walk_would_see_a_read():
    assert _reads_environment(ast.parse("import os\nx = os.environ.get('A')")) == [2]
    assert _reads_environment(ast.parse("from os import getenv\n")) == [1]
    assert _reads_environment(ast.parse("import os\nos.getenv('A')")) == [2]


def test_debug_reaches_the_engine_through_options(tmp_path, monkeypatch):
    import json

    from tb_attention_plugin import analyze
    from tb_attention_plugin.cli import main

    p = tmp_path / "t.json"
    p.write_text(
        json.dumps(
            {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0}]}
        )
    )

    def boom(*a, **k):
        raise KeyError("surprise")

    monkeypatch.setattr(analyze, "analyze_trace", boom)
    assert analyze.analyze_path(str(p), Options())["error"].startswith("internal error: KeyError")
    with pytest.raises(KeyError):
        analyze.analyze_path(str(p), Options(debug=True))
    monkeypatch.setenv("TB_ATTENTION_DEBUG", "1")  # the CLI reads it through settings.py
    with pytest.raises(KeyError):
        main(["analyze", "--no-cache", str(p)])
    monkeypatch.setenv("TB_ATTENTION_DEBUG", "0")
    assert main(["analyze", "--no-cache", str(p)]) == 2


@pytest.mark.parametrize(
    "value, code, err",
    [
        ("16GB", 0, ""),
        ("16GiB", 0, ""),
        ("512m", 0, ""),
        ("0", 2, "error: --max-bytes: not a positive size: '0'\n"),
        ("-1G", 2, "error: --max-bytes: not a positive size: '-1G'\n"),
        ("lots", 2, "error: --max-bytes: not a size: 'lots' (e.g. 4G, 512M)\n"),
    ],
)
def test_the_cli_takes_sizes_by_the_same_rule(value, code, err, capsys):
    from helpers import sample
    from tb_attention_plugin.cli import main

    try:
        got = main(["analyze", "--no-cache", "-f", "json", f"--max-bytes={value}", sample("seed_mha")])
    except SystemExit as e:  # a bad flag stops before any analysis
        got = e.code
    assert got == code and capsys.readouterr().err == err


def test_a_bad_environment_value_is_one_warning_line_for_the_cli(monkeypatch, capsys):
    from helpers import sample
    from tb_attention_plugin.cli import main

    monkeypatch.setenv("TB_ATTENTION_PEAK_BASIS", "guess")
    monkeypatch.setenv("TB_ATTENTION_WORKERS", "many")  # the plugin's own: not the CLI's business
    assert main(["analyze", "--no-cache", "-f", "json", sample("seed_mha")]) == 0
    assert capsys.readouterr().err == (
        "warning: TB_ATTENTION_PEAK_BASIS ignored: 'guess' must be measured or datasheet; using measured\n"
    )
