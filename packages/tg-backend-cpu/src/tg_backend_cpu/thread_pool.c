/* The CPU backend's thread pool: persistent workers that each run one slice of a kernel's outer loop.
 *
 * tg_pool_run(pool, fn, args, total, n_parts) splits [0, total) into n_parts contiguous slices; slice 0 runs on
 * the calling thread, slice i on worker i-1, and the call returns when every slice is done. One job per call,
 * so Python makes one ctypes call per kernel launch and never runs in the loop; tg_run_all runs a sequence of
 * launches (a TinyJit replay) from one call.
 *
 * Every worker has its own mailbox (one slice + a generation counter + a `claimed` flag). Whoever swaps `claimed`
 * from 0 to 1 runs the slice: the worker when it wakes, or the caller once its own slice is done and the worker
 * has not started yet - so a worker the OS does not schedule (a busy machine) delays nothing; the caller does
 * its slice too. The caller writes a mailbox only when no one runs its previous slice, and publishes the fields
 * with the release store of `claimed = 0`, which the claimer's exchange acquires: a late worker never sees a
 * half-written slice. An idle worker spins briefly (back-to-back launches then skip the sleep/wake round trip)
 * and then sleeps on a condition variable, so an idle pool costs no CPU. Only the workers a job needs are woken.
 *
 * Each slice runs under the caller's floating-point environment (rounding mode, flush-to-zero/denormals-are-zero
 * as a library such as torch may set them on the calling thread): otherwise the caller's slice and the workers'
 * could round differently, and results would depend on the thread count.
 *
 * A second caller that finds the pool busy (two Python threads launching at once) runs its whole job itself
 * rather than waiting or corrupting the mailboxes; results are the same, only slower.
 *
 * Pinned pools (Linux, when the process uses every CPU it may run on): one worker per CPU, each bound to it, and a
 * job skips the worker on the caller's CPU. An unpinned worker woken after a sleep is often placed on the waking
 * caller's CPU, and the two then share one core for the whole kernel while another core idles (the scheduler
 * moves one of them too late); a bound worker always runs on its own core.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getcpu, pthread_setaffinity_np */
#endif
#include <fenv.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*tg_task_fn)(const long long *args, long long start, long long end, long long total);


static inline void tg_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static long long tg_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Spin while (*word == value) == while_equal, for at most spin_ns; returns the last value read. The clock is
 * read every 64 pauses only: a pause costs 10-150 cycles depending on the processor, so counting them would not
 * bound the time. */
static unsigned tg_spin(atomic_uint *word, unsigned value, int while_equal, long long spin_ns) {
  unsigned v = atomic_load_explicit(word, memory_order_acquire);
  if ((v == value) != while_equal || spin_ns <= 0) return v;
  long long deadline = tg_now_ns() + spin_ns;
  for (;;) {
    for (int i = 0; i < 64; i++) {
      tg_cpu_relax();
      if (((v = atomic_load_explicit(word, memory_order_acquire)) == value) != while_equal) return v;
    }
    if (tg_now_ns() >= deadline) return v;
  }
}

struct tg_mailbox {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  atomic_uint generation; /* bumped by the caller once the slice below is written */
  atomic_int claimed;     /* 0: the slice below waits for a thread; 1: taken (or none posted) */
  atomic_int quit;        /* set (before a generation bump) to stop the worker */
  tg_task_fn fn;
  const long long *args;
  long long start, end, total;
  fenv_t fp_env;          /* the caller's floating-point environment */
  int cpu;                /* the CPU this worker is bound to, or -1 */
  struct tg_pool *pool;
  pthread_t thread;
} __attribute__((aligned(64)));

typedef struct tg_pool {
  int n_threads;     /* the most threads a job uses */
  int n_workers;
  int pinned;        /* one worker bound to each CPU; a job leaves out the one on the caller's CPU */
  long long spin_ns; /* how long an idle thread spins before it sleeps */
  struct tg_mailbox *boxes;
  atomic_uint remaining; /* slices of the current job, posted to mailboxes, not yet done */
  pthread_mutex_t done_lock;
  pthread_cond_t done;
  atomic_flag busy; /* held by the caller of a running job */
} tg_pool;

static void tg_finish_slice(tg_pool *p) {
  if (atomic_fetch_sub_explicit(&p->remaining, 1, memory_order_acq_rel) == 1) {
    /* signal under the lock: the caller checks `remaining` under it before it sleeps, so no wake-up is lost */
    pthread_mutex_lock(&p->done_lock);
    pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->done_lock);
  }
}

static void *tg_worker(void *arg) {
  struct tg_mailbox *box = arg;
  unsigned seen = 0;
  for (;;) {
    unsigned gen = tg_spin(&box->generation, seen, 1, box->pool->spin_ns);
    if (gen == seen) {
      pthread_mutex_lock(&box->lock);
      while ((gen = atomic_load_explicit(&box->generation, memory_order_acquire)) == seen)
        pthread_cond_wait(&box->wake, &box->lock);
      pthread_mutex_unlock(&box->lock);
    }
    seen = gen;
    if (atomic_load_explicit(&box->quit, memory_order_relaxed)) return NULL;
    if (atomic_exchange_explicit(&box->claimed, 1, memory_order_acq_rel) == 0) {
      fesetenv(&box->fp_env);
      box->fn(box->args, box->start, box->end, box->total);
      tg_finish_slice(box->pool);
    }
  }
}

static void tg_post(struct tg_mailbox *box) {
  /* under the lock: a worker between its last look at `generation` and pthread_cond_wait cannot miss the signal */
  pthread_mutex_lock(&box->lock);
  atomic_fetch_add_explicit(&box->generation, 1, memory_order_release);
  pthread_cond_signal(&box->wake);
  pthread_mutex_unlock(&box->lock);
}

/* bind a thread to the CPUs cpus[0..n); returns whether the system agreed */
static int tg_bind(pthread_t thread, const int *cpus, int n) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < n; i++)
    if (cpus[i] >= 0 && cpus[i] < CPU_SETSIZE) CPU_SET(cpus[i], &set);
  return CPU_COUNT(&set) > 0 && pthread_setaffinity_np(thread, sizeof(set), &set) == 0;
#else
  (void)thread, (void)cpus, (void)n;
  return 0;
#endif
}

static int tg_current_cpu(void) {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

/* A pool for jobs of up to n_threads threads. Unpinned (n_cpus == 0): n_threads - 1 workers, the caller is the
 * n-th thread. Pinned: one worker bound to each of cpus[0..n_cpus), n_cpus == n_threads; if a worker cannot be
 * bound the pool falls back to unpinned. Returns NULL when nothing could be allocated; if the system refuses some
 * threads, the pool keeps the ones it got (tg_pool_size tells). */
tg_pool *tg_pool_create(int n_threads, long long spin_ns, const int *cpus, int n_cpus) {
  tg_pool *p = calloc(1, sizeof(tg_pool));
  if (p == NULL) return NULL;
  p->n_threads = n_threads;
  p->pinned = n_cpus > 1 && n_cpus == n_threads;
  int want = p->pinned ? n_cpus : (n_threads > 1 ? n_threads - 1 : 0);
  if (want > 0 && posix_memalign((void **)&p->boxes, 64, sizeof(struct tg_mailbox) * (size_t)want) != 0) {
    free(p);
    return NULL;
  }
  if (want > 0) memset(p->boxes, 0, sizeof(struct tg_mailbox) * (size_t)want);
  p->spin_ns = spin_ns;
  pthread_mutex_init(&p->done_lock, NULL);
  pthread_cond_init(&p->done, NULL);
  atomic_init(&p->remaining, 0);
  atomic_flag_clear(&p->busy);
  for (int i = 0; i < want; i++) {
    struct tg_mailbox *box = &p->boxes[i];
    pthread_mutex_init(&box->lock, NULL);
    pthread_cond_init(&box->wake, NULL);
    atomic_init(&box->generation, 0);
    atomic_init(&box->claimed, 1);
    atomic_init(&box->quit, 0);
    box->pool = p;
    box->cpu = -1;
    if (pthread_create(&box->thread, NULL, tg_worker, box) != 0) {
      pthread_cond_destroy(&box->wake);
      pthread_mutex_destroy(&box->lock);
      break;
    }
    p->n_workers = i + 1;
    if (p->pinned) {
      if (tg_bind(box->thread, &cpus[i], 1)) box->cpu = cpus[i];
      else p->pinned = 0;
    }
  }
  if (p->n_workers < n_cpus) p->pinned = 0;
  if (!p->pinned) { /* not every CPU got its worker: the bound ones go back to running on any of the CPUs */
    for (int i = 0; i < p->n_workers; i++)
      if (p->boxes[i].cpu >= 0) {
        tg_bind(p->boxes[i].thread, cpus, n_cpus);
        p->boxes[i].cpu = -1;
      }
  }
  return p;
}

/* threads a job can use: the caller plus the workers (pinned: minus the one on the caller's CPU) */
int tg_pool_size(const tg_pool *p) {
  if (p->pinned) return p->n_workers;
  return p->n_workers + 1 < p->n_threads ? p->n_workers + 1 : p->n_threads;
}

/* whether the workers are bound to CPUs */
int tg_pool_pinned(const tg_pool *p) { return p->pinned; }

/* Run fn over [0, total) in n_parts slices (capped at the pool's size); returns the number of slices used. */
int tg_pool_run(tg_pool *p, tg_task_fn fn, const long long *args, long long total, int n_parts) {
  int size = tg_pool_size(p);
  if (n_parts > size) n_parts = size;
  if (n_parts > total) n_parts = (int)total;  /* no empty slices; total may be 0 */
  if (n_parts < 1) n_parts = 1;
  if (n_parts == 1 || atomic_flag_test_and_set_explicit(&p->busy, memory_order_acquire)) {
    fn(args, 0, total, total);  /* one slice, or the pool is busy with another caller's job */
    return 1;
  }
  atomic_store_explicit(&p->remaining, (unsigned)(n_parts - 1), memory_order_relaxed);
  fenv_t fp_env;
  fegetenv(&fp_env);
  /* slice i goes to worker i - 1, or to worker i when the caller's CPU is that of a worker at or before it */
  int skip = p->n_workers; /* the worker bound to the caller's CPU, if any */
  if (p->pinned) {
    int cpu = tg_current_cpu();
    for (int w = 0; w < p->n_workers; w++)
      if (p->boxes[w].cpu == cpu) skip = w;
  }
  for (int i = 1; i < n_parts; i++) {
    struct tg_mailbox *box = &p->boxes[i - 1 < skip ? i - 1 : i];
    box->fn = fn;
    box->args = args;
    box->start = total * i / n_parts;
    box->end = total * (i + 1) / n_parts;
    box->total = total;
    box->fp_env = fp_env;
    atomic_store_explicit(&box->claimed, 0, memory_order_release);
    tg_post(box);
  }
  fn(args, 0, total / n_parts, total);
  /* slices no worker has started yet: run them here rather than wait for a thread the OS has not scheduled */
  for (int i = n_parts - 1; i >= 1; i--) {
    struct tg_mailbox *box = &p->boxes[i - 1 < skip ? i - 1 : i];
    if (atomic_exchange_explicit(&box->claimed, 1, memory_order_acq_rel) == 0) {
      fn(args, box->start, box->end, total);
      atomic_fetch_sub_explicit(&p->remaining, 1, memory_order_acq_rel);
    }
  }
  if (tg_spin(&p->remaining, 0, 0, p->spin_ns) != 0) {
    pthread_mutex_lock(&p->done_lock);
    while (atomic_load_explicit(&p->remaining, memory_order_acquire) != 0) pthread_cond_wait(&p->done, &p->done_lock);
    pthread_mutex_unlock(&p->done_lock);
  }
  atomic_flag_clear_explicit(&p->busy, memory_order_release);
  return n_parts;
}

/* One launch of a sequence: a kernel's whole-kernel and slice entry points, its argument array, and the slices it
 * runs in. */
typedef struct tg_launch {
  void (*run)(const long long *args);
  tg_task_fn slice;
  const long long *args;
  long long parts;
} tg_launch;

/* Run n launches one after the other as a launch of each alone would: on one part (or p NULL) the kernel's whole
 * entry point on the calling thread, else tg_pool_run over its slices. A TinyJit replay of captured kernels is
 * then one call from Python, not one per kernel. */
void tg_run_all(tg_pool *p, const tg_launch *launches, long long n) {
  for (long long i = 0; i < n; i++) {
    const tg_launch *l = &launches[i];
    if (p == NULL || l->parts <= 1) l->run(l->args);
    else tg_pool_run(p, l->slice, l->args, l->parts, (int)l->parts);
  }
}

/* Stop and join every worker, then free the pool. Must not race with tg_pool_run. */
void tg_pool_destroy(tg_pool *p) {
  if (p == NULL) return;
  for (int i = 0; i < p->n_workers; i++) {
    atomic_store_explicit(&p->boxes[i].quit, 1, memory_order_relaxed);
    tg_post(&p->boxes[i]);
  }
  for (int i = 0; i < p->n_workers; i++) {
    pthread_join(p->boxes[i].thread, NULL);
    pthread_cond_destroy(&p->boxes[i].wake);
    pthread_mutex_destroy(&p->boxes[i].lock);
  }
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->done_lock);
  free(p->boxes);
  free(p);
}
