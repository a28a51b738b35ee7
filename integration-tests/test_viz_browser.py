"""VIZ end to end: a VIZ=1 program writes its trace, `python -m tinygrad.viz` serves it, and a headless Chromium
draws it (the kernel list, an SVG graph with nodes, the source), checked in the DOM after the page's JS ran.

Chromium is driven through its own command line (`--headless --dump-dom`/`--screenshot`, with a virtual-time
budget that lets the page fetch the trace and draw before the dump): no WebDriver, so nothing to pin. Screenshots go
to the test's tmp dir, and also to $VIZ_SCREENSHOT_DIR when set. Skipped where no Chromium is installed (Debian:
`apt-get install -y chromium`).
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from browser_support import find_chromium, stop_server

PROGRAM = "from tinygrad import Tensor\n(Tensor.rand(64, 64) @ Tensor.rand(64, 64)).realize()\n"
BROWSER_TIMEOUT = 120
PNG = b"\x89PNG\r\n\x1a\n"


def free_port() -> int:
    from tinygrad.viz.server import free_port as pick

    return pick()


def wait_until_served(url: str, proc: subprocess.Popen[str], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"python -m tinygrad.viz exited with {proc.returncode}:\n{out}\n{err}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    pytest.fail(f"nothing served at {url} after {seconds} s")


class Chromium:
    def __init__(self, exe: str, profile_dir: Path):
        self.exe, self.profile_dir = exe, profile_dir

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [self.exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               "--hide-scrollbars", f"--user-data-dir={self.profile_dir}", "--window-size=1600,1000",
               "--virtual-time-budget=15000", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=BROWSER_TIMEOUT, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}"
        return done

    def dom(self, url: str) -> str:
        return self.run("--dump-dom", url).stdout

    def screenshot(self, url: str, path: Path) -> Path:
        self.run(f"--screenshot={path}", url)
        assert path.read_bytes()[:8] == PNG, f"no PNG written to {path}"
        return path


def element(dom: str, tag: str, id_: str) -> str:
    found = re.search(rf'<{tag} id="{id_}"[^>]*>(.*?)</{tag}>', dom, re.S)
    assert found, f"no <{tag} id={id_}> in the page"
    return found.group(1)


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Chromium:
    exe = find_chromium()
    if exe is None:
        pytest.skip("no Chromium here (Debian: apt-get install -y chromium); the page is not checked in a browser")
    return Chromium(exe, tmp_path_factory.mktemp("chromium-profile"))


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("viz")
    path = tmp / "trace.json"
    env = {**os.environ, "VIZ": "1", "VIZ_SERVE": "0", "VIZ_PATH": str(path), "PROFILE": "1",
           "PROFILE_PATH": str(tmp / "profile.json")}
    env.pop("DEBUG", None)
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"python -m tinygrad.viz {path}" in done.stderr
    return path


def serve(trace_file: Path) -> tuple[str, subprocess.Popen[str]]:
    """`python -m tinygrad.viz TRACE --port P --no-browser`, once it answers."""
    port = free_port()
    env = {**os.environ}
    env.pop("DISPLAY", None)  # belt and braces beside --no-browser: never open a real browser from a test
    env.pop("WAYLAND_DISPLAY", None)
    proc = subprocess.Popen([sys.executable, "-m", "tinygrad.viz", str(trace_file), "--port", str(port),
                             "--no-browser"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_served(url, proc)
    except BaseException:
        stop_server(proc, drain_pipes=True)
        raise
    return url, proc


@pytest.fixture(scope="module")
def served(trace_file: Path):
    url, proc = serve(trace_file)
    try:
        yield url, proc
    finally:
        stop_server(proc, drain_pipes=True)


def screenshot_dirs(tmp_path: Path) -> list[Path]:
    dirs = [tmp_path]
    if extra := os.environ.get("VIZ_SCREENSHOT_DIR"):
        Path(extra).mkdir(parents=True, exist_ok=True)
        dirs.append(Path(extra))
    return dirs


def test_the_page_draws_the_kernels_graph_and_source(chromium: Chromium, served, trace_file: Path,
                                                     tmp_path: Path) -> None:
    url, _ = served
    trace = json.loads(trace_file.read_text())
    names = {k["name"] for k in trace["kernels"]}
    assert "r_64_64_64" in names
    dom = chromium.dom(url)
    assert re.search(r'<body[^>]*data-ready="1"', dom), "the page's script did not finish drawing"
    listed = text_of(element(dom, "ul", "kernel-list"))
    assert all(name in listed for name in names) and "schedule 0" in listed
    graph = element(dom, "svg", "graph")
    nodes = re.findall(r'<g class="node [^"]*"', graph)
    last = trace["kernels"][-1]  # the page opens on the last kernel, at its last pass
    assert len(nodes) == len(last["passes"][-1]["ids"]) > 10
    assert graph.count('class="edge') > 10
    source = text_of(element(dom, "pre", "source"))
    assert last["name"] in source and source.strip()
    for d in screenshot_dirs(tmp_path):
        chromium.screenshot(url, d / "viz_kernel.png")


def test_pass_diff_schedule_and_timeline_views(chromium: Chromium, served, trace_file: Path, tmp_path: Path) -> None:
    url, _ = served
    trace = json.loads(trace_file.read_text())
    k = next(k for k in trace["kernels"] if k["name"] == "r_64_64_64")
    optimized = next(i for i, p in enumerate(k["passes"]) if p["name"] == "optimized")
    diff_url = f"{url}#kernel={k['id']}&pass={optimized}&diff=1"
    dom = chromium.dom(diff_url)
    assert re.search(r'<g class="node [^"]*(added|changed)', element(dom, "svg", "graph")), "no change highlighted"
    assert "added" in text_of(element(dom, "div", "diff-summary"))
    schedule_dom = chromium.dom(f"{url}#schedule={len(trace['schedules']) - 1}")
    assert "REDUCE_AXIS" in element(schedule_dom, "svg", "graph")  # the tensor graph, before lowering
    timeline_dom = chromium.dom(f"{url}#tab=timeline")
    assert 'class="ev kernel"' in element(timeline_dom, "svg", "timeline")
    for d in screenshot_dirs(tmp_path):
        chromium.screenshot(diff_url, d / "viz_diff.png")
        chromium.screenshot(f"{url}#schedule={len(trace['schedules']) - 1}", d / "viz_schedule.png")
        chromium.screenshot(f"{url}#tab=timeline", d / "viz_timeline.png")


def test_ctrl_c_stops_the_server(trace_file: Path) -> None:
    url, proc = serve(trace_file)
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        stop_server(proc, drain_pipes=True)  # only acts if it is still running: killed, so no server outlives the test
    assert proc.returncode == 0 and "VIZ: stopped" in err
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)
