"""Plugin discovery, end to end, in clean venvs (see conftest.py for how they are made).

The framework packages and the sample out-of-tree backend (tg-backend-pyref, in sample_backend/) are
installed from their own folders as regular wheels; extra plugins - a broken one, one built for
another device contract, one without a usable device - are generated here as tiny real packages and
pip-installed into a side folder that only the subprocess that needs them sees.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
from clean_venvs import FRAMEWORK, ROOT, SAMPLE_BACKEND, Venv, make_venv, tail

# every op-info table (test_ops*.py); they share tests/opinfo.py
OP_TESTS = sorted((ROOT / "packages/tg-core/tests").glob("test_ops*.py"))
#: the op tables run through PYREF's Python interpreter, slow on 2 cores: the bound only stops a hung run
OP_TESTS_TIMEOUT = 2400
#: the reference values of test_ops.py's gradient tests come from PyTorch; the version the noxfile uses
TORCH = "torch==2.13.0"

#: results of scripts/tensor_ops.py where the CPU backend is known to differ from the reference semantics.
#: Each entry is a CPU bug; fix it there and delete the entry (the test fails while an entry is stale).
KNOWN_CPU_DIVERGENCES: dict[str, str] = {
    # e.g. "half": "CPU renders float16 arithmetic without rounding each result to _Float16"
}


def _ok(proc, what: str) -> str:  # type: ignore[no-untyped-def]
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode}):\n{tail(proc.stdout + proc.stderr, 40)}"
    return proc.stdout


def _listing(venv: Venv, **kw: object) -> tuple[dict[str, tuple[str, str, str, str]], list[str], str]:
    """`python -m tinygrad.device`, parsed: {device: (package, version, contract, status)}, broken lines, text."""
    out = _ok(venv.run("-m", "tinygrad.device", **kw), "python -m tinygrad.device")  # type: ignore[arg-type]
    rows: dict[str, tuple[str, str, str, str]] = {}
    lines = out.splitlines()
    if any(line.startswith("device ") for line in lines):
        start = next(i for i, line in enumerate(lines) if line.startswith("device ")) + 1
        for line in lines[start:]:
            if not line.strip() or line.startswith("broken plugin"):
                break
            name, package, version, contract, status = line.split(None, 4)
            rows[name] = (package, version, contract, status)
    broken = [line for line in lines if line.startswith("broken plugin")]
    return rows, broken, out


# ---- generated third-party plugins ----

def _write_plugin(root: Path, dist: str, version: str, module: str, entry: str, source: str) -> Path:
    pkg = root / dist
    (pkg / "src" / module).mkdir(parents=True)
    (pkg / "src" / module / "__init__.py").write_text(textwrap.dedent(source))
    (pkg / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["hatchling==1.27.0"]
        build-backend = "hatchling.build"

        [project]
        name = "{dist}"
        version = "{version}"
        requires-python = ">=3.11"

        [project.entry-points."tinygrad.backends"]
        {entry} = "{module}"

        [tool.hatch.build.targets.wheel]
        packages = ["src/{module}"]
        """))
    return pkg


PLUGIN_SOURCES = {
    # (distribution, version, module, entry point name): module source
    ("tg-backend-broken", "0.3.0", "tg_backend_broken", "broken"): """\
        raise ImportError("tg_backend_broken needs libvendor.so.1, which is not installed")
        """,
    ("tg-backend-hookfails", "0.1.0", "tg_backend_hookfails", "hookfails"): """\
        from tinygrad.device import hookimpl

        @hookimpl
        def tinygrad_backends():
            raise RuntimeError("hookfails: the vendor driver reports version 0, need 3")
        """,
    ("tg-backend-future", "2.1.0", "tg_backend_future", "future"): """\
        from tinygrad.device import BackendInfo, hookimpl

        def _open(index):
            raise AssertionError("a refused backend must never be opened")

        @hookimpl
        def tinygrad_backends():
            return [BackendInfo(name="FUTURE", contract_version="3.0", open=_open, priority=1)]
        """,
    ("tg-backend-nodevice", "0.2.0", "tg_backend_nodevice", "nodevice"): """\
        from tinygrad.device import BackendInfo, hookimpl

        def _open(index):
            raise AssertionError("an unavailable backend must never be opened")

        @hookimpl
        def tinygrad_backends():
            return [BackendInfo(name="NODEV", contract_version="2.0", open=_open, priority=1,
                                check=lambda: "no NODEV accelerator found (looked for /dev/nodev0)")]
        """,
}


@pytest.fixture(scope="module")
def odd_plugins(tmp_path_factory: pytest.TempPathFactory, clean_venv: Venv, wheelhouse: Path) -> Path:
    """A folder holding four pip-installed plugin packages that misbehave in different ways."""
    root = tmp_path_factory.mktemp("plugins")
    dirs = [_write_plugin(root / "src", *key, textwrap.dedent(src)) for key, src in PLUGIN_SOURCES.items()]
    target = root / "site"
    clean_venv.install_target(target, *dirs, wheelhouse=wheelhouse)
    return target


# ---- the regular install ----

def test_regular_install_is_self_contained(clean_venv: Venv) -> None:
    out = _ok(clean_venv.code(textwrap.dedent("""\
        import importlib.metadata as md, tinygrad, tinygrad.codegen, tinygrad.renderer, tg_backend_cpu, tg_backend_pyref
        for m in (tinygrad, tinygrad.codegen, tinygrad.renderer, tg_backend_cpu, tg_backend_pyref):
            print("file", m.__name__, m.__file__)
        for p in tinygrad.__path__:
            print("file", "tinygrad.__path__", p)
        for d in md.distributions():
            print("dist", d.metadata["Name"], d.version)
        """)), "importing the installed packages")
    site = clean_venv.path.resolve()
    for line in out.splitlines():
        if line.startswith("file "):
            _, name, file = line.split(" ", 2)
            assert Path(file).resolve().is_relative_to(site), f"{name} comes from {file}, not from the venv {site}"
    dists = {line.split()[1].lower().replace("_", "-") for line in out.splitlines() if line.startswith("dist ")}
    ours = {"tg-core", "tg-compiler", "tg-backend-cpu", "tg-backend-pyref"}
    assert ours <= dists
    assert dists - ours - {"numpy", "pluggy", "llvmlite", "pip", "setuptools", "wheel"} == set(), f"unexpected: {dists}"
    _ok(clean_venv.pip("check"), "pip check")


def test_device_listing_shows_cpu_and_pyref(clean_venv: Venv) -> None:
    rows, broken, text = _listing(clean_venv)
    assert broken == [], text
    assert rows["PYREF"] == ("tg-backend-pyref", "0.1.0", "2.0", "available"), text
    package, version, contract, status = rows["CPU"]
    assert (package, version, contract) == ("tg-backend-cpu", "0.1.0", "2.0"), text
    # the CPU line names its compiler (the default LLVM path, with llvmlite's and LLVM's versions: no C compiler
    # needed), the vector width and the threads (bound to the CPUs when the pool uses them all)
    assert re.fullmatch(r"available \(compiler: llvm \(llvmlite [\d.]+, LLVM [\d.]+\)(, \d+-bit vectors)?, "
                        r"\d+ threads?(, one bound to each CPU)?\)", status), text
    # PYREF is an oracle: never the default while a real backend is usable
    assert "Device.DEFAULT = CPU" in text, text
    assert "tinygrad device contract 2.0" in text


def test_editable_install_of_the_framework(tmp_path: Path, wheelhouse: Path) -> None:
    """tg-core and tg-compiler share the `tinygrad` namespace; editable installs must merge it too."""
    env = make_venv(tmp_path / "venv")
    editable = [arg for p in (*FRAMEWORK, SAMPLE_BACKEND) for arg in ("-e", str(ROOT / p))]
    env.check_pip("install", "--no-index", "--find-links", wheelhouse, *editable, what="the editable install")
    out = _ok(env.code(textwrap.dedent("""\
        from tinygrad import Tensor, Device
        import tinygrad, tinygrad.codegen, tinygrad.renderer.cstyle, tg_backend_pyref
        print(tinygrad.__file__); print(tinygrad.codegen.__file__); print(tg_backend_pyref.__file__)
        print(sorted(Device.backends))
        print((Tensor([1.0, 2.0], device="PYREF") * 3).tolist())
        """)), "importing the editable install")
    tg_file, codegen_file, pyref_file, backends, values = out.splitlines()
    assert Path(tg_file).is_relative_to(ROOT / "packages/tg-core/src"), tg_file
    assert Path(codegen_file).is_relative_to(ROOT / "packages/tg-compiler/src"), codegen_file
    assert Path(pyref_file).is_relative_to(ROOT / SAMPLE_BACKEND / "src"), pyref_file
    assert backends == "['CPU', 'PYREF']" and values == "[3.0, 6.0]", out


# ---- misbehaving plugins ----

def test_broken_plugins_are_reported_and_do_not_break_tinygrad(clean_venv: Venv, odd_plugins: Path) -> None:
    rows, broken, text = _listing(clean_venv, path=[odd_plugins])
    assert "broken plugin broken (tg-backend-broken 0.3.0): ImportError: tg_backend_broken needs libvendor.so.1, " \
           "which is not installed" in broken, text
    assert "broken plugin hookfails (tg-backend-hookfails 0.1.0): RuntimeError: hookfails: the vendor driver " \
           "reports version 0, need 3" in broken, text
    assert rows["NODEV"][3] == "unavailable: no NODEV accelerator found (looked for /dev/nodev0)", text
    assert rows["PYREF"][3] == "available", text
    # the rest of tinygrad is untouched: import, the default device, tensors on CPU and PYREF
    device = "CPU"  # on its LLVM path: no C compiler needed
    out = _ok(clean_venv.code(textwrap.dedent(f"""\
        import tinygrad
        from tinygrad import Device, Tensor
        assert sorted(b.entry_point for b in Device.broken) == ["broken", "future", "hookfails"], Device.broken
        print(Device.DEFAULT, (Tensor([1.0, 2.0], device="{device}") + 1).tolist(),
              (Tensor([3.0], device="PYREF") * 2).tolist(), sep="|")
        """), path=[odd_plugins]), "tinygrad with broken plugins installed")
    # with no C compiler, CPU is unavailable and PYREF (the only usable backend) becomes the default
    assert out.strip().split("|") == [device, "[2.0, 3.0]", "[6.0]"], out
    # a device whose check fails says why when asked for
    proc = clean_venv.code("from tinygrad import Tensor; Tensor([1.0]).numpy()", env={"DEV": "NODEV"},
                           path=[odd_plugins])
    assert proc.returncode != 0
    assert "DEV=NODEV asks for an unavailable device: no NODEV accelerator found" in proc.stderr, proc.stderr


def test_plugin_of_another_contract_major_is_refused(clean_venv: Venv, odd_plugins: Path) -> None:
    rows, broken, text = _listing(clean_venv, path=[odd_plugins])
    assert "FUTURE" not in rows, text
    (line,) = [b for b in broken if b.startswith("broken plugin future ")]
    # the message names the plugin, both contract versions, and what to do about it
    assert "(tg-backend-future 2.1.0)" in line, line
    assert re.search(r"\bFUTURE\b", line) and "tg-backend-future" in line, line
    assert "contract 3.0" in line and "implements 2.0" in line, line
    assert "install a version of tg-backend-future built for contract 2.x" in line, line
    out = _ok(clean_venv.code(textwrap.dedent("""\
        from tinygrad import Device
        from tinygrad.device import UnknownDeviceError
        assert "FUTURE" not in Device.backends
        try:
            Device["FUTURE"]
        except UnknownDeviceError as e:
            print("refused:", e)
        """), path=[odd_plugins]), "opening FUTURE")
    # using the refused device says why it was refused, not just that the name is unknown
    assert out.startswith("refused: device 'FUTURE' was found but not loaded"), out
    assert "contract 3.0" in out and "implements 2.0" in out, out


def test_autoload_can_be_switched_off_and_plugins_registered_by_hand(clean_venv: Venv, odd_plugins: Path) -> None:
    env = {"TINYGRAD_NO_PLUGIN_AUTOLOAD": "1"}
    rows, broken, text = _listing(clean_venv, env=env, path=[odd_plugins])
    assert rows == {} and broken == [], f"discovery ran although {env} was set:\n{text}"
    assert "no default device" in text, text
    out = _ok(clean_venv.code(textwrap.dedent("""\
        import sys
        from tinygrad import Device, Tensor
        assert Device.backends == {} and Device.broken == [], (Device.backends, Device.broken)
        # no plugin module was even imported, the broken ones included
        assert not [m for m in sys.modules if m.startswith("tg_backend")], sorted(sys.modules)
        import tg_backend_pyref
        Device.register_plugin(tg_backend_pyref)
        print(sorted(Device.backends), Device.DEFAULT, (Tensor([1.0, 2.0]) * 3).tolist())
        """), env=env, path=[odd_plugins]), "registering PYREF by hand")
    assert out.split() == ["['PYREF']", "PYREF", "[3.0,", "6.0]"], out


# ---- DEV ----

@pytest.fixture(scope="module")
def tensor_results(clean_venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    """scripts/tensor_ops.py run on PYREF and on CPU (its default LLVM path needs no C compiler)."""
    out_dir = tmp_path_factory.mktemp("tensor_ops")
    results = {}
    for dev in ("PYREF", "CPU"):
        path = out_dir / f"{dev}.npz"
        _ok(clean_venv.run(ROOT / "integration-tests/scripts/tensor_ops.py", path, env={"DEV": dev}, timeout=300),
            f"DEV={dev} scripts/tensor_ops.py")
        with np.load(path) as data:
            results[dev] = {k: data[k] for k in data.files}
    return results


def _mismatches(got: dict[str, np.ndarray], want: dict[str, np.ndarray], rtol: float, atol: float) -> dict[str, str]:
    bad = {}
    for key in sorted(got):
        a, b = got[key], want[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            bad[key] = f"{a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        elif a.dtype.kind in "biu" and not np.array_equal(a, b):
            bad[key] = f"{np.count_nonzero(a != b)} of {a.size} elements differ"
        elif a.dtype.kind == "f" and not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            err = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))
            bad[key] = f"max abs error {err:.3g}"
    return bad


def test_pyref_tensor_ops_match_numpy(tensor_results: dict[str, dict[str, np.ndarray]]) -> None:
    ref = tensor_results["PYREF"]
    got = {k.removeprefix("tg/"): v for k, v in ref.items() if k.startswith("tg/") and not k.startswith("tg/exact/")}
    want = {k.removeprefix("np/"): v for k, v in ref.items() if k.startswith("np/")}
    assert set(got) == set(want) and len(got) >= 35, sorted(got)
    bad = _mismatches(got, want, rtol=1e-5, atol=1e-6)
    assert not bad, f"PYREF differs from numpy: {bad}"


def test_pyref_tensor_ops_match_cpu(tensor_results: dict[str, dict[str, np.ndarray]]) -> None:
    ref, cpu = tensor_results["PYREF"], tensor_results["CPU"]
    assert set(ref) == set(cpu)
    tg = {k.removeprefix("tg/").removeprefix("exact/"): ref[k] for k in ref if k.startswith("tg/")}
    tg_cpu = {k.removeprefix("tg/").removeprefix("exact/"): cpu[k] for k in cpu if k.startswith("tg/")}
    bad = _mismatches(tg, tg_cpu, rtol=1e-6, atol=1e-7)
    unexpected = {k: v for k, v in bad.items() if k not in KNOWN_CPU_DIVERGENCES}
    fixed = set(KNOWN_CPU_DIVERGENCES) - set(bad)
    assert not unexpected, f"PYREF (the reference semantics) and CPU differ: {unexpected}"
    assert not fixed, f"CPU now agrees with PYREF on {sorted(fixed)}: delete them from KNOWN_CPU_DIVERGENCES"


def test_unknown_device_names_the_available_backends(clean_venv: Venv) -> None:
    env = {"DEV": "NOPE"}
    _ok(clean_venv.code("import tinygrad", env=env), "import tinygrad with DEV=NOPE")  # only using a device fails
    proc = clean_venv.code("from tinygrad import Tensor; Tensor([1.0]).numpy()", env=env)
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()[-1]
    assert "unknown device 'NOPE'" in message and "available backends: ['CPU', 'PYREF']" in message, message
    assert "python -m tinygrad.device" in message, message


def test_device_listing_survives_an_unknown_dev(clean_venv: Venv) -> None:
    rows, _, text = _listing(clean_venv, env={"DEV": "NOPE"})
    assert "PYREF" in rows and "unknown device 'NOPE'" in text, text


# ---- the op tests and the backend's own tests, run in the clean venv ----

@pytest.fixture(scope="module")
def test_tools(tmp_path_factory: pytest.TempPathFactory, clean_venv: Venv,
               wheelhouse: Path) -> tuple[Path, str | None]:
    """pytest (and, where it can be installed, torch) in a side folder: (folder, why torch is missing or None)."""
    target = tmp_path_factory.mktemp("test-tools")
    clean_venv.check_pip("install", "--no-index", "--find-links", wheelhouse, "--target", target, "pytest",
                         "pytest-xdist", what="installing pytest for the clean venv")
    proc = clean_venv.pip("install", "--retries", "1", "--timeout", "30", "--target", target, TORCH)
    return target, None if proc.returncode == 0 else f"pip install {TORCH} failed: {tail(proc.stderr, 3)}"


def test_op_tests_pass_on_pyref(clean_venv: Venv, test_tools: tuple[Path, str | None]) -> None:
    """The same op tests as every backend, through DEV=PYREF, with the backend installed from its own folder."""
    assert OP_TESTS, "no op-info tables found"
    tools, torch_missing = test_tools
    # -n 2 with -s: each worker's "opened device" lines still reach the output through xdist's capture
    # TG_EXPECT_DEVICE makes the tests' conftest fail the run if any other device is the default or gets opened
    proc = clean_venv.run("-m", "pytest", "-x", "-q", "-n", "2", "-p", "no:cacheprovider", *OP_TESTS,
                          env={"DEV": "PYREF", "TG_EXPECT_DEVICE": "PYREF"}, path=[tools], cwd=ROOT,
                          timeout=OP_TESTS_TIMEOUT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"DEV=PYREF pytest of the op tables failed:\n{tail(out, 60)}"
    summary = re.search(r"(\d+) passed.*", out)
    assert summary and int(summary.group(1)) > 0, tail(out)
    if torch_missing:
        pytest.skip(f"forward op tests passed on PYREF ({summary.group(0)}), but the gradient tests compare "
                    f"against PyTorch, which is not installable here: {torch_missing}")


def test_sample_backend_tests_pass_when_installed(clean_venv: Venv, test_tools: tuple[Path, str | None]) -> None:
    tools, _ = test_tools
    proc = clean_venv.run("-m", "pytest", "-q", "-p", "no:cacheprovider", ROOT / SAMPLE_BACKEND / "tests",
                          path=[tools], cwd=ROOT, timeout=OP_TESTS_TIMEOUT)
    assert proc.returncode == 0, tail(proc.stdout + proc.stderr, 40)
    assert re.search(r"\d+ passed", proc.stdout), proc.stdout
