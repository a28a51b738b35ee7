"""A plan (plan.py) as a WebGPU bundle for a browser: `<prefix>.js` (an ES module holding the WGSL kernels), the
weights file `<prefix>.bin` (the C export's format, docs/export.md), `<prefix>.json` (the manifest) and an
`index.html` that runs the model once and shows its outputs.

The kernels are the WEBGPU backend's WGSL (tg_backend_webgpu.renderer.WGSLRenderer), rendered from the captured
kernel ASTs for WebGPU's default limits (256 invocations and 16 KiB of workgroup memory per workgroup, no optional
feature), which every adapter offers; the launch shape of each is fixed here as the backend's runtime picks it.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from tinygrad.export.c import weights_blob, write_atomic
from tinygrad.export.plan import Copy, ExportError, Kernel, Plan, make_plan

#: the most workgroups per launch dimension WebGPU guarantees (maxComputeWorkgroupsPerDimension's default)
MAX_WORKGROUPS = 65535


def _renderer() -> Any:
    try:
        from tg_backend_webgpu.renderer import DEFAULT_MAX_INVOCATIONS, DEFAULT_WORKGROUP_STORAGE, WGSLRenderer
    except ImportError as e:
        raise ExportError(f"export_webgpu renders the kernels with tg-backend-webgpu's WGSL renderer, which is not "
                          f"installed ({e}); pip install tg-backend-webgpu") from e
    return WGSLRenderer(frozenset(), max_workgroup_invocations=DEFAULT_MAX_INVOCATIONS,
                        workgroup_storage=DEFAULT_WORKGROUP_STORAGE)


def _grid(blocks: int) -> tuple[int, int, int]:
    """Workgroup counts (x, y, z) holding `blocks` workgroups, as the WebGPU backend launches them (the kernel
    returns from the spare ones)."""
    from tg_backend_webgpu.device import launch_grid  # installed: _renderer() checked it

    try:
        return launch_grid(blocks, MAX_WORKGROUPS)
    except ValueError:
        raise ExportError(f"a launch of {blocks} workgroups is larger than WebGPU allows; export a smaller model") \
            from None


def render_webgpu(plan: Plan, prefix: str = "net") -> tuple[str, str, bytes, dict]:
    """(the JavaScript module, index.html, the weights file, the manifest) of a plan."""
    from tinygrad.codegen import get_program

    if plan.variables:
        raise ExportError(f"TinyJit function {plan.name} takes symbolic Variables ({', '.join(plan.variables)}); "
                          f"the WebGPU export writes fixed launch sizes only. Capture with plain ints, or use "
                          f"export_c, whose program takes them at run time")
    renderer = _renderer()
    from tg_backend_webgpu.device import default_local_size  # installed: _renderer() checked it
    kernels: dict[Any, int] = {}
    programs: list[dict] = []
    steps: list[list] = []
    for step in plan.steps:
        if isinstance(step, Copy):
            if step.dest != step.src:
                steps.append(["copy", step.src, step.dest, (step.nbytes + 3) // 4 * 4])
            continue
        assert isinstance(step, Kernel)
        k = kernels.get(step.ast)
        if k is None:
            try:
                spec = get_program(step.ast, renderer)
            except Exception as e:  # the renderer's refusals (a dtype without a WGSL type, loop caps, index range)
                raise ExportError(f"TinyJit function {plan.name}: a kernel cannot be written as WGSL for a browser "
                                  f"({type(e).__name__}: {e})") from e
            gs = tuple(spec.global_size or ())
            local = tuple(spec.local_size) if spec.local_size is not None else default_local_size(gs)
            blocks = math.prod(-(-g // s) for g, s in zip(gs, local)) if gs else 1
            k = kernels[step.ast] = len(programs)
            programs.append({"name": spec.name, "src": spec.src, "local": list(local), "grid": list(_grid(blocks)),
                             "bindings": len(spec.param_indices), "empty": bool(gs) and math.prod(gs) == 0,
                             "slots": list(spec.param_indices)})
        if programs[k]["empty"]:
            continue
        steps.append(["kernel", k, [step.storages[slot] for slot in programs[k]["slots"]]])
    blob, _ = weights_blob(plan)
    weights = [[s.index, s.nbytes] for s in plan.storages if s.kind == "weight"]
    model: dict[str, Any] = {
        "name": plan.name, "storages": [(s.nbytes + 3) // 4 * 4 or 4 for s in plan.storages],
        "weights": weights, "payload": len(blob) - 32,
        "inputs": [{"name": n, "storage": p.storage, "shape": list(p.shape), "dtype": p.dtype.name,
                    "nbytes": p.nbytes} for n, p in zip(plan.input_names, plan.inputs)],
        "outputs": [{"name": n, "storage": p.storage, "shape": list(p.shape), "dtype": p.dtype.name,
                     "nbytes": p.nbytes} for n, p in zip(plan.output_names, plan.outputs)],
        "kernels": [{k: v for k, v in p.items() if k not in ("empty", "slots")} for p in programs],
        "steps": steps,
    }
    js = JS_TEMPLATE.replace("__MODEL__", json.dumps(model, indent=1)).replace("__PREFIX__", prefix)
    html = HTML_TEMPLATE.replace("__PREFIX__", prefix).replace("__NAME__", plan.name)
    manifest = {"format": "tinygrad.export.webgpu", "version": 1, "function": plan.name, "prefix": prefix,
                "weights_file": f"{prefix}.bin", "module": f"{prefix}.js", "page": "index.html",
                "kernels": len(programs),
                "inputs": [{k: v for k, v in p.items() if k != "storage"} for p in model["inputs"]],
                "outputs": [{k: v for k, v in p.items() if k != "storage"} for p in model["outputs"]]}
    return js, html, blob, manifest


def export_webgpu(jit: Any, out_dir: str, prefix: str = "net", input_names: list[str] | None = None) -> dict:
    """Write, into `out_dir`, for a TinyJit function that has captured (called at least twice): `<prefix>.js` (an
    ES module: `await load(url)` gives a model whose `run(inputs)` returns the outputs), `<prefix>.bin` (the
    weights), `<prefix>.json` (the manifest) and `index.html` (runs the model once on zeros, or on the inputs
    in `<prefix>_inputs.raw` when the page's URL says `?inputs=1`). Serve the folder over HTTP (a page opened from
    a file may not fetch). Returns the manifest."""
    plan = make_plan(jit, input_names)
    js, html, blob, manifest = render_webgpu(plan, prefix)
    os.makedirs(out_dir, exist_ok=True)
    write_atomic(os.path.join(out_dir, f"{prefix}.bin"), blob)
    write_atomic(os.path.join(out_dir, f"{prefix}.js"), js)
    write_atomic(os.path.join(out_dir, "index.html"), html)
    write_atomic(os.path.join(out_dir, f"{prefix}.webgpu.json"), json.dumps(manifest, indent=2) + "\n")
    return manifest


JS_TEMPLATE = r"""// Generated by tinygrad.export: a TinyJit function as WebGPU compute kernels (WGSL); docs/export.md.
//   import { load } from "./__PREFIX__.js";
//   const model = await load("__PREFIX__.bin");          // a URL; or pass an ArrayBuffer of the weights file
//   const [out] = await model.run([new Float32Array(...)]);  // inputs in C order, outputs as typed arrays
const MODEL = __MODEL__;

const ARRAYS = {float32: Float32Array, float64: Float64Array, int32: Int32Array, uint32: Uint32Array,
  int16: Int16Array, uint16: Uint16Array, int8: Int8Array, uint8: Uint8Array, bool: Uint8Array,
  int64: BigInt64Array, uint64: BigUint64Array, float16: Uint16Array, bfloat16: Uint16Array};
const MAGIC = "TGWEIGHT", VERSION = 1, HEADER = 32, ALIGN = 64;

export const manifest = {inputs: MODEL.inputs, outputs: MODEL.outputs};

function checkWeights(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.byteLength < HEADER || String.fromCharCode(...bytes.subarray(0, 8)) !== MAGIC ||
      view.getUint32(8, true) !== VERSION)
    throw new Error("not a tinygrad.export weights file (magic or version)");
  if (view.getUint32(12, true) !== MODEL.weights.length || Number(view.getBigUint64(16, true)) !== MODEL.payload)
    throw new Error("a weights file for another model (block count or size)");
  if (bytes.byteLength !== HEADER + MODEL.payload)
    throw new Error(`weights file of ${bytes.byteLength} bytes, expected ${HEADER + MODEL.payload}`);
}

export async function load(weights, device = null) {
  if (!navigator.gpu) throw new Error("this browser has no WebGPU (navigator.gpu)");
  // a kernel binds one storage buffer per tensor it touches: past WebGPU's default of 8, ask the adapter for more
  const bindings = Math.max(8, ...MODEL.kernels.map((k) => k.bindings));
  if (device === null) {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) throw new Error("WebGPU offers no adapter here");
    const most = adapter.limits.maxStorageBuffersPerShaderStage;
    if (most < bindings)
      throw new Error(`a kernel binds ${bindings} storage buffers; this adapter allows ${most} ` +
                      `(maxStorageBuffersPerShaderStage)`);
    device = await adapter.requestDevice({requiredLimits: {maxStorageBuffersPerShaderStage: bindings}});
  } else if (device.limits.maxStorageBuffersPerShaderStage < bindings) {
    throw new Error(`a kernel binds ${bindings} storage buffers; the device given allows ` +
                    `${device.limits.maxStorageBuffersPerShaderStage} (request maxStorageBuffersPerShaderStage)`);
  }
  const raw = weights instanceof ArrayBuffer ? weights : await (await fetch(weights)).arrayBuffer();
  const bytes = new Uint8Array(raw);
  checkWeights(bytes);
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const buffers = MODEL.storages.map((size) => device.createBuffer({size, usage}));
  let at = HEADER;
  for (const [storage, n] of MODEL.weights) {
    const padded = new Uint8Array(buffers[storage].size);
    padded.set(bytes.subarray(at, at + n));
    device.queue.writeBuffer(buffers[storage], 0, padded);
    at += Math.ceil(n / ALIGN) * ALIGN;
  }
  device.pushErrorScope("validation");
  const pipelines = MODEL.kernels.map((k) => {
    const module = device.createShaderModule({code: k.src});
    const layout = device.createBindGroupLayout({entries: Array.from({length: k.bindings}, (_, i) =>
      ({binding: i, visibility: GPUShaderStage.COMPUTE, buffer: {type: "storage"}}))});
    const constants = {};
    k.local.forEach((s, d) => { constants[`tg_local_${d}`] = s; });
    if (k.local.length) constants.tg_workgroup_size = k.local.reduce((a, b) => a * b, 1);
    const compute = {module, entryPoint: k.name, ...(k.local.length ? {constants} : {})};
    return {layout, pipeline: device.createComputePipeline({
      layout: device.createPipelineLayout({bindGroupLayouts: [layout]}), compute})};
  });
  const steps = MODEL.steps.map((s) => {
    if (s[0] === "copy") return s;
    const {layout, pipeline} = pipelines[s[1]];
    const group = device.createBindGroup({layout, entries: s[2].map((b, i) =>
      ({binding: i, resource: {buffer: buffers[b]}}))});
    return ["kernel", pipeline, group, MODEL.kernels[s[1]].grid];
  });
  const error = await device.popErrorScope();
  if (error) throw new Error(`WebGPU refused the kernels: ${error.message}`);
  const readback = MODEL.outputs.map((o) => device.createBuffer({size: buffers[o.storage].size,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST}));

  async function runOnce(inputs) {
    if (inputs.length !== MODEL.inputs.length)
      throw new Error(`${MODEL.inputs.length} inputs expected, got ${inputs.length}`);
    MODEL.inputs.forEach((spec, i) => {
      const x = inputs[i], n = x.byteLength;
      if (n !== spec.nbytes) throw new Error(`input ${spec.name}: ${n} bytes, expected ${spec.nbytes} ` +
                                             `(${spec.dtype}${JSON.stringify(spec.shape)})`);
      const padded = new Uint8Array(buffers[spec.storage].size);
      padded.set(new Uint8Array(x.buffer, x.byteOffset, n));
      device.queue.writeBuffer(buffers[spec.storage], 0, padded);
    });
    const encoder = device.createCommandEncoder();
    let pass = null;
    for (const s of steps) {
      if (s[0] === "copy") {
        if (pass) { pass.end(); pass = null; }
        encoder.copyBufferToBuffer(buffers[s[1]], 0, buffers[s[2]], 0, s[3]);
      } else {
        if (!pass) pass = encoder.beginComputePass();
        pass.setPipeline(s[1]);
        pass.setBindGroup(0, s[2]);
        pass.dispatchWorkgroups(...s[3]);
      }
    }
    if (pass) pass.end();
    MODEL.outputs.forEach((o, i) => encoder.copyBufferToBuffer(buffers[o.storage], 0, readback[i], 0,
                                                               readback[i].size));
    device.queue.submit([encoder.finish()]);
    const outs = [];
    for (const [i, o] of MODEL.outputs.entries()) {
      await readback[i].mapAsync(GPUMapMode.READ);
      const copy = readback[i].getMappedRange(0, readback[i].size).slice(0, o.nbytes);
      readback[i].unmap();
      outs.push(new ARRAYS[o.dtype](copy));
    }
    return outs;
  }
  // runs share the model's buffers: a run starts when the one before it has read its outputs back
  let last = Promise.resolve();
  function run(inputs) {
    const next = last.catch(() => {}).then(() => runOnce(inputs));
    last = next;
    return next;
  }
  return {run, device, manifest};
}
"""

HTML_TEMPLATE = r"""<!doctype html>
<html><head><meta charset="utf-8"><title>__NAME__ (tinygrad.export, WebGPU)</title></head>
<body>
<h1>__NAME__</h1>
<p id="status">loading</p>
<pre id="outputs"></pre>
<script type="module">
import { load, manifest } from "./__PREFIX__.js";
const status = document.getElementById("status"), shown = document.getElementById("outputs");
try {
  const model = await load("__PREFIX__.bin");
  let inputs = manifest.inputs.map((spec) => new Uint8Array(spec.nbytes));
  if (new URLSearchParams(location.search).has("inputs")) {
    // the raw inputs the Python exporter can save (--save-io): each input's bytes one after the other
    const raw = new Uint8Array(await (await fetch("__PREFIX___inputs.raw")).arrayBuffer());
    let at = 0;
    inputs = manifest.inputs.map((spec) => { const x = raw.slice(at, at + spec.nbytes); at += spec.nbytes; return x; });
  }
  const started = performance.now();
  const outputs = await model.run(inputs);
  status.textContent = `ran in ${(performance.now() - started).toFixed(1)} ms`;
  shown.textContent = JSON.stringify(outputs.map((o, i) => ({name: manifest.outputs[i].name,
    shape: manifest.outputs[i].shape, values: Array.from(o, Number)})));
  status.dataset.done = "ok";
} catch (e) {
  status.textContent = `error: ${e.message}`;
  status.dataset.done = "error";
}
</script>
</body></html>
"""
