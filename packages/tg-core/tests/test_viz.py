"""VIZ=1: each schedule's graph and each kernel's passes are recorded as data, saved as JSON and served locally."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tinygrad import Context, Device, Tensor
from tinygrad.helpers import VIZ, ContextVar
from tinygrad.viz import record, server

README_MATMUL = "(Tensor.rand(64, 64) @ Tensor.rand(64, 64)).realize()"


@pytest.fixture(autouse=True)
def _fresh_recording() -> Iterator[None]:
    # nothing recorded by another test leaks in, and nothing recorded here is saved (or served) when pytest exits
    record.clear()
    yield
    record.clear()


@pytest.fixture
def compiles_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty runner cache for the test, so that kernels another test compiled go through get_program again."""
    dev = Device[Device.DEFAULT]
    if getattr(dev, "_runners", None) is None:
        pytest.skip(f"{Device.DEFAULT} keeps no runner cache to empty")
    monkeypatch.setattr(dev, "_runners", {})


def record_matmul() -> dict[str, Any]:
    with Context(VIZ=1):
        (Tensor.rand(64, 64) @ Tensor.rand(64, 64)).realize()
    return record.trace()


def check_graph(nodes: list[dict[str, Any]], graph: dict[str, Any]) -> None:
    """A pass names nodes of its table, and every node it holds names its sources by id."""
    assert graph["ids"] and len(graph["ids"]) <= graph["total"]
    for i in graph["ids"]:
        node = nodes[i]
        assert node["id"] == i and isinstance(node["op"], str) and isinstance(node["dtype"], str)
        assert node["arg"] is None or isinstance(node["arg"], str)
        assert node["src"] is not None and all(0 <= s < len(nodes) for s in node["src"])


def test_viz_is_a_context_var() -> None:
    assert ContextVar.registry["VIZ"] is VIZ
    with Context(VIZ=1):
        assert VIZ.value == 1
    assert VIZ.value == int(os.environ.get("VIZ", 0))


def test_matmul_records_every_pass_of_each_kernel(compiles_again: None) -> None:
    trace = record_matmul()
    assert trace["format"] == "tinygrad-viz" and trace["kernels"]
    for k in trace["kernels"]:
        names = [p["name"] for p in k["passes"]]
        assert len(names) >= 3 and names[:2] == ["ast", "lowered"] and "linearized" in names
        assert k["source"] and k["name"] in k["source"] and k["program"]["name"] == k["name"]
        for p in k["passes"]:
            check_graph(k["nodes"], p)
    matmul = [k for k in trace["kernels"] if k["name"] == "r_64_64_64"]
    assert matmul, [k["name"] for k in trace["kernels"]]
    ast_ops = {k["nodes"][i]["op"] for i in matmul[-1]["passes"][0]["ids"]}
    assert {"SINK", "STORE", "REDUCE_AXIS"} <= ast_ops
    linear = next(p for p in matmul[-1]["passes"] if p["name"] == "linearized")
    assert linear["linear"] and "RANGE" in {matmul[-1]["nodes"][i]["op"] for i in linear["ids"]}
    # a node a pass leaves alone keeps its id (UOps are hash-consed): the PARAM leaves survive lowering
    ast_params = {i for i in matmul[-1]["passes"][0]["ids"] if matmul[-1]["nodes"][i]["op"] == "PARAM"}
    lowered_ids = set(matmul[-1]["passes"][1]["ids"])
    assert ast_params and ast_params <= lowered_ids


def test_schedule_records_the_tensor_graph_and_links_its_kernels(compiles_again: None) -> None:
    trace = record_matmul()
    assert trace["schedules"]
    last = trace["schedules"][-1]
    check_graph(last["nodes"], last["graph"])
    ops = {last["nodes"][i]["op"] for i in last["graph"]["ids"]}
    assert "SINK" in ops and "REDUCE_AXIS" in ops
    assert any("shape" in last["nodes"][i] for i in last["graph"]["ids"])
    kernel_asts = {k["ast"] for k in trace["kernels"]}
    assert [it for it in last["items"] if it["kind"] == "kernel" and it["ast"] in kernel_asts]


def test_trace_round_trips_through_json(tmp_path: Path, compiles_again: None) -> None:
    trace = record_matmul()
    path = record.save(str(tmp_path / "viz.json"))
    assert path == str(tmp_path / "viz.json")
    loaded = json.loads(Path(path).read_text())
    assert loaded["kernels"] == json.loads(json.dumps(trace["kernels"]))
    assert loaded["schedules"] == json.loads(json.dumps(trace["schedules"]))
    assert server.load(path)["kernels"] == loaded["kernels"]


def test_off_records_nothing_and_never_calls_in(monkeypatch: pytest.MonkeyPatch, compiles_again: None) -> None:
    def called(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a VIZ hook ran with VIZ=0")

    for name in ("record_kernel", "record_schedule", "record_rewrite"):
        monkeypatch.setattr(record, name, called)
    with Context(VIZ=0):
        (Tensor.rand(64, 64) @ Tensor.rand(64, 64)).realize()
    assert not record.has_records()
    assert record.trace()["kernels"] == [] and record.trace()["schedules"] == []


def test_large_graphs_are_truncated_with_a_marker(monkeypatch: pytest.MonkeyPatch, compiles_again: None) -> None:
    monkeypatch.setattr(record, "MAX_NODES", 12)
    trace = record_matmul()
    matmul = next(k for k in trace["kernels"] if k["name"] == "r_64_64_64")
    for p in matmul["passes"]:
        assert len(p["ids"]) <= 12
    cut = [p for p in matmul["passes"] if p["truncated"]]
    assert cut and all(p["total"] > 12 for p in cut)
    ast = matmul["passes"][0]
    assert matmul["nodes"][ast["ids"][-1]]["op"] == "SINK"  # truncation keeps the output end of the graph


def test_kernel_limit_counts_what_it_drops(monkeypatch: pytest.MonkeyPatch, compiles_again: None) -> None:
    monkeypatch.setattr(record, "MAX_KERNELS", 1)
    with Context(VIZ=1):
        product = (Tensor.rand(64, 64) @ Tensor.rand(64, 64)).realize()
        (product.exp() + 1).sum(0).realize()  # a second kernel
    trace = record.trace()
    assert len(trace["kernels"]) == 1 and trace["dropped"]["kernels"] >= 1


def fetch(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_server_serves_the_page_and_the_trace_on_loopback(compiles_again: None) -> None:
    trace = record_matmul()
    srv = server.start(trace, port=0, browser=False)
    try:
        assert srv.url.startswith("http://127.0.0.1:") and srv.port > 0
        status, page = fetch(srv.url)
        assert status == 200 and b"<title>tinygrad viz</title>" in page and b"viz.js" in page
        for name in ("index.html", "viz.js", "viz.css"):
            assert fetch(srv.url + name)[0] == 200
        status, body = fetch(srv.url + "trace.json")
        assert status == 200 and json.loads(body)["kernels"] == json.loads(json.dumps(trace["kernels"]))
        assert fetch(srv.url + "record.py")[0] == 404  # only the static files, never the package's other files
        assert fetch(srv.url + "../record.py")[0] == 404
        other_host = urllib.request.Request(srv.url + "trace.json", headers={"Host": "example.com"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(other_host, timeout=10)
        assert refused.value.code == 403
    finally:
        srv.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(srv.url, timeout=5)


def test_serve_saves_the_trace_and_returns_a_running_server(tmp_path: Path, compiles_again: None) -> None:
    import tinygrad.viz

    record_matmul()
    path = tmp_path / "served.json"
    with tinygrad.viz.serve(path=str(path), port=0, browser=False, block=False) as srv:
        assert json.loads(path.read_text())["kernels"]
        assert fetch(srv.url + "trace.json")[0] == 200


def test_a_taken_port_is_reported() -> None:
    with server.start({"kernels": [], "schedules": []}, port=0, browser=False) as first:
        with pytest.raises(OSError, match="choose another port"):
            server.start({"kernels": [], "schedules": []}, port=first.port, browser=False)


def test_a_profile_trace_opens_as_a_timeline(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"traceEvents": [{"name": "k", "ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 2}]}))
    data = server.load(str(path))
    assert data["kernels"] == [] and data["profile"]["traceEvents"][0]["name"] == "k"
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    from tinygrad.viz.__main__ import main

    assert main([str(bad), "--no-browser"]) == 2
    assert main([str(tmp_path / "missing.json"), "--no-browser"]) == 2


@pytest.mark.parametrize(("value", "tty", "serves"), [("0", True, False), ("1", False, True), ("", False, False),
                                                       ("", True, True)])
def test_serving_at_exit_needs_a_terminal_unless_told(monkeypatch: pytest.MonkeyPatch, value: str, tty: bool,
                                                      serves: bool) -> None:
    class Stdin:
        def isatty(self) -> bool:
            return tty

    monkeypatch.setenv("VIZ_SERVE", value)
    monkeypatch.setattr(sys, "stdin", Stdin())
    assert record.should_serve() is serves


def test_browser_opens_only_with_a_display(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(server.webbrowser, "open", lambda url: opened.append(url))
    monkeypatch.setattr(server.sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("VIZ_NO_BROWSER", raising=False)
    with server.start({"kernels": []}, port=0):
        pass
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("VIZ_NO_BROWSER", "1")
    with server.start({"kernels": []}, port=0):
        pass
    assert opened == []
    monkeypatch.delenv("VIZ_NO_BROWSER")
    with server.start({"kernels": []}, port=0) as srv:
        assert opened == [srv.url]


def test_a_viz_program_saves_at_exit_and_says_how_to_open_it(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    env = {**os.environ, "VIZ": "1", "VIZ_SERVE": "0", "VIZ_PATH": str(path), "PROFILE": "1",
           "PROFILE_PATH": str(tmp_path / "profile.json"), "TINYGRAD_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("DEBUG", None)
    program = f"from tinygrad import Tensor\n{README_MATMUL}\n"
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"python -m tinygrad.viz {path}" in done.stderr and "VIZ: serving" not in done.stderr
    trace = json.loads(path.read_text())
    matmul = next(k for k in trace["kernels"] if k["name"] == "r_64_64_64")
    assert matmul["timings"]["count"] == 1 and matmul["timings"]["mean_us"] > 0  # PROFILE timed the launch
    assert trace["profile"]["traceEvents"]


def test_viz_off_writes_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "VIZ": "0", "VIZ_PATH": str(tmp_path / "trace.json")}
    code = textwrap.dedent(f"""
        import sys
        from tinygrad import Tensor
        {README_MATMUL}
        assert "tinygrad.viz" not in sys.modules, "VIZ=0 imported the recorder"
    """)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / "trace.json").exists() and "VIZ" not in done.stderr
