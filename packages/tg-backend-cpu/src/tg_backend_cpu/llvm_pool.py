"""The thread pool of thread_pool.c, written in LLVM IR, for the LLVM path: no C compiler needed to build it.

The IR defines the same functions with the same behaviour as thread_pool.c (that file's comment explains the design:
mailboxes, claiming, spinning then sleeping, the caller's floating-point environment, pinned workers), compiled by
llvmlite like a kernel, kept in the compile cache like one, and loaded in process by llvm_loader.py. `ThreadPool`
and the TinyJit replay loop drive it through the same ctypes signatures as the C library.

It calls the POSIX threads API and libc/libm (pthread_*, fegetenv/fesetenv, clock_gettime, posix_memalign), which
the loader resolves against the symbols this process already has. Their opaque types (mutexes, condition
variables, fenv_t) are given more room than any libc's uses (`OPAQUE_BYTES`): the IR never looks inside them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from string import Template
from types import SimpleNamespace
from typing import Any

#: bytes kept for each pthread_mutex_t, pthread_cond_t and fenv_t: more than any libc's (glibc x86-64: 40, 48, 32;
#: aarch64 and macOS no more than 64)
OPAQUE_BYTES = 128

# the mailbox of one worker (`struct tg_mailbox` in thread_pool.c), by byte offset; a cache line multiple
MAILBOX = {"MB_LOCK": 0, "MB_WAKE": 128, "MB_GEN": 256, "MB_CLAIMED": 260, "MB_QUIT": 264, "MB_CPU": 268,
           "MB_FN": 272, "MB_ARGS": 280, "MB_START": 288, "MB_END": 296, "MB_TOTAL": 304, "MB_POOL": 312,
           "MB_THREAD": 320, "MB_FENV": 384, "MB_SIZE": 512}
# the pool (`tg_pool`)
POOL = {"P_NTHREADS": 0, "P_NWORKERS": 4, "P_PINNED": 8, "P_SPIN": 16, "P_BOXES": 24, "P_REMAINING": 32,
        "P_BUSY": 36, "P_DONE_LOCK": 64, "P_DONE": 192, "P_SIZE": 320}

#: the exported functions and their ctypes signatures (restype, *argtypes), as thread_pool.py declares the C ones
FUNCTIONS: dict[str, tuple[Any, ...]] = {
    "tg_pool_create": (ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.POINTER(ctypes.c_int), ctypes.c_int),
    "tg_pool_size": (ctypes.c_int, ctypes.c_void_p),
    "tg_pool_pinned": (ctypes.c_int, ctypes.c_void_p),
    "tg_pool_run": (ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_longlong),
                    ctypes.c_longlong, ctypes.c_int),
    "tg_pool_destroy": (None, ctypes.c_void_p),
    "tg_run_all": (None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong),
}

_IR = Template("""
declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_mutex_destroy(ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_signal(ptr)
declare i32 @pthread_cond_destroy(ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
declare i32 @fegetenv(ptr)
declare i32 @fesetenv(ptr)
declare i32 @clock_gettime(i32, ptr)
declare ptr @calloc(i64, i64)
declare i32 @posix_memalign(ptr, i64, i64)
declare void @free(ptr)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
$platform_decls

define internal i64 @tg_now_ns() {
  %ts = alloca [2 x i64], align 8
  %rc = call i32 @clock_gettime(i32 $clock_monotonic, ptr %ts)
  %s = load i64, ptr %ts, align 8
  %np = getelementptr i8, ptr %ts, i64 8
  %n = load i64, ptr %np, align 8
  %sn = mul i64 %s, 1000000000
  %r = add i64 %sn, %n
  ret i64 %r
}

; spin while (*word == value) == while_equal, for at most spin_ns (the clock read every 64 pauses); the last value
define internal i32 @tg_spin(ptr %word, i32 %value, i1 %while_equal, i64 %spin_ns) {
entry:
  %v0 = load atomic i32, ptr %word acquire, align 4
  %eq0 = icmp eq i32 %v0, %value
  %go0 = icmp eq i1 %eq0, %while_equal
  %timed = icmp sgt i64 %spin_ns, 0
  %start = and i1 %go0, %timed
  br i1 %start, label %begin, label %early
early:
  ret i32 %v0
begin:
  %now = call i64 @tg_now_ns()
  %deadline = add i64 %now, %spin_ns
  br label %inner
inner:
  %i = phi i32 [ 0, %begin ], [ %i1, %more ], [ 0, %check ]
  $pause
  %v = load atomic i32, ptr %word acquire, align 4
  %eq = icmp eq i32 %v, %value
  %go = icmp eq i1 %eq, %while_equal
  br i1 %go, label %more_test, label %out
more_test:
  %i1 = add i32 %i, 1
  %again = icmp slt i32 %i1, 64
  br i1 %again, label %more, label %check
more:
  br label %inner
check:
  %t = call i64 @tg_now_ns()
  %late = icmp sge i64 %t, %deadline
  br i1 %late, label %out, label %inner
out:
  ret i32 %v
}

define internal void @tg_finish_slice(ptr %p) {
entry:
  %remp = getelementptr i8, ptr %p, i64 $P_REMAINING
  %old = atomicrmw sub ptr %remp, i32 1 acq_rel, align 4
  %last = icmp eq i32 %old, 1
  br i1 %last, label %signal, label %done
signal:
  %lock = getelementptr i8, ptr %p, i64 $P_DONE_LOCK
  %cond = getelementptr i8, ptr %p, i64 $P_DONE
  %a = call i32 @pthread_mutex_lock(ptr %lock)
  %b = call i32 @pthread_cond_signal(ptr %cond)
  %c = call i32 @pthread_mutex_unlock(ptr %lock)
  br label %done
done:
  ret void
}

define internal ptr @tg_worker(ptr %box) {
entry:
  %genp = getelementptr i8, ptr %box, i64 $MB_GEN
  %poolp = getelementptr i8, ptr %box, i64 $MB_POOL
  %pool = load ptr, ptr %poolp, align 8
  %spinp = getelementptr i8, ptr %pool, i64 $P_SPIN
  %lock = getelementptr i8, ptr %box, i64 $MB_LOCK
  %wake = getelementptr i8, ptr %box, i64 $MB_WAKE
  %quitp = getelementptr i8, ptr %box, i64 $MB_QUIT
  %claimedp = getelementptr i8, ptr %box, i64 $MB_CLAIMED
  %fenv = getelementptr i8, ptr %box, i64 $MB_FENV
  %fnp = getelementptr i8, ptr %box, i64 $MB_FN
  %argsp = getelementptr i8, ptr %box, i64 $MB_ARGS
  %startp = getelementptr i8, ptr %box, i64 $MB_START
  %endp = getelementptr i8, ptr %box, i64 $MB_END
  %totalp = getelementptr i8, ptr %box, i64 $MB_TOTAL
  br label %loop
loop:
  %seen = phi i32 [ 0, %entry ], [ %gen, %claim ], [ %gen, %run ]
  %spin = load i64, ptr %spinp, align 8
  %g0 = call i32 @tg_spin(ptr %genp, i32 %seen, i1 true, i64 %spin)
  %idle = icmp eq i32 %g0, %seen
  br i1 %idle, label %sleep, label %woke
sleep:
  %l = call i32 @pthread_mutex_lock(ptr %lock)
  br label %wait_check
wait_check:
  %g1 = load atomic i32, ptr %genp acquire, align 4
  %same = icmp eq i32 %g1, %seen
  br i1 %same, label %wait, label %wait_done
wait:
  %w = call i32 @pthread_cond_wait(ptr %wake, ptr %lock)
  br label %wait_check
wait_done:
  %u = call i32 @pthread_mutex_unlock(ptr %lock)
  br label %woke
woke:
  %gen = phi i32 [ %g0, %loop ], [ %g1, %wait_done ]
  %q = load atomic i32, ptr %quitp monotonic, align 4
  %stop = icmp ne i32 %q, 0
  br i1 %stop, label %exit, label %claim
claim:
  %old = atomicrmw xchg ptr %claimedp, i32 1 acq_rel, align 4
  %mine = icmp eq i32 %old, 0
  br i1 %mine, label %run, label %loop
run:
  %e = call i32 @fesetenv(ptr %fenv)
  %fn = load ptr, ptr %fnp, align 8
  %args = load ptr, ptr %argsp, align 8
  %s = load i64, ptr %startp, align 8
  %en = load i64, ptr %endp, align 8
  %t = load i64, ptr %totalp, align 8
  call void %fn(ptr %args, i64 %s, i64 %en, i64 %t)
  call void @tg_finish_slice(ptr %pool)
  br label %loop
exit:
  ret ptr null
}

define internal void @tg_post(ptr %box) {
  %lock = getelementptr i8, ptr %box, i64 $MB_LOCK
  %wake = getelementptr i8, ptr %box, i64 $MB_WAKE
  %genp = getelementptr i8, ptr %box, i64 $MB_GEN
  %a = call i32 @pthread_mutex_lock(ptr %lock)
  %old = atomicrmw add ptr %genp, i32 1 release, align 4
  %b = call i32 @pthread_cond_signal(ptr %wake)
  %c = call i32 @pthread_mutex_unlock(ptr %lock)
  ret void
}

$platform_defs

define ptr @tg_pool_create(i32 %n_threads, i64 %spin_ns, ptr %cpus, i32 %n_cpus) {
entry:
  %p = call ptr @calloc(i64 1, i64 $P_SIZE)
  %nop = icmp eq ptr %p, null
  br i1 %nop, label %fail, label %got
fail:
  ret ptr null
got:
  store i32 %n_threads, ptr %p, align 4
  %several = icmp sgt i32 %n_cpus, 1
  %all = icmp eq i32 %n_cpus, %n_threads
  %pin = and i1 %several, %all
  %pin32 = zext i1 %pin to i32
  %pinnedp = getelementptr i8, ptr %p, i64 $P_PINNED
  store i32 %pin32, ptr %pinnedp, align 4
  %tm1 = sub i32 %n_threads, 1
  %tgt1 = icmp sgt i32 %n_threads, 1
  %unpinned_want = select i1 %tgt1, i32 %tm1, i32 0
  %want = select i1 %pin, i32 %n_cpus, i32 %unpinned_want
  %spinp = getelementptr i8, ptr %p, i64 $P_SPIN
  store i64 %spin_ns, ptr %spinp, align 8
  %dlock = getelementptr i8, ptr %p, i64 $P_DONE_LOCK
  %dcond = getelementptr i8, ptr %p, i64 $P_DONE
  %r0 = call i32 @pthread_mutex_init(ptr %dlock, ptr null)
  %r1 = call i32 @pthread_cond_init(ptr %dcond, ptr null)
  %any = icmp sgt i32 %want, 0
  br i1 %any, label %alloc, label %finish
alloc:
  %boxesp = getelementptr i8, ptr %p, i64 $P_BOXES
  %want64 = sext i32 %want to i64
  %bytes = mul i64 %want64, $MB_SIZE
  %rc = call i32 @posix_memalign(ptr %boxesp, i64 64, i64 %bytes)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %zero, label %nomem
nomem:
  %x = call i32 @pthread_cond_destroy(ptr %dcond)
  %y = call i32 @pthread_mutex_destroy(ptr %dlock)
  call void @free(ptr %p)
  ret ptr null
zero:
  %boxes = load ptr, ptr %boxesp, align 8
  call void @llvm.memset.p0.i64(ptr align 64 %boxes, i8 0, i64 %bytes, i1 false)
  br label %make
make:
  %i = phi i32 [ 0, %zero ], [ %i1, %made ]
  %i64 = sext i32 %i to i64
  %off = mul i64 %i64, $MB_SIZE
  %box = getelementptr i8, ptr %boxes, i64 %off
  %lock = getelementptr i8, ptr %box, i64 $MB_LOCK
  %wake = getelementptr i8, ptr %box, i64 $MB_WAKE
  %m0 = call i32 @pthread_mutex_init(ptr %lock, ptr null)
  %m1 = call i32 @pthread_cond_init(ptr %wake, ptr null)
  %claimedp = getelementptr i8, ptr %box, i64 $MB_CLAIMED
  store i32 1, ptr %claimedp, align 4
  %poolp = getelementptr i8, ptr %box, i64 $MB_POOL
  store ptr %p, ptr %poolp, align 8
  %cpup = getelementptr i8, ptr %box, i64 $MB_CPU
  store i32 -1, ptr %cpup, align 4
  %threadp = getelementptr i8, ptr %box, i64 $MB_THREAD
  %cr = call i32 @pthread_create(ptr %threadp, ptr null, ptr @tg_worker, ptr %box)
  %started = icmp eq i32 %cr, 0
  br i1 %started, label %count, label %refused
refused:
  %d0 = call i32 @pthread_cond_destroy(ptr %wake)
  %d1 = call i32 @pthread_mutex_destroy(ptr %lock)
  br label %made_all
count:
  %i1 = add i32 %i, 1
  %nworkersp = getelementptr i8, ptr %p, i64 $P_NWORKERS
  store i32 %i1, ptr %nworkersp, align 4
  %pinned_now = load i32, ptr %pinnedp, align 4
  %is_pinned = icmp ne i32 %pinned_now, 0
  br i1 %is_pinned, label %bind, label %made
bind:
  %thread = load i64, ptr %threadp, align 8
  %mycpu = getelementptr i32, ptr %cpus, i64 %i64
  %bound = call i32 @tg_bind(i64 %thread, ptr %mycpu, i32 1)
  %bound_ok = icmp ne i32 %bound, 0
  br i1 %bound_ok, label %bind_ok, label %bind_no
bind_ok:
  %c = load i32, ptr %mycpu, align 4
  store i32 %c, ptr %cpup, align 4
  br label %made
bind_no:
  store i32 0, ptr %pinnedp, align 4
  br label %made
made:
  %more = icmp slt i32 %i1, %want
  br i1 %more, label %make, label %made_all
made_all:
  %nworkersp2 = getelementptr i8, ptr %p, i64 $P_NWORKERS
  %nw = load i32, ptr %nworkersp2, align 4
  %short = icmp slt i32 %nw, %n_cpus
  br i1 %short, label %unpin, label %check_unpinned
unpin:
  store i32 0, ptr %pinnedp, align 4
  br label %check_unpinned
check_unpinned:
  %pinned_end = load i32, ptr %pinnedp, align 4
  %unpinned = icmp eq i32 %pinned_end, 0
  %has_workers = icmp sgt i32 %nw, 0
  %rebind = and i1 %unpinned, %has_workers
  br i1 %rebind, label %release, label %finish
release:
  %j = phi i32 [ 0, %check_unpinned ], [ %j1, %release_next ]
  %j64 = sext i32 %j to i64
  %joff = mul i64 %j64, $MB_SIZE
  %jbox = getelementptr i8, ptr %boxes, i64 %joff
  %jcpup = getelementptr i8, ptr %jbox, i64 $MB_CPU
  %jcpu = load i32, ptr %jcpup, align 4
  %was_bound = icmp sge i32 %jcpu, 0
  br i1 %was_bound, label %release_one, label %release_next
release_one:
  %jthreadp = getelementptr i8, ptr %jbox, i64 $MB_THREAD
  %jthread = load i64, ptr %jthreadp, align 8
  %rb = call i32 @tg_bind(i64 %jthread, ptr %cpus, i32 %n_cpus)
  store i32 -1, ptr %jcpup, align 4
  br label %release_next
release_next:
  %j1 = add i32 %j, 1
  %jmore = icmp slt i32 %j1, %nw
  br i1 %jmore, label %release, label %finish
finish:
  ret ptr %p
}

define i32 @tg_pool_size(ptr %p) {
  %pinnedp = getelementptr i8, ptr %p, i64 $P_PINNED
  %pinned = load i32, ptr %pinnedp, align 4
  %nwp = getelementptr i8, ptr %p, i64 $P_NWORKERS
  %nw = load i32, ptr %nwp, align 4
  %nt = load i32, ptr %p, align 4
  %nw1 = add i32 %nw, 1
  %fewer = icmp slt i32 %nw1, %nt
  %unpinned = select i1 %fewer, i32 %nw1, i32 %nt
  %is_pinned = icmp ne i32 %pinned, 0
  %size = select i1 %is_pinned, i32 %nw, i32 %unpinned
  ret i32 %size
}

define i32 @tg_pool_pinned(ptr %p) {
  %pinnedp = getelementptr i8, ptr %p, i64 $P_PINNED
  %pinned = load i32, ptr %pinnedp, align 4
  ret i32 %pinned
}

define internal ptr @tg_box_for(ptr %boxes, i32 %i, i32 %skip) {
  %im1 = sub i32 %i, 1
  %before = icmp slt i32 %im1, %skip
  %idx = select i1 %before, i32 %im1, i32 %i
  %idx64 = sext i32 %idx to i64
  %off = mul i64 %idx64, $MB_SIZE
  %box = getelementptr i8, ptr %boxes, i64 %off
  ret ptr %box
}

define i32 @tg_pool_run(ptr %p, ptr %fn, ptr %args, i64 %total, i32 %n_parts) {
entry:
  %size = call i32 @tg_pool_size(ptr %p)
  %over = icmp sgt i32 %n_parts, %size
  %n0 = select i1 %over, i32 %size, i32 %n_parts
  %n0_64 = sext i32 %n0 to i64
  %past = icmp sgt i64 %n0_64, %total
  %total32 = trunc i64 %total to i32
  %n1 = select i1 %past, i32 %total32, i32 %n0
  %low = icmp slt i32 %n1, 1
  %n = select i1 %low, i32 1, i32 %n1
  %one = icmp eq i32 %n, 1
  br i1 %one, label %alone, label %try
try:
  %busyp = getelementptr i8, ptr %p, i64 $P_BUSY
  %was = atomicrmw xchg ptr %busyp, i8 1 acquire, align 1
  %taken = icmp ne i8 %was, 0
  br i1 %taken, label %alone, label %split
alone:
  call void %fn(ptr %args, i64 0, i64 %total, i64 %total)
  ret i32 1
split:
  %remp = getelementptr i8, ptr %p, i64 $P_REMAINING
  %nm1 = sub i32 %n, 1
  store atomic i32 %nm1, ptr %remp monotonic, align 4
  %fenv = alloca [$OPAQUE x i8], align 16
  %fe = call i32 @fegetenv(ptr %fenv)
  %nwp = getelementptr i8, ptr %p, i64 $P_NWORKERS
  %nw = load i32, ptr %nwp, align 4
  %boxesp = getelementptr i8, ptr %p, i64 $P_BOXES
  %boxes = load ptr, ptr %boxesp, align 8
  %pinnedp = getelementptr i8, ptr %p, i64 $P_PINNED
  %pinned = load i32, ptr %pinnedp, align 4
  %is_pinned = icmp ne i32 %pinned, 0
  %any_workers = icmp sgt i32 %nw, 0
  %look = and i1 %is_pinned, %any_workers
  br i1 %look, label %where, label %post_start
where:
  %cpu = call i32 @tg_current_cpu()
  br label %find
find:
  %w = phi i32 [ 0, %where ], [ %w1, %find_next ]
  %skip_f = phi i32 [ %nw, %where ], [ %skip_n, %find_next ]
  %w64 = sext i32 %w to i64
  %woff = mul i64 %w64, $MB_SIZE
  %wbox = getelementptr i8, ptr %boxes, i64 %woff
  %wcpup = getelementptr i8, ptr %wbox, i64 $MB_CPU
  %wcpu = load i32, ptr %wcpup, align 4
  %here = icmp eq i32 %wcpu, %cpu
  %skip_n = select i1 %here, i32 %w, i32 %skip_f
  br label %find_next
find_next:
  %w1 = add i32 %w, 1
  %wmore = icmp slt i32 %w1, %nw
  br i1 %wmore, label %find, label %post_start
post_start:
  %skip = phi i32 [ %nw, %split ], [ %skip_n, %find_next ]
  %n64 = sext i32 %n to i64
  br label %post
post:
  %i = phi i32 [ 1, %post_start ], [ %i1, %post ]
  %box = call ptr @tg_box_for(ptr %boxes, i32 %i, i32 %skip)
  %i64 = sext i32 %i to i64
  %lo_mul = mul i64 %total, %i64
  %lo = sdiv i64 %lo_mul, %n64
  %ip1 = add i64 %i64, 1
  %hi_mul = mul i64 %total, %ip1
  %hi = sdiv i64 %hi_mul, %n64
  %fnp = getelementptr i8, ptr %box, i64 $MB_FN
  store ptr %fn, ptr %fnp, align 8
  %argsp = getelementptr i8, ptr %box, i64 $MB_ARGS
  store ptr %args, ptr %argsp, align 8
  %startp = getelementptr i8, ptr %box, i64 $MB_START
  store i64 %lo, ptr %startp, align 8
  %endp = getelementptr i8, ptr %box, i64 $MB_END
  store i64 %hi, ptr %endp, align 8
  %totalp = getelementptr i8, ptr %box, i64 $MB_TOTAL
  store i64 %total, ptr %totalp, align 8
  %bfenv = getelementptr i8, ptr %box, i64 $MB_FENV
  call void @llvm.memcpy.p0.p0.i64(ptr align 16 %bfenv, ptr align 16 %fenv, i64 $OPAQUE, i1 false)
  %claimedp = getelementptr i8, ptr %box, i64 $MB_CLAIMED
  store atomic i32 0, ptr %claimedp release, align 4
  call void @tg_post(ptr %box)
  %i1 = add i32 %i, 1
  %pmore = icmp slt i32 %i1, %n
  br i1 %pmore, label %post, label %own
own:
  %first_end = sdiv i64 %total, %n64
  call void %fn(ptr %args, i64 0, i64 %first_end, i64 %total)
  br label %steal
steal:
  %k = phi i32 [ %nm1, %own ], [ %k1, %steal_next ]
  %kbox = call ptr @tg_box_for(ptr %boxes, i32 %k, i32 %skip)
  %kclaimedp = getelementptr i8, ptr %kbox, i64 $MB_CLAIMED
  %kold = atomicrmw xchg ptr %kclaimedp, i32 1 acq_rel, align 4
  %kfree = icmp eq i32 %kold, 0
  br i1 %kfree, label %steal_run, label %steal_next
steal_run:
  %kstartp = getelementptr i8, ptr %kbox, i64 $MB_START
  %ks = load i64, ptr %kstartp, align 8
  %kendp = getelementptr i8, ptr %kbox, i64 $MB_END
  %ke = load i64, ptr %kendp, align 8
  call void %fn(ptr %args, i64 %ks, i64 %ke, i64 %total)
  %kr = atomicrmw sub ptr %remp, i32 1 acq_rel, align 4
  br label %steal_next
steal_next:
  %k1 = sub i32 %k, 1
  %kmore = icmp sge i32 %k1, 1
  br i1 %kmore, label %steal, label %gather
gather:
  %spinp = getelementptr i8, ptr %p, i64 $P_SPIN
  %spin = load i64, ptr %spinp, align 8
  %left = call i32 @tg_spin(ptr %remp, i32 0, i1 false, i64 %spin)
  %pending = icmp ne i32 %left, 0
  br i1 %pending, label %sleep, label %finish
sleep:
  %dlock = getelementptr i8, ptr %p, i64 $P_DONE_LOCK
  %dcond = getelementptr i8, ptr %p, i64 $P_DONE
  %a = call i32 @pthread_mutex_lock(ptr %dlock)
  br label %sleep_check
sleep_check:
  %r = load atomic i32, ptr %remp acquire, align 4
  %still = icmp ne i32 %r, 0
  br i1 %still, label %sleep_wait, label %sleep_done
sleep_wait:
  %sw = call i32 @pthread_cond_wait(ptr %dcond, ptr %dlock)
  br label %sleep_check
sleep_done:
  %b = call i32 @pthread_mutex_unlock(ptr %dlock)
  br label %finish
finish:
  store atomic i8 0, ptr %busyp release, align 1
  ret i32 %n
}

define void @tg_run_all(ptr %p, ptr %launches, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %next ]
  %off = mul i64 %i, 32
  %l = getelementptr i8, ptr %launches, i64 %off
  %run = load ptr, ptr %l, align 8
  %slicep = getelementptr i8, ptr %l, i64 8
  %slice = load ptr, ptr %slicep, align 8
  %argsp = getelementptr i8, ptr %l, i64 16
  %args = load ptr, ptr %argsp, align 8
  %partsp = getelementptr i8, ptr %l, i64 24
  %parts = load i64, ptr %partsp, align 8
  %nopool = icmp eq ptr %p, null
  %single = icmp sle i64 %parts, 1
  %whole = or i1 %nopool, %single
  br i1 %whole, label %run_whole, label %run_split
run_whole:
  call void %run(ptr %args)
  br label %next
run_split:
  %parts32 = trunc i64 %parts to i32
  %used = call i32 @tg_pool_run(ptr %p, ptr %slice, ptr %args, i64 %parts, i32 %parts32)
  br label %next
next:
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}

define void @tg_pool_destroy(ptr %p) {
entry:
  %isnull = icmp eq ptr %p, null
  br i1 %isnull, label %done, label %go
go:
  %nwp = getelementptr i8, ptr %p, i64 $P_NWORKERS
  %nw = load i32, ptr %nwp, align 4
  %boxesp = getelementptr i8, ptr %p, i64 $P_BOXES
  %boxes = load ptr, ptr %boxesp, align 8
  %any = icmp sgt i32 %nw, 0
  br i1 %any, label %stop, label %free_all
stop:
  %i = phi i32 [ 0, %go ], [ %i1, %stop ]
  %i64 = sext i32 %i to i64
  %off = mul i64 %i64, $MB_SIZE
  %box = getelementptr i8, ptr %boxes, i64 %off
  %quitp = getelementptr i8, ptr %box, i64 $MB_QUIT
  store atomic i32 1, ptr %quitp monotonic, align 4
  call void @tg_post(ptr %box)
  %i1 = add i32 %i, 1
  %more = icmp slt i32 %i1, %nw
  br i1 %more, label %stop, label %join
join:
  %j = phi i32 [ 0, %stop ], [ %j1, %join ]
  %j64 = sext i32 %j to i64
  %joff = mul i64 %j64, $MB_SIZE
  %jbox = getelementptr i8, ptr %boxes, i64 %joff
  %threadp = getelementptr i8, ptr %jbox, i64 $MB_THREAD
  %thread = load i64, ptr %threadp, align 8
  %r0 = call i32 @pthread_join(i64 %thread, ptr null)
  %wake = getelementptr i8, ptr %jbox, i64 $MB_WAKE
  %r1 = call i32 @pthread_cond_destroy(ptr %wake)
  %lock = getelementptr i8, ptr %jbox, i64 $MB_LOCK
  %r2 = call i32 @pthread_mutex_destroy(ptr %lock)
  %j1 = add i32 %j, 1
  %jmore = icmp slt i32 %j1, %nw
  br i1 %jmore, label %join, label %free_all
free_all:
  %dcond = getelementptr i8, ptr %p, i64 $P_DONE
  %r3 = call i32 @pthread_cond_destroy(ptr %dcond)
  %dlock = getelementptr i8, ptr %p, i64 $P_DONE_LOCK
  %r4 = call i32 @pthread_mutex_destroy(ptr %dlock)
  call void @free(ptr %boxes)
  call void @free(ptr %p)
  br label %done
done:
  ret void
}
""")

# Linux: workers bound to CPUs with pthread_setaffinity_np (a cpu_set_t is 1024 bits), the caller's CPU from
# sched_getcpu. Elsewhere a pool is never pinned (thread_count.pinned_cpus asks only on Linux).
_LINUX_DECLS = """
declare i32 @sched_getcpu()
declare i32 @pthread_setaffinity_np(i64, i64, ptr)
"""
_LINUX_DEFS = """
define internal i32 @tg_current_cpu() {
  %c = call i32 @sched_getcpu()
  ret i32 %c
}

; bind a thread to the CPUs cpus[0..n); 1 when the system agreed
define internal i32 @tg_bind(i64 %thread, ptr %cpus, i32 %n) {
entry:
  %set = alloca [16 x i64], align 8
  call void @llvm.memset.p0.i64(ptr align 8 %set, i8 0, i64 128, i1 false)
  %some = icmp sgt i32 %n, 0
  br i1 %some, label %loop, label %apply
loop:
  %i = phi i32 [ 0, %entry ], [ %i1, %next ]
  %count = phi i32 [ 0, %entry ], [ %count1, %next ]
  %i64 = sext i32 %i to i64
  %cp = getelementptr i32, ptr %cpus, i64 %i64
  %c = load i32, ptr %cp, align 4
  %ge0 = icmp sge i32 %c, 0
  %lt = icmp slt i32 %c, 1024
  %ok = and i1 %ge0, %lt
  br i1 %ok, label %set_bit, label %next
set_bit:
  %c64 = sext i32 %c to i64
  %word = lshr i64 %c64, 6
  %bitn = and i64 %c64, 63
  %bit = shl i64 1, %bitn
  %wp = getelementptr i64, ptr %set, i64 %word
  %old = load i64, ptr %wp, align 8
  %new = or i64 %old, %bit
  store i64 %new, ptr %wp, align 8
  br label %next
next:
  %added = zext i1 %ok to i32
  %count1 = add i32 %count, %added
  %i1 = add i32 %i, 1
  %more = icmp slt i32 %i1, %n
  br i1 %more, label %loop, label %apply
apply:
  %total = phi i32 [ 0, %entry ], [ %count1, %next ]
  %none = icmp eq i32 %total, 0
  br i1 %none, label %refuse, label %apply_set
apply_set:
  %r = call i32 @pthread_setaffinity_np(i64 %thread, i64 128, ptr %set)
  %agreed = icmp eq i32 %r, 0
  %res = zext i1 %agreed to i32
  ret i32 %res
refuse:
  ret i32 0
}
"""
_OTHER_DEFS = """
define internal i32 @tg_current_cpu() {
  ret i32 -1
}

define internal i32 @tg_bind(i64 %thread, ptr %cpus, i32 %n) {
  ret i32 0
}
"""


def pool_ir(machine: str, linux: bool) -> str:
    """The pool's IR for a target: `machine` names the pause hint a spinning thread gives the core."""
    if machine.startswith(("x86_64", "i686", "i386")):
        pause, intrinsic = "call void @llvm.x86.sse2.pause()", "declare void @llvm.x86.sse2.pause()"
    elif machine.startswith(("aarch64", "arm64")):
        pause, intrinsic = "call void @llvm.aarch64.hint(i32 1)", "declare void @llvm.aarch64.hint(i32)"
    else:
        pause, intrinsic = "", ""
    # CLOCK_MONOTONIC's number: 1 on Linux and the BSDs' glibc-alikes, 6 on macOS
    clock = 6 if sys.platform == "darwin" else 1
    return _IR.substitute(MAILBOX, **POOL, OPAQUE=OPAQUE_BYTES, pause=pause, clock_monotonic=clock,
                          platform_decls=intrinsic + (_LINUX_DECLS if linux else ""),
                          platform_defs=_LINUX_DEFS if linux else _OTHER_DEFS)


def available() -> bool:
    """Whether this platform has the POSIX threads the IR calls (not Windows)."""
    return os.name == "posix"


@functools.cache
def llvm_pool_library() -> SimpleNamespace:
    """The pool's functions, compiled (or read from the compile cache) and loaded: ctypes callables under the C
    library's names."""
    from tg_backend_cpu.llvm_compiler import LLVMCompiler, llvmlite_binding
    from tg_backend_cpu.llvm_loader import load_object

    llvm = llvmlite_binding()
    # fegetenv and fesetenv live in libm, which the interpreter need not have loaded
    if (libm := ctypes.util.find_library("m")) is not None:
        try:
            llvm.load_library_permanently(libm)
        except RuntimeError:
            pass  # then the C library itself has them (macOS, musl), or loading the object says which is missing
    triple = llvm.get_process_triple()
    obj = LLVMCompiler().compile_cached(pool_ir(triple.split("-")[0], "linux" in triple))
    addresses = load_object(obj, tuple(FUNCTIONS), ())
    return SimpleNamespace(**{name: ctypes.CFUNCTYPE(*signature)(addresses[name])
                              for name, signature in FUNCTIONS.items()})
