"""The thread pool on its own (a hand-written C task that counts which thread ran which index), and the thread
count setting ($CPU_THREADS) as the device, `python -m tinygrad.device` and whole programs see it."""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tg_backend_cpu.compiler import CCompiler
from tg_backend_cpu.llvm_pool import llvm_pool_library
from tg_backend_cpu.loader import load_library
from tg_backend_cpu.py_thread_pool import PythonThreadPool
from tg_backend_cpu.thread_count import THREADS_ENV, available_cores, thread_count
from tg_backend_cpu.thread_pool import ThreadPool, c_pool_library

COUNT_TASK = """
#include <pthread.h>
#include <unistd.h>
/* args: [hits (long long*), who ran each index (unsigned long*), microseconds the slice at 0 sleeps first] */
void count(const long long *args, long long start, long long end, long long total) {
  long long *hits = (long long *)(__INTPTR_TYPE__)args[0];
  unsigned long *who = (unsigned long *)(__INTPTR_TYPE__)args[1];
  if (start == 0 && args[2] > 0) usleep((useconds_t)args[2]);
  for (long long i = start; i < end; i++) { hits[i] += 1; who[i] = (unsigned long)pthread_self(); }
}
"""


class CountTask:
    """`total` counters; each launch adds 1 to every index it covers and records the thread that did."""

    def __init__(self, total: int):
        self.lib = load_library(CCompiler().compile_cached(COUNT_TASK))
        self.fn = ctypes.cast(self.lib.count, ctypes.c_void_p).value
        self.hits = np.zeros(max(total, 1), np.int64)
        self.who = np.zeros(max(total, 1), np.uint64)
        self.args = (ctypes.c_longlong * 3)(self.hits.ctypes.data, self.who.ctypes.data, 0)
        self.total = total

    def run(self, pool: ThreadPool | PythonThreadPool, n_parts: int) -> int:
        assert self.fn is not None
        return pool.run(self.fn, self.args, self.total, n_parts)


def _pool_kind(kind: str) -> Any:
    """A maker of pools of one kind: the C pool (thread_pool.c), its LLVM IR twin (llvm_pool.py), or Python threads."""
    if kind == "native":
        return functools.partial(ThreadPool, library=c_pool_library())
    if kind == "llvm-ir":
        return functools.partial(ThreadPool, library=llvm_pool_library())
    return PythonThreadPool


POOL_KINDS = ["native", "llvm-ir", "python"]


@pytest.fixture(params=POOL_KINDS)
def pool(request: pytest.FixtureRequest) -> Iterator[ThreadPool | PythonThreadPool]:
    """The C pool, the same pool in LLVM IR (the LLVM path's: it needs no C compiler), and the Python-threads pool
    of a platform without POSIX threads: the same contract."""
    made: ThreadPool | PythonThreadPool = _pool_kind(request.param)(4)
    yield made
    made.close()


@pytest.mark.parametrize("total", [0, 1, 2, 3, 5, 8, 13, 100, 1001])
def test_every_index_runs_exactly_once(pool: ThreadPool | PythonThreadPool, total: int) -> None:
    for n_parts in range(0, 10):
        task = CountTask(total)
        used = task.run(pool, n_parts)
        assert used == max(1, min(n_parts, 4, total)), (n_parts, used)
        np.testing.assert_array_equal(task.hits[:total], np.ones(total, np.int64))
        # the caller runs the slices no worker has started yet: at most one thread per slice
        assert len(set(task.who[:total].tolist())) <= used


def test_workers_run_slices_while_the_caller_runs_its_own(pool: ThreadPool | PythonThreadPool) -> None:
    task = CountTask(40)
    task.args[2] = 50_000  # the caller's slice (it starts at 0) sleeps 50 ms: time enough for workers to start
    launches = 0
    while launches < 5:  # a very busy machine may not schedule a worker within 50 ms: try again
        task.run(pool, 4)
        launches += 1
        if len(set(task.who.tolist())) > 1:
            break
    assert len(set(task.who.tolist())) > 1, f"no worker ran a slice in {launches} launches"
    np.testing.assert_array_equal(task.hits, np.full(40, launches, np.int64))


SCALE_TASK = """
#include <unistd.h>
unsigned get_mxcsr(void) { return __builtin_ia32_stmxcsr(); }
void set_mxcsr(unsigned v) { __builtin_ia32_ldmxcsr(v); }
/* args: [out (float*), in (float*)]; the caller's slice (at 0) sleeps 20 ms so that workers take theirs */
void scale(const long long *args, long long start, long long end, long long total) {
  float *out = (float *)(__INTPTR_TYPE__)args[0];
  const float *in = (const float *)(__INTPTR_TYPE__)args[1];
  if (start == 0) usleep(20000);
  for (long long i = start; i < end; i++) out[i] = in[i] * 0.75f;
}
"""


def test_workers_compute_under_the_callers_floating_point_environment(pool: ThreadPool | PythonThreadPool) -> None:
    # a library may turn on flush-to-zero / denormals-are-zero on the calling thread (torch.set_flush_denormal);
    # slices on workers must then flush too, or the result would depend on which thread computed it
    import platform

    if platform.machine() not in ("x86_64", "AMD64", "i386", "i686"):
        pytest.skip("sets flush-to-zero through x86's MXCSR register")
    lib = load_library(CCompiler().compile_cached(SCALE_TASK))
    lib.get_mxcsr.restype = ctypes.c_uint
    lib.set_mxcsr.argtypes = [ctypes.c_uint]
    fn = ctypes.cast(lib.scale, ctypes.c_void_p).value
    assert fn is not None
    tiny = np.full(8, 3e-39, np.float32)  # a float32 denormal
    out = np.full(8, np.nan, np.float32)
    args = (ctypes.c_longlong * 2)(out.ctypes.data, tiny.ctypes.data)
    pool.run(fn, args, 8, 4)
    assert (out > 0).all(), "without flush-to-zero a denormal times 0.75 stays a denormal"
    saved = lib.get_mxcsr()
    lib.set_mxcsr(saved | 0x8040)  # FTZ and DAZ, on this thread only
    try:
        out[:] = np.nan
        pool.run(fn, args, 8, 4)
    finally:
        lib.set_mxcsr(saved)
    np.testing.assert_array_equal(out, np.zeros(8, np.float32))


def test_many_launches_in_a_row(pool: ThreadPool | PythonThreadPool) -> None:
    task = CountTask(97)
    for _ in range(3000):
        assert task.run(pool, 4) == 4
    np.testing.assert_array_equal(task.hits, np.full(97, 3000, np.int64))


@pytest.mark.parametrize("kind_name", ["native", "llvm-ir"])
def test_workers_that_sleep_between_every_launch_wake_up(kind_name: str) -> None:
    sleeper = _pool_kind(kind_name)(3, spin_ns=0)  # never spin: every job wakes sleeping workers, every wait sleeps
    task = CountTask(31)
    for i in range(400):
        assert task.run(sleeper, 3) == 3
        if i % 50 == 0:
            time.sleep(0.002)
    np.testing.assert_array_equal(task.hits, np.full(31, 400, np.int64))


def test_callers_on_several_threads_share_one_pool(pool: ThreadPool | PythonThreadPool) -> None:
    # the pool serves one job at a time: a caller that finds it busy runs its job itself
    tasks = [CountTask(64) for _ in range(4)]
    errors: list[BaseException] = []

    def launch(task: CountTask) -> None:
        try:
            for _ in range(300):
                task.run(pool, 4)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=launch, args=(t,)) for t in tasks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for task in tasks:
        np.testing.assert_array_equal(task.hits, np.full(64, 300, np.int64))


def test_an_idle_pool_costs_no_cpu(pool: ThreadPool | PythonThreadPool) -> None:
    task = CountTask(1000)
    task.run(pool, 4)  # starts the workers
    time.sleep(0.05)  # past the spin: the workers sleep now
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(0.5)
    after = resource.getrusage(resource.RUSAGE_SELF)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert used < 0.1, f"3 idle workers used {used:.3f} s of CPU in 0.5 s: they spin instead of sleeping"


def test_close_joins_the_workers_and_the_next_run_starts_new_ones(pool: ThreadPool | PythonThreadPool) -> None:
    task = CountTask(10)
    task.run(pool, 4)
    assert pool.started
    pool.close()
    assert not pool.started
    assert task.run(pool, 4) == 4
    np.testing.assert_array_equal(task.hits, np.full(10, 2, np.int64))


def test_a_forked_child_gets_a_pool_of_its_own(pool: ThreadPool | PythonThreadPool) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("this platform has no fork()")
    task = CountTask(20)
    task.run(pool, 4)  # the parent's workers exist; the child will have none of them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+ warns about fork() with threads
        pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            used = task.run(pool, 4)
            code = 0 if used == 4 and (task.hits == 2).all() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert task.run(pool, 4) == 4  # the parent's pool is untouched
    np.testing.assert_array_equal(task.hits, np.full(20, 2, np.int64))


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        ThreadPool(0)
    assert ThreadPool(5).size() == 5


# ---------------------------------------------------------------------------------------------------------------------
# the thread count setting

def test_thread_count_defaults_to_the_cores_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert thread_count() == available_cores() >= 1
    if hasattr(os, "sched_getaffinity"):
        from tg_backend_cpu.thread_count import cgroup_cpu_limit

        quota = cgroup_cpu_limit()
        affinity = len(os.sched_getaffinity(0))
        assert available_cores() == (min(affinity, quota) if quota is not None else affinity)


@pytest.mark.parametrize(("v2", "v1", "want"), [
    ("150000 100000\n", None, 2), ("max 100000\n", None, None), ("50000 100000\n", None, 1),
    (None, ("50000", "100000"), 1), (None, ("-1", "100000"), None), (None, ("400000", "100000"), 4),
    (None, None, None)])
def test_a_control_group_cpu_quota_caps_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    v2: str | None, v1: tuple[str, str] | None,
                                                    want: int | None) -> None:
    from tg_backend_cpu import thread_count as tc

    (tmp_path / "v1").mkdir()
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2)
    if v1 is not None:
        (tmp_path / "v1" / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (tmp_path / "v1" / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    monkeypatch.setattr(tc, "CGROUP_CPU_FILES", ((str(tmp_path / "cpu.max"), 2),
                                                 (str(tmp_path / "v1" / "cpu.cfs_quota_us"), 1)))
    monkeypatch.setattr(tc.os, "sched_getaffinity", lambda pid: set(range(3)), raising=False)
    assert tc.cgroup_cpu_limit() == want
    assert tc.available_cores() == (min(3, want) if want is not None else 3)


def test_cpu_threads_overrides_the_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cpu.device import CPUDevice

    monkeypatch.setenv(THREADS_ENV, "3")
    dev = CPUDevice()
    assert dev.threads == 3 and dev.pool is not None and dev.pool.size() == 3
    monkeypatch.setenv(THREADS_ENV, " 1 ")
    assert CPUDevice().pool is None


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_cpu_threads_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    import tg_backend_cpu
    from tg_backend_cpu.device import CPUDevice

    monkeypatch.setenv(THREADS_ENV, value)
    with pytest.raises(ValueError, match=f"{THREADS_ENV}='{value}' is not a positive whole number.*unset it"):
        CPUDevice()
    reason = tg_backend_cpu._check()
    assert reason is not None and THREADS_ENV in reason


def _device_listing(env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "tinygrad.device"], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    return next(line for line in proc.stdout.splitlines() if line.startswith("CPU "))


def test_the_device_listing_shows_cpu_and_its_threads() -> None:
    env = {k: v for k, v in os.environ.items() if k != THREADS_ENV}
    assert "  available (compiler: " in _device_listing(env)
    assert _device_listing(env | {THREADS_ENV: "1"}).endswith(", 1 thread from CPU_THREADS)")
    assert _device_listing(env | {THREADS_ENV: "3"}).endswith(", 3 threads from CPU_THREADS)")
    assert f"unavailable: {THREADS_ENV}='lots' is not a positive whole number" in \
        _device_listing(env | {THREADS_ENV: "lots"})


def test_whole_programs_give_the_same_bits_on_one_and_two_threads() -> None:
    script = textwrap.dedent("""
        import hashlib
        import numpy as np
        from tinygrad import Device, Tensor, Variable
        from tg_backend_cpu import program
        program.MIN_WORK_PER_THREAD = 1  # split even these small kernels
        rng = np.random.default_rng(3)
        a, b = rng.standard_normal((96, 80)).astype(np.float32), rng.standard_normal((80, 72)).astype(np.float32)
        x, y = Tensor(a, device="CPU"), Tensor(b, device="CPU")
        n = Variable("n", 1, 96)
        outs = [(x @ y).relu().sum(axis=0), (x * 2 + 1).exp().max(axis=1), x[:n.bind(37)].sum(axis=1),
                (x @ y).softmax(axis=1)]
        h = hashlib.sha256()
        for o in outs:
            h.update(o.numpy().tobytes())
        print(Device["CPU"].threads, h.hexdigest())
    """)
    results = []
    for threads in ("1", "2"):
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                              env=os.environ | {THREADS_ENV: threads})
        assert proc.returncode == 0, proc.stderr
        count, digest = proc.stdout.split()
        assert count == threads
        results.append(digest)
    assert results[0] == results[1]


@pytest.mark.parametrize("name", ["gcc", "clang"])
def test_the_pool_and_sliced_kernels_build_with_each_compiler(name: str, fresh_compiler_lookup,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cpu.thread_pool import pool_source

    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed here")
    monkeypatch.setenv("CC", name)
    fresh_compiler_lookup()
    compiler = CCompiler()
    assert name in compiler.path
    lib = load_library(compiler.compile(pool_source()))
    lib.tg_pool_create.restype = ctypes.c_void_p
    lib.tg_pool_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int]
    lib.tg_pool_destroy.argtypes = [ctypes.c_void_p]
    lib.tg_pool_create.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_int]
    handle = lib.tg_pool_create(3, 0, None, 0)
    try:
        task = CountTask(50)
        task.lib = load_library(compiler.compile(COUNT_TASK))  # the task too, from this compiler
        task.fn = ctypes.cast(task.lib.count, ctypes.c_void_p).value
        for _ in range(20):
            assert lib.tg_pool_run(handle, task.fn, task.args, 50, 3) == 3
        np.testing.assert_array_equal(task.hits, np.full(50, 20, np.int64))
    finally:
        lib.tg_pool_destroy(handle)


TSAN_DRIVER = """
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
typedef struct tg_pool tg_pool;
tg_pool *tg_pool_create(int n_threads, long long spin_ns, const int *cpus, int n_cpus);
int tg_pool_pinned(const tg_pool *p);
int tg_pool_run(tg_pool *p, void (*fn)(const long long *, long long, long long, long long), const long long *args,
                long long total, int n_parts);
void tg_pool_destroy(tg_pool *p);
static void task(const long long *args, long long start, long long end, long long total) {
  long long *hits = (long long *)(__INTPTR_TYPE__)args[0];
  for (long long i = start; i < end; i++) hits[i] += 1;
}
struct caller { tg_pool *p; long long hits[64]; };
static void *call(void *arg) {
  struct caller *c = arg;
  long long args[1] = {(long long)(__INTPTR_TYPE__)c->hits};
  for (int i = 0; i < 3000; i++) tg_pool_run(c->p, task, args, 64, 1 + i % 5);
  return NULL;
}
int main(int argc, char **argv) {  /* argv: spin_ns, callers (1-3), pin (1: one worker bound to each CPU) */
  int n = atoi(argv[2]);
  int cpus[CPU_SETSIZE], n_cpus = 0;
  cpu_set_t mask;
  if (atoi(argv[3]) && sched_getaffinity(0, sizeof(mask), &mask) == 0)
    for (int c = 0; c < CPU_SETSIZE; c++) if (CPU_ISSET(c, &mask)) cpus[n_cpus++] = c;
  tg_pool *p = tg_pool_create(n_cpus > 1 ? n_cpus : 4, atoll(argv[1]), cpus, n_cpus > 1 ? n_cpus : 0);
  if (n_cpus > 1 && !tg_pool_pinned(p)) { puts("not pinned"); return 1; }
  struct caller cs[3] = {{p, {0}}, {p, {0}}, {p, {0}}};
  pthread_t th[3];
  for (int k = 0; k < n; k++) pthread_create(&th[k], NULL, call, &cs[k]);
  for (int k = 0; k < n; k++) pthread_join(th[k], NULL);
  tg_pool_destroy(p);
  for (int k = 0; k < n; k++) for (int i = 0; i < 64; i++) if (cs[k].hits[i] != 3000) { puts("lost"); return 1; }
  puts("ok");
  return 0;
}
"""


def test_the_pool_has_no_data_races_under_thread_sanitizer(tmp_path: Path) -> None:
    from tg_backend_cpu.thread_pool import pool_source

    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed here (its ThreadSanitizer checks the pool)")
    (tmp_path / "pool.c").write_text(pool_source())
    (tmp_path / "driver.c").write_text(TSAN_DRIVER)
    exe = tmp_path / "driver"
    build = subprocess.run([gcc, "-O1", "-g", "-fsanitize=thread", "-pthread", str(tmp_path / "pool.c"),
                            str(tmp_path / "driver.c"), "-o", str(exe), "-lm"], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.skip(f"gcc cannot build with -fsanitize=thread here (libtsan missing?): {build.stderr[-300:]}")
    for spin_ns, callers, pin in (("0", "1", "0"), ("50000", "1", "0"), ("0", "3", "0"), ("2000", "2", "0"),
                                  ("0", "1", "1"), ("0", "3", "1"), ("2000", "2", "1")):
        run = subprocess.run([str(exe), spin_ns, callers, pin], capture_output=True, text=True, timeout=300)
        assert "ThreadSanitizer" not in run.stderr, run.stderr[-3000:]
        assert run.returncode == 0 and run.stdout.strip() == "ok", (run.stdout, run.stderr[-1000:])


def test_the_pool_library_is_a_background_build_until_it_is_loaded() -> None:
    from tg_backend_cpu.device import CPUDevice
    from tg_backend_cpu.thread_pool import pool_library
    dev = CPUDevice(threads=2)
    if pool_library.cache_info().currsize == 0:
        assert dev.background_builds() == [pool_library]
    pool_library()
    assert dev.background_builds() == []  # loaded: nothing left to build
    assert CPUDevice(threads=1).background_builds() == []  # one thread: no pool at all


CPU_TASK = """
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
/* args: [cpu each index ran on (long long*), who ran it (unsigned long*), microseconds the slice at 0 sleeps] */
void where(const long long *args, long long start, long long end, long long total) {
  long long *cpu = (long long *)(__INTPTR_TYPE__)args[0];
  unsigned long *who = (unsigned long *)(__INTPTR_TYPE__)args[1];
  if (start == 0 && args[2] > 0) usleep((useconds_t)args[2]);
  for (long long i = start; i < end; i++) { cpu[i] = sched_getcpu(); who[i] = (unsigned long)pthread_self(); }
}
"""


def _usable_cpus() -> list[int]:
    if not hasattr(os, "sched_getaffinity") or not sys.platform.startswith("linux"):
        pytest.skip("binding threads to CPUs is done on Linux only")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(f"this process may run on {len(cpus)} CPU: nothing to bind workers apart")
    return cpus


def _bound_threads() -> dict[int, set[int]]:
    """This process's threads that may run on one CPU only: thread id -> that CPU."""
    bound = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            allowed = os.sched_getaffinity(int(tid))
        except OSError:  # the thread ended meanwhile
            continue
        if len(allowed) == 1:
            bound[int(tid)] = allowed
    return bound


@pytest.mark.parametrize("kind_name", POOL_KINDS)
def test_a_pinned_pool_binds_one_worker_to_each_cpu_and_leaves_out_the_callers(kind_name: str) -> None:
    kind = _pool_kind(kind_name)
    # An unbound worker woken after a sleep is often put on the caller's core, and both then share it for the
    # whole kernel (a 1024 matmul after 50 ms idle: 1.7x slower on a 2-core machine). Bound, each worker has
    # its core, and the caller's core's worker sits the launch out.
    cpus = _usable_cpus()
    before = _bound_threads()
    pool = kind(len(cpus), cpus=cpus)
    lib = load_library(CCompiler().compile_cached(CPU_TASK))
    fn = ctypes.cast(lib.where, ctypes.c_void_p).value
    total = 8 * len(cpus)
    ran_on, who = np.full(total, -1, np.int64), np.zeros(total, np.uint64)
    args = (ctypes.c_longlong * 3)(ran_on.ctypes.data, who.ctypes.data, 20_000)
    results: list[Any] = []

    def caller(cpu: int) -> None:
        os.sched_setaffinity(0, {cpu})  # this test thread only: the caller sits on a known CPU
        try:
            for _ in range(3):
                used = pool.run(fn, args, total, len(cpus))
                me = threading.get_ident()
                results.append((used, {int(c) for c, w in zip(ran_on, who, strict=True) if int(w) != me}))
        except BaseException as e:
            results.append(e)

    try:
        pool.run(fn, args, total, len(cpus))  # starts the workers
        assert pool.pinned and pool.size() == len(cpus)
        new = {tid: c for tid, c in _bound_threads().items() if tid not in before}
        assert sorted(c for allowed in new.values() for c in allowed) == cpus, new
        for cpu in cpus[:2]:
            t = threading.Thread(target=caller, args=(cpu,))
            t.start()
            t.join()
            for result in results:
                assert not isinstance(result, BaseException), result
                used, worker_cpus = result
                assert used == len(cpus)
                assert cpu not in worker_cpus, f"a worker ran on the caller's CPU {cpu}: {worker_cpus}"
            results.clear()
    finally:
        pool.close()


@pytest.mark.parametrize("kind_name", POOL_KINDS)
def test_a_pool_whose_cpus_are_not_the_callers_runs_unbound(kind_name: str) -> None:
    kind = _pool_kind(kind_name)
    cpus = _usable_cpus()
    results: list[Any] = []

    def start(pool: Any, narrow: bool) -> None:
        try:
            if narrow:  # the program narrowed its affinity after the device chose the CPUs: bind nothing outside it
                os.sched_setaffinity(0, {cpus[0]})
            task = CountTask(50)
            for _ in range(10):
                assert task.run(pool, 2) == 2
            np.testing.assert_array_equal(task.hits, np.full(50, 10, np.int64))
            results.append((pool.pinned, pool.size()))
        except BaseException as e:
            results.append(e)

    for pool, narrow in ((kind(2, cpus=[cpus[0], 1 << 20]), False), (kind(len(cpus), cpus=cpus), True)):
        try:
            t = threading.Thread(target=start, args=(pool, narrow))  # its own thread: the narrowing stays there
            t.start()
            t.join()
            assert not isinstance(results[-1], BaseException), results[-1]
            assert results[-1] == (False, pool.n_threads)
        finally:
            pool.close()


def test_a_pinned_pool_needs_one_cpu_per_thread() -> None:
    with pytest.raises(ValueError, match="needs 3 CPUs"):
        ThreadPool(3, cpus=[0, 1])
    with pytest.raises(ValueError, match="needs 3 CPUs"):
        PythonThreadPool(3, cpus=[0])


def test_workers_are_bound_only_when_the_pool_uses_every_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg_backend_cpu.thread_count import PIN_ENV, pinned_cpus

    cpus = _usable_cpus()
    monkeypatch.delenv(PIN_ENV, raising=False)
    assert pinned_cpus(len(cpus)) == cpus
    assert pinned_cpus(len(cpus) - 1) == []  # CPU_THREADS below the CPUs, or a quota: the scheduler places them
    assert pinned_cpus(len(cpus) + 1) == []
    assert pinned_cpus(1) == []
    monkeypatch.setenv(PIN_ENV, "0")
    assert pinned_cpus(len(cpus)) == []
