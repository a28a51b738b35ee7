"""tinygrad.export's WebGPU bundle run in headless Chromium: the exported JavaScript module loads the weights,
builds the pipelines and runs the kernels on the browser's WebGPU adapter (software, SwiftShader, where there is
no GPU), and its outputs are compared with the Python run's; the generated index.html is run too.

The page reports back by POSTing its results to the test's own HTTP server, so nothing depends on how long the
browser takes. Chromium offers WebGPU on Linux only with --enable-unsafe-webgpu; where it still offers no adapter,
the test skips and says so.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from browser_support import find_chromium

pytest.importorskip("tg_backend_webgpu.renderer", reason="tg-backend-webgpu (the WGSL renderer) is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "tg-nn" / "tests"))
from export_models import MODELS, capture

BROWSER_TIMEOUT = 180

HARNESS = """<!doctype html><html><body><script type="module">
let result;
try {
  const { load, manifest } = await import("./net.js");
  const model = await load("net.bin");
  const raw = new Uint8Array(await (await fetch("net_inputs.raw")).arrayBuffer());
  let at = 0;
  const inputs = manifest.inputs.map((s) => { const x = raw.slice(at, at + s.nbytes); at += s.nbytes; return x; });
  const outs = await model.run(inputs);
  // two runs at once: the second waits for the first (they share the model's buffers)
  const [again, third] = await Promise.all([model.run(inputs), model.run(inputs)]);
  // wrong weights files are refused by load, each with its reason
  const good = await (await fetch("net.bin")).arrayBuffer();
  const magic = good.slice(0), count = good.slice(0);
  new Uint8Array(magic)[0] = 0;
  new DataView(count).setUint32(12, 1000, true);
  const refused = [];
  for (const w of [new ArrayBuffer(4), good.slice(0, good.byteLength - 1), magic, count]) {
    try { await load(w, model.device); refused.push("accepted"); } catch (e) { refused.push(e.message); }
  }
  // the generated page, in a frame: its status says when it is done
  const frame = document.createElement("iframe");
  frame.src = "index.html?inputs=1";
  document.body.appendChild(frame);
  let page = null;
  for (let i = 0; i < 600 && page === null; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const status = frame.contentDocument && frame.contentDocument.getElementById("status");
    if (status && status.dataset.done) page = {done: status.dataset.done, status: status.textContent,
                                               outputs: frame.contentDocument.getElementById("outputs").textContent};
  }
  result = {ok: true, outputs: outs.map((o) => Array.from(o, Number)),
            again: again.map((o) => Array.from(o, Number)), third: third.map((o) => Array.from(o, Number)),
            page, refused};
} catch (e) { result = {ok: false, error: String(e && e.stack || e)}; }
await fetch("result", {method: "POST", body: JSON.stringify(result)});
</script></body></html>
"""


class _Server:
    """Serves a folder and keeps the body of the first POST."""

    def __init__(self, folder: Path):
        posted: list[bytes] = []

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                super().__init__(*args, directory=str(folder), **kwargs)

            def do_POST(self) -> None:
                posted.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:  # type: ignore[no-untyped-def]
                pass

        self.posted = posted
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def run_in_chromium(folder: Path, page: str, profile: Path) -> dict:
    exe = find_chromium()
    if exe is None:
        pytest.skip("no Chromium here (Debian: apt-get install -y chromium); the WebGPU bundle is not run")
    server = _Server(folder)
    # --enable-unsafe-webgpu: Chromium on Linux offers WebGPU (here SwiftShader's software Vulkan) only with it
    cmd = [exe, "--headless", "--no-sandbox", "--disable-dev-shm-usage", "--no-first-run", "--enable-unsafe-webgpu",
           f"--user-data-dir={profile}", f"{server.url}/{page}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + BROWSER_TIMEOUT
        while not server.posted and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the browser and the helper processes it started
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
        server.close()
    if not server.posted:
        raise AssertionError(f"the page reported nothing within {BROWSER_TIMEOUT} s; Chromium's stderr:\n"
                             f"{err.decode(errors='replace')[-3000:]}")
    return json.loads(server.posted[0])


@pytest.mark.parametrize("name", ["mlp", "mnist", "resnet", "llama"])
def test_webgpu_bundle_in_chromium_matches_python(name: str, tmp_path: Path) -> None:
    from tinygrad.export import export_webgpu

    fn, inputs = MODELS[name]()
    expected = capture(fn, inputs)
    out = tmp_path / "bundle"
    manifest = export_webgpu(fn, str(out))
    assert {"net.js", "net.bin", "index.html"} <= {p.name for p in out.iterdir()}
    (out / "net_inputs.raw").write_bytes(b"".join(np.ascontiguousarray(x).tobytes() for x in inputs))
    (out / "harness.html").write_text(HARNESS)
    result = run_in_chromium(out, "harness.html", tmp_path / "profile")
    if not result["ok"] and "no adapter" in result["error"]:
        pytest.skip("headless Chromium offers no WebGPU adapter here, even with --enable-unsafe-webgpu (no Vulkan "
                    "driver it can use, software SwiftShader included)")
    assert result["ok"], result["error"]
    # other kernels (WGSL, another compiler and another machine's float unit): equal within float tolerance
    for got, again, third, want, spec in zip(result["outputs"], result["again"], result["third"], expected,
                                             manifest["outputs"]):
        assert again == got and third == got  # the same kernels on the same inputs: the same bits
        got = np.asarray(got, dtype=want.dtype).reshape(spec["shape"])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    short, truncated, magic, count = result["refused"]
    assert "not a tinygrad.export weights file" in short and "not a tinygrad.export weights file" in magic
    assert "expected" in truncated and "another model" in count
    page = result["page"]
    assert page is not None and page["done"] == "ok", page
    shown = json.loads(page["outputs"])
    np.testing.assert_allclose(np.asarray(shown[0]["values"], dtype=np.float64), result["outputs"][0])


SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from tinygrad import Tensor
from export_models import MODELS
fn, arrays = MODELS[{name!r}]()
model = fn
example_inputs = [Tensor(a) for a in arrays]
"""


def test_captured_on_the_webgpu_backend(tmp_path: Path) -> None:
    """`DEV=WEBGPU python -m tinygrad.export ... --target webgpu --save-io`: captured on the WEBGPU backend (wgpu on
    lavapipe here), run in the browser on its inputs, compared with that backend's outputs."""
    env = {**os.environ, "DEV": "WEBGPU"}
    probe = subprocess.run([sys.executable, "-c", "from tinygrad import Device; Device['WEBGPU']"], env=env,
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip(f"the WEBGPU backend does not open here: {probe.stderr.strip().splitlines()[-1:]}")
    tests = Path(__file__).resolve().parents[1] / "packages" / "tg-nn" / "tests"
    (tmp_path / "model.py").write_text(SCRIPT.format(tests=str(tests), name="resnet"))
    out = tmp_path / "bundle"
    r = subprocess.run([sys.executable, "-m", "tinygrad.export", str(tmp_path / "model.py"), "--target", "webgpu",
                        "--out", str(out), "--save-io"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    (out / "harness.html").write_text(HARNESS)
    result = run_in_chromium(out, "harness.html", tmp_path / "profile")
    if not result["ok"] and "no adapter" in result["error"]:
        pytest.skip("headless Chromium offers no WebGPU adapter here, even with --enable-unsafe-webgpu")
    assert result["ok"], result["error"]
    expected = np.frombuffer((out / "net_expected.raw").read_bytes(), np.float32)
    np.testing.assert_allclose(np.asarray(result["outputs"][0], np.float32), expected, rtol=1e-4, atol=1e-5)
