"""Test, lint and type-check sessions for the monorepo.

    nox                 # everything CI runs
    nox -s tests-3.11   # one session; `nox -l` lists them

Packages are installed editable into each session's venv, so the shared `tinygrad` namespace
(tg-core's __init__ extends the path) is exercised the way developers use it; integration-tests/
covers regular installs in clean venvs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYTHONS = ["3.11", "3.12", "3.13"]
FRAMEWORK = ["packages/tg-core", "packages/tg-compiler", "packages/tg-backend-cpu", "packages/tg-nn"]
TEST_DEPS = ["pytest==9.2.0", "pytest-xdist==3.8.0", "hypothesis==6.170.17", "safetensors==0.8.0"]
# the CPU build of torch 2.13.0 exists as a wheel for Python 3.11 here; other Pythons run without it
# (tests that need torch's reference values skip there, and say so)
TORCH = "torch==2.13.0"
MPI4PY = "mpi4py==4.1.2"
# models end to end: reference models and tokenizers (transformers, diffusers), GGUF files, the OpenAI client
# against tinygrad.llm
MODEL_DEPS = ["transformers==5.24.0", "tokenizers==0.23.3", "gguf==0.19.0", "jinja2==3.1.6", "openai==3.60.0",
              "diffusers==0.42.1"]
ONNX_DEPS = ["onnx==1.23.2", "onnxruntime==1.32.0"]
LINT_DEPS = ["ruff==0.17.6"]
DOCS_DEPS = ["mkdocs==1.6.1", "mkdocs-material==9.8.2", "mkdocstrings==1.0.8", "mkdocstrings-python==2.0.11",
             "griffelib==2.4.1", "mkdocs-autorefs==1.4.5", "pymdown-extensions==13.1.2"]
TYPE_DEPS = ["mypy==2.4.1", "numpy==2.4.6", "pluggy==1.7.0", "pytest==9.2.0", "hypothesis==6.170.17"]

nox.options.sessions = ["lint", "types", "tests", "integration", "examples", "backend_opencl", "backend_qcom",
                         "backend_webgpu", "backend_cpu_clang", "backend_cuda", "backend_amd", "backend_metal",
                         "models", "onnx", "conformance", "docs"]
nox.options.error_on_missing_interpreters = bool(os.environ.get("CI"))
nox.options.reuse_existing_virtualenvs = not os.environ.get("CI")


def _pyenv_expose_all() -> None:
    """Under pyenv, make python3.11/3.12/3.13 all resolvable, whatever `pyenv global` says."""
    if shutil.which("pyenv") is None:
        return
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = [v.name for py in PYTHONS for v in sorted(root.glob(f"{py}.*")) if (v / "bin").exists()]
    # pyenv's shim sets PYENV_VERSION for the process it starts; keep that version first
    current = [v for v in os.environ.get("PYENV_VERSION", "").split(":") if v]
    if found:
        os.environ["PYENV_VERSION"] = ":".join(dict.fromkeys(current + found))


_pyenv_expose_all()


def _install_framework(session: nox.Session) -> None:
    session.install(*[arg for pkg in FRAMEWORK for arg in ("-e", pkg)])


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Unit tests of every package (torch reference values on 3.11)."""
    _install_framework(session)
    deps = TEST_DEPS + ([TORCH] if session.python == "3.11" else [])
    session.install(*deps)
    workers = os.environ.get("PYTEST_WORKERS", "2")
    session.run("pytest", "-n", workers, "-q", "packages", *session.posargs,
                success_codes=[0, 5])  # 5: nothing collected (for example with -k filters)


@nox.session(python="3.11")
def integration(session: nox.Session) -> None:
    """The packages together: clean-venv installs, plugin discovery, the sample out-of-tree backend."""
    _install_framework(session)
    session.install(*TEST_DEPS, MPI4PY)  # MPI: the data-parallel test runs mpirun -n 2
    session.run("pytest", "-q", "integration-tests", *session.posargs, success_codes=[0, 5])
    # the bench commands in --quick mode (this project's rows; the other frameworks' rows say their venvs are
    # missing) and the bench harness's own tests
    session.run("pytest", "-q", "bench", *session.posargs, success_codes=[0, 5])


@nox.session(python="3.11")
def examples(session: nox.Session) -> None:
    """Run the examples end to end; the README's first command as on a fresh machine with gcc as its only C
    compiler (the plain install: it must take the LLVM path, llvmlite coming with tg-backend-cpu)."""
    _install_framework(session)
    session.run("python", "examples/train_tiny.py")
    # the README's first command, whole (70 steps, about a minute), into this session's venv, with clang hidden
    # from PATH: train_mnist.sh installs the packages without extras, and the CPU must still compile on the LLVM
    # path (checked first), not with the gcc left on PATH. It fails below 83% test accuracy (it reaches 83.8% here,
    # 83.8-85.0% over seeds 0-3: see the README; the point of margin allows for another processor's rounding,
    # which host-tuned code differs in, and the batches' noise)
    no_clang = _path_without(session, ("clang", "ld.lld"))
    python = str(Path(session.virtualenv.location) / "bin" / "python")
    session.run(python, "-c", "from tg_backend_cpu.compiler import find_c_compiler, uses_llvm; "
                "assert uses_llvm(), 'the default CPU path is not LLVM'; print('CPU compiler: llvm; C compiler on "
                "PATH:', find_c_compiler()[0])", external=True, env={"PATH": no_clang})
    session.run("bash", "examples/train_mnist.sh", external=True,
                env={"VENV": session.virtualenv.location, "TARGET_EVAL_ACC_PCT": "83", "PATH": no_clang})


def _path_without(session: nox.Session, prefixes: tuple[str, ...]) -> str:
    """A PATH of one folder linking every program on this PATH except those whose names start with a prefix."""
    folder = Path(session.create_tmp()) / "path-without"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = folder / entry.name
            if entry.name.startswith(prefixes) or os.path.lexists(link) or not os.access(entry.path, os.X_OK):
                continue
            link.symlink_to(entry.path)
    return str(folder)


def _backend_session(session: nox.Session, device: str, packages: list[str]) -> None:
    """A backend's own tests, then the Tensor op table and the large-size suites on its device (torch gives the
    gradient references)."""
    _install_framework(session)
    session.install(*[arg for pkg in packages for arg in ("-e", pkg)], *TEST_DEPS, TORCH)
    workers = os.environ.get("PYTEST_WORKERS", "2")
    session.run("pytest", "-n", workers, "-q", f"{packages[-1]}/tests", *session.posargs)
    # the op table, the sizes that need split reductions and 64-bit indices (or the device's clear refusal), writes
    # through views, TinyJit against eager on random programs, gathers folded into loads, and tinygrad programs
    device_suites = [f"packages/tg-core/tests/{name}.py" for name in
                     ("test_ops", "test_sum_accuracy", "test_split_reduce", "test_large_sizes", "test_assign_views",
                      "test_jit_property")]
    device_suites += ["packages/tg-compiler/tests/test_gather_fold.py",
                      "packages/tg-nn/tests/test_tinygrad_programs.py"]
    session.run("pytest", "-n", workers, "-q", *device_suites, *session.posargs,
                env={"DEV": device, "TG_EXPECT_DEVICE": device})


@nox.session(python="3.11")
def backend_opencl(session: nox.Session) -> None:
    """The OpenCL backend on this machine's OpenCL driver (PoCL here: `apt-get install pocl-opencl-icd
    ocl-icd-libopencl1`)."""
    _backend_session(session, "CL", ["packages/tg-backend-opencl"])


@nox.session(python="3.11")
def backend_qcom(session: nox.Session) -> None:
    """The QCOM backend on PoCL as its stand-in."""
    _backend_session(session, "QCOM", ["packages/tg-backend-opencl", "packages/tg-backend-qcom"])


@nox.session(python="3.11")
def backend_webgpu(session: nox.Session) -> None:
    """The WebGPU backend on lavapipe (`apt-get install mesa-vulkan-drivers libvulkan1`)."""
    _backend_session(session, "WEBGPU", ["packages/tg-backend-webgpu"])


@nox.session(python="3.11")
def backend_cpu_clang(session: nox.Session) -> None:
    """The CPU backend's clang path (CPU_COMPILER=clang: C compiled by clang; the tests session runs the default,
    LLVM path): its own tests, the Tensor op table and the conformance kit. gcc's path runs the kit in the
    conformance session."""
    _install_framework(session)
    session.install(*TEST_DEPS, TORCH)
    workers = os.environ.get("PYTEST_WORKERS", "2")
    env = {"DEV": "CPU", "CPU_COMPILER": "clang"}
    session.run("pytest", "-n", workers, "-q", "packages/tg-backend-cpu/tests", "packages/tg-core/tests/test_ops.py",
                *session.posargs, env=env)
    session.run("pytest", "-n", workers, "-q", "--pyargs", "tinygrad.conformance", "--tg-device=CPU",
                *session.posargs, env=env)


@nox.session(python="3.11")
def backend_cuda(session: nox.Session) -> None:
    """CUDA without a GPU: the conformance kit in compile-only mode for sm_80 and sm_90 (every kernel of its checks
    and of its expression table rendered and compiled by NVRTC to SASS for the target, none run), then the backend's
    tests (the GPU tests skip with the reason), and the op table (test_ops.py) compiled for sm_90."""
    _install_framework(session)
    session.install("-e", "packages/tg-backend-cuda[test]", *TEST_DEPS)
    workers = os.environ.get("PYTEST_WORKERS", "2")
    for target in ("sm_80", "sm_90"):
        session.run("pytest", "-n", workers, "-q", "--pyargs", "tinygrad.conformance", "--tg-device=CUDA",
                    "--tg-compile-only", f"--tg-target={target}")
    # the op table's kernels too, for the newest target (under a minute: nothing runs)
    session.run("pytest", "-n", workers, "-q", "packages/tg-core/tests/test_ops.py", "--tg-device=CUDA",
                "--tg-compile-only", "--tg-target=sm_90", env={"DEV": "CUDA"})
    session.run("pytest", "-n", workers, "-q", "packages/tg-backend-cuda/tests",
                "-k", "not test_op_table_kernels_compile", *session.posargs)


@nox.session(python="3.11")
def backend_amd(session: nox.Session) -> None:
    """AMD without a GPU: the conformance kit in compile-only mode for gfx942 (CDNA3) and gfx1100 (RDNA3): every kernel
    of its checks and of its expression table compiled by clang-19 and linked by ld.lld-19 into a code object for the
    target, none run; then the backend's tests. The op table in compile-only mode takes several minutes more per
    target: `TG_AMD_COMPILE_TABLES=1 nox -s backend_amd -- -k test_op_table_kernels_compile`."""
    _install_framework(session)
    session.install("-e", "packages/tg-backend-amd[test]", *TEST_DEPS)
    workers = os.environ.get("PYTEST_WORKERS", "2")
    for target in ("gfx942", "gfx1100"):
        session.run("pytest", "-n", workers, "-q", "--pyargs", "tinygrad.conformance", "--tg-device=AMD",
                    "--tg-compile-only", f"--tg-target={target}")
    session.run("pytest", "-n", workers, "-q", "packages/tg-backend-amd/tests",
                "-k", "not test_op_table_kernels_compile", *session.posargs)


@nox.session(python="3.11")
def backend_metal(session: nox.Session) -> None:
    """Metal without a Mac: the MSL of the expression table syntax-checked by clang-19 against a stand-in
    metal_stdlib."""
    _install_framework(session)
    session.install("-e", "packages/tg-backend-metal[test]", *TEST_DEPS)
    session.run("pytest", "-n", os.environ.get("PYTEST_WORKERS", "2"), "-q", "packages/tg-backend-metal/tests",
                *session.posargs)


@nox.session(python="3.11")
def models(session: nox.Session) -> None:
    """Models against their reference implementations: language models against transformers (GPT-2, LLaMA 2/3,
    Qwen2/3, Mixtral, Qwen3-MoE, OLMoE, Mamba), Whisper, Stable Diffusion against diffusers, GGUF (quantized too)
    against the gguf package, and the tinygrad.llm server (tool calls included) driven by the openai client and its
    chat page by headless Chromium. The tests session collects the same files and skips them there (these
    dependencies are not installed in it)."""
    _install_framework(session)
    session.install(*TEST_DEPS, TORCH, *MODEL_DEPS)
    session.run("pytest", "-n", os.environ.get("PYTEST_WORKERS", "2"), "-q", "packages/tg-nn/tests/test_gguf.py",
                "packages/tg-nn/tests/test_transformer_models.py", "packages/tg-nn/tests/test_llm_server.py",
                "packages/tg-nn/tests/test_whisper_model.py", "packages/tg-nn/tests/test_mamba_model.py",
                "packages/tg-nn/tests/test_moe_models.py", "packages/tg-nn/tests/test_gguf_quant.py",
                "packages/tg-nn/tests/test_gguf_quant_moe.py",
                "packages/tg-nn/tests/test_llm_tools.py", "packages/tg-nn/tests/test_diffusion_model.py",
                "integration-tests/test_llm_chat_page.py", *session.posargs)


@nox.session(python="3.11")
def onnx(session: nox.Session) -> None:
    """tinygrad.onnx: the onnx wheel's backend node tests, models exported by torch.onnx against onnxruntime,
    hostile files. The tests session skips these files (no onnx there)."""
    _install_framework(session)
    session.install(*TEST_DEPS, TORCH, *ONNX_DEPS)
    session.run("pytest", "-n", os.environ.get("PYTEST_WORKERS", "2"), "-q", "packages/tg-nn/tests/onnx_tests",
                *session.posargs)


@nox.session(python="3.11")
def conformance(session: nox.Session) -> None:
    """The backend conformance kit on the devices that run here (PYREF, a Python interpreter, with --tg-quick).
    WEBGPU runs on lavapipe (`apt-get install mesa-vulkan-drivers libvulkan1`): its reductions past the driver's
    65535-iteration loop cap run grouped over a workgroup, or with their loops unrolled in the shader."""
    _install_framework(session)
    session.install("-e", "packages/tg-backend-opencl", "-e", "packages/tg-backend-qcom",
                    "-e", "packages/tg-backend-webgpu", "-e", "integration-tests/sample_backend", *TEST_DEPS)
    for dev, extra in (("CPU", []), ("CL", []), ("QCOM", []), ("WEBGPU", []), ("PYREF", ["--tg-quick"])):
        session.run("pytest", "-n", "2", "-q", "--pyargs", "tinygrad.conformance", f"--tg-device={dev}",
                    *extra, *session.posargs)
    # CPU above compiles on the LLVM path (the default), backend_cpu_clang runs the kit on clang's; here gcc's
    session.run("pytest", "-n", "2", "-q", "--pyargs", "tinygrad.conformance", "--tg-device=CPU",
                *session.posargs, env={"CPU_COMPILER": "gcc"})


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """The docs site (mkdocs.yml), built with --strict: a broken link, a missing page or a docstring griffe cannot
    parse fails the session. The site goes to a temporary folder."""
    _install_framework(session)
    session.install(*DOCS_DEPS, *LINT_DEPS)  # ruff formats the rendered signatures
    site = Path(session.create_tmp()) / "site"
    session.run("mkdocs", "build", "--strict", "--site-dir", str(site), env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install(*LINT_DEPS)
    session.run("ruff", "check", ".")


@nox.session(python="3.11")
def types(session: nox.Session) -> None:
    """mypy over all packages. The shared `tinygrad` namespace spans several src/ folders, which mypy cannot
    merge, so it checks a temporary tree of symlinks that joins them as an installed copy would be."""
    session.install(*TYPE_DEPS)
    tree = Path(session.create_tmp()) / "typecheck"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    for pkg_src in [*sorted(ROOT.glob("packages/*/src")), ROOT / "integration-tests/sample_backend/src"]:
        _link_tree(pkg_src, tree)
    session.run("mypy", "--config-file", str(ROOT / "mypy.ini"), *sorted(str(p) for p in tree.iterdir()))


def _link_tree(src: Path, dest: Path) -> None:
    for item in src.iterdir():
        if item.name == "__pycache__":
            continue
        target = dest / item.name
        if item.is_dir():
            target.mkdir(exist_ok=True)
            _link_tree(item, target)
        else:
            target.symlink_to(item.resolve())
