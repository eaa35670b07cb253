"""Call layers and files a question crosses from its route handler to `haystack.Pipeline.run`, before and after
the question service (#27).

For each tree (a git revision, extracted to a temporary folder, and this checkout) a subprocess imports docqa from
that tree, starts the in-process test server (SQLite, scripted model; `tests/support/server_app.py`), asks one
warm-up question and then the measured one, `POST /v1/query` and `POST /v1/chat/completions` with the
`no_retrieval` strategy (every strategy takes the same path up to its graph), and captures two stacks:
- the request side, when the run is handed to the query thread pool (`loop.run_in_executor` with an executor);
- the worker thread, at the first `Pipeline.run`.
A layer is one frame of the project's own code (not the tests', not a library's) from the route handler on; files
are the distinct project files among those frames. The frames are printed (`--frames`), so the path can be read.
Besides the stack, a profiler records every project function called from the route handler's start to
`Pipeline.run` (validation, selection, the cache, the audit's started row ...): "called" counts those functions
and the files they live in; and, over the whole request, how often the question was validated
(`validate_question`), the options were validated (`validate_options`) and a config was hashed (`config_hash`).

Usage:
    .venv/bin/python bench/request_path_depth.py                     # before: the parent of the service's commit
    .venv/bin/python bench/request_path_depth.py --before 2b462fc    # any revision
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
SERVICE_MODULE = "docqa/questions/service.py"
ROUTES = {"query": "/v1/query", "chat": "/v1/chat/completions", "follow_up": "/v1/chat/completions"}
# Counted over the whole request: (file suffix, function) -> label.
COUNTED = {("pipelines/base.py", "validate_question"): "question validated",
           ("pipelines/options.py", "validate_options"): "options validated",
           ("pipelines/base.py", "config_hash"): "config hashed"}


# ---- the driver ---------------------------------------------------------------------------------------------


def _default_before() -> str:
    """The revision before the question service was added (its first commit's parent)."""
    found = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--", SERVICE_MODULE], cwd=CHECKOUT,
                           capture_output=True, text=True, check=True).stdout.split()
    if not found:
        raise SystemExit(f"{SERVICE_MODULE} is not committed yet: pass --before REV")
    return f"{found[-1]}^"


def _extract(rev: str, into: Path) -> None:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=CHECKOUT, capture_output=True, check=True)
    tar_path = into / "tree.tar"
    tar_path.write_bytes(archive.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into / "tree", filter="data")


def _measure_tree(root: Path) -> dict[str, dict[str, list[str]]]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", str(root)], env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"measuring {root} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _report(label: str, figures: dict[str, dict[str, list[str]]], show_frames: bool) -> None:
    for route, found in figures.items():
        frames, called = found["frames"], found["called"]
        files = {frame.split(":")[0] for frame in frames}
        called_files = {function.split(":")[0] for function in called}
        counts = ", ".join(f"{name} {n}x" for name, n in found["counts"].items())
        print(f"{label:7} {route:9} {ROUTES[route]:22} stack: layers {len(frames):3}  files {len(files):3}   "
              f"called: functions {len(called):4}  files {len(called_files):3}   {counts}")
        if show_frames:
            for frame in frames:
                print(f"            {frame}")
            print(f"          called: {', '.join(called)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="the revision measured as 'before' (default: before the service)")
    parser.add_argument("--after", help="the revision measured as 'after' (default: this checkout as it is)")
    parser.add_argument("--frames", action="store_true", help="print every frame of each path and the functions "
                        "called")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure)))
        return
    before = args.before or _default_before()
    with tempfile.TemporaryDirectory() as tmp:
        _extract(before, Path(tmp) / "before")
        old = _measure_tree(Path(tmp) / "before" / "tree")
        if args.after:
            _extract(args.after, Path(tmp) / "after")
        new = _measure_tree(Path(tmp) / "after" / "tree" if args.after else CHECKOUT)
    print(f"before = {before}; after = {args.after or f'this checkout ({CHECKOUT})'}")
    _report("before", old, args.frames)
    _report("after", new, args.frames)


# ---- inside the measured tree -------------------------------------------------------------------------------


def _import_from(root: Path) -> None:
    """Import `docqa` (and its mapped subpackages) from `root`, whatever is installed."""
    import importlib.abc
    import importlib.util

    setuptools = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {name: root / folder for name, folder in setuptools["package-dir"].items()}

    class TreeFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
            if fullname in folders:
                init = folders[fullname] / "__init__.py"
                return importlib.util.spec_from_file_location(fullname, init,
                                                              submodule_search_locations=[str(folders[fullname])])
            return None

    sys.meta_path.insert(0, TreeFinder())
    for name in [n for n in sys.modules if n == "docqa" or n.startswith("docqa.")]:
        del sys.modules[name]


def _own(filename: str, root: Path) -> bool:
    """A file of the project's own code: in the tree, not a test, a benchmark or an installed library."""
    return filename.startswith(str(root) + "/") and not filename.startswith(
        tuple(str(root / folder) for folder in ("tests", "bench", ".venv")))


def _project_frames(stack: list, root: Path, start_name: str | None) -> list[str]:
    """`file:line function` of the stack's project frames (tests excluded), from the frame named `start_name`."""
    own = [f for f in stack if _own(f.filename, root)]
    if start_name is not None:
        starts = [i for i, f in enumerate(own) if f.name == start_name]
        own = own[starts[0]:] if starts else own
    return [f"{Path(f.filename).relative_to(root)}:{f.lineno} {f.name}" for f in own]


def measure(root: Path) -> dict[str, dict[str, list[str]]]:
    root = root.resolve()
    _import_from(root)
    import asyncio
    import traceback

    from fastapi.testclient import TestClient
    from haystack import Pipeline

    from tests.support.scripted_chat import ScriptedChatGenerator
    from tests.support.server_app import auth, build_test_app

    captured: dict[str, list] = {}
    called: set[str] = set()
    recording = {"handler": "", "on": False, "request": False}
    counts = dict.fromkeys(COUNTED.values(), 0)
    original_run = Pipeline.run
    original_in_executor = asyncio.base_events.BaseEventLoop.run_in_executor

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        if event != "call":
            return
        code = frame.f_code
        if not recording["on"]:
            if code.co_name == recording["handler"] and "/routes/" in code.co_filename and not recording["request"]:
                recording["on"] = recording["request"] = True
            elif recording["request"]:
                _count(code)
                return
            else:
                return
        _count(code)
        if code.co_name.startswith("<") or not _own(code.co_filename, root):
            return
        called.add(f"{Path(code.co_filename).relative_to(root)}:{code.co_name}")

    def _count(code) -> None:  # type: ignore[no-untyped-def]
        for (suffix, name), label in COUNTED.items():
            if code.co_name == name and code.co_filename.endswith(suffix):
                counts[label] += 1

    def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        recording["on"] = False
        captured.setdefault("thread", traceback.extract_stack()[:-1])
        return original_run(self, *args, **kwargs)

    def run_in_executor(self, executor, func, *args):  # type: ignore[no-untyped-def]
        if executor is not None:  # the query thread pool (asyncio.to_thread passes None)
            captured.setdefault("request", traceback.extract_stack()[:-1])

        def profiled(*call_args):  # type: ignore[no-untyped-def]
            sys.setprofile(profile)
            try:
                return func(*call_args)
            finally:
                sys.setprofile(None)

        return original_in_executor(self, executor, profiled, *args)

    results: dict[str, dict[str, list[str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        app, keys = build_test_app(Path(tmp), ScriptedChatGenerator(default="Paris is the capital."))
        bodies = {
            "query": {"question": "What is the capital of France?", "pipeline": "no_retrieval"},
            "chat": {"model": "no_retrieval", "messages": [{"role": "user", "content": "What is the capital?"}]},
            # A follow-up, rewritten against the earlier turn before the run.
            "follow_up": {"model": "no_retrieval", "messages": [
                {"role": "user", "content": "Where is Halcyon headquartered?"},
                {"role": "assistant", "content": "In Oslo."},
                {"role": "user", "content": "and when was it founded?"}]},
        }
        import threading

        threading.setprofile(profile)  # the event loop's thread starts with the client
        with TestClient(app) as client:
            for route, body in bodies.items():
                warm = client.post(ROUTES[route], json=body, headers=auth(keys["alice"]))
                if warm.status_code != 200:
                    raise SystemExit(f"{ROUTES[route]} answered {warm.status_code}: {warm.text}")
                captured.clear()
                called.clear()
                counts.update(dict.fromkeys(counts, 0))
                handler = "query" if route == "query" else "chat_completions"  # the route handlers' names
                recording.update(handler=handler, on=False, request=False)
                Pipeline.run, asyncio.base_events.BaseEventLoop.run_in_executor = run, run_in_executor
                try:
                    client.post(ROUTES[route], json=body, headers=auth(keys["alice"]))
                finally:
                    Pipeline.run, asyncio.base_events.BaseEventLoop.run_in_executor = original_run, original_in_executor
                frames = _project_frames(captured.get("request", []), root, handler)
                frames += _project_frames(captured.get("thread", []), root, None)
                results[route] = {"frames": frames, "called": sorted(called), "counts": dict(counts)}
                recording.update(handler="", on=False, request=False)
        threading.setprofile(None)
    return results


if __name__ == "__main__":
    main()
