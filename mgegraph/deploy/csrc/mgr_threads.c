/* The C runtime's thread pool (MegEngine Lite's thread count, mgr_set_threads): kernels split
 * their outputs into contiguous parts, one per thread, through mgr_parallel_for.
 *
 * Design: workers are started on first use and kept; the caller runs part 0 itself and waits
 * for the others, as ONNX Runtime's pool does, so one thread costs nothing. Each output is
 * computed by exactly one part, in the order one thread would compute it, so results are the
 * same bits on any thread count, whichever thread runs a part. One parallel_for runs at a time
 * in a process; a second, from another thread running another model, runs its parts on its own
 * thread (the same bits again).
 *
 * Parts are claimed, not assigned: a parallel_for's pieces (its parts, or for
 * mgr_parallel_for_each each unit) are taken in order from one counter, so the caller, done
 * with its own, runs those no worker has started rather than wait for a worker still waking.
 * Waiting is a bounded spin, then sleep, as OpenMP's and ONNX Runtime's pools wait: a worker
 * polls the generation for up to MGR_SPIN_NS after its pieces before it sleeps on a condition
 * variable, and the caller polls the count of pieces finished as long before it sleeps on
 * another. A wake through the futex is slow under KVM: on the 2-core AMD EPYC (Zen 3), a GEMV
 * of 3 MiB (mlp-infer's first, 56-73 us on one thread) split in two with both waits asleep took
 * 100 us: the caller's broadcast 13 us before its part began, the worker starting 31 us in and,
 * done at 66 us, its signal reaching the caller at 100 us (medians of 300 calls); with the
 * worker polling from the call before, 44 us. So a worker takes the next layer's parallel_for of
 * the same run (microseconds later) without a wake.
 *
 * Bounded, so that an oversubscribed machine never has a thread spinning for long: each wait
 * polls at most MGR_SPIN_NS, and none where the parallel_for's threads outnumber the CPUs this
 * process may run on (libgomp's throttled spin), where a polling thread would hold a core that
 * the part it waits for needs. Under load a longer poll loses: mlp-infer's three GEMVs at 2
 * threads against the pool that slept at once (in one process, interleaved, medians of 200;
 * load 4-11 from other sessions), pieces claimed, polls of 0, 5, 10 and 20 us: 0.76-0.96x,
 * 0.78-0.97x, 0.72-1.01x and 0.75-1.06x; a 50 us poll without claiming 1.19x. 10 us covers a
 * run's step from one layer's parallel_for to the next (a few us) with room to spare.
 *
 * fork(): the child has the pool's memory but none of its workers; the handlers hold both locks
 * across the fork, so the child's copy is taken between two parallel_fors, and the child starts
 * workers of its own on its first (its condition variables made anew: their waiters were the
 * parent's threads). */
#define _GNU_SOURCE /* sched_getaffinity */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "mgr_kernel.h"

#define MGR_MAX_THREADS 64
/* how long a wait polls before it sleeps (a -D may change it; 0: sleep at once) */
#ifndef MGR_SPIN_NS
#define MGR_SPIN_NS 10000
#endif

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    pthread_t workers[MGR_MAX_THREADS];
    int n_workers;
    int cpus; /* the CPUs this process may run on (0: not yet counted) */
    /* the generation (bumped for each parallel_for the workers take part in) above TICKET_BITS,
     * below them its next part not yet claimed: one word, so that a part is claimed only in
     * the generation whose work it belongs to */
    _Atomic uint64_t ticket;
    _Atomic uint64_t finished; /* pieces after the caller's first finished, over all generations */
    int pieces, threads, spin; /* this generation's pieces, its threads, whether they spin */
    int workers_asleep, caller_asleep;
    mgr_part_fn part;
    void* ctx;
    int64_t n;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

#define TICKET_BITS 16
#define MAX_PIECES ((1 << TICKET_BITS) - 1)

static pthread_mutex_t pool_in_use = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int run_threads = 1;

void mgr_set_run_threads(int threads) {
    run_threads = threads < 1 ? 1 : threads > MGR_MAX_THREADS ? MGR_MAX_THREADS : threads;
}

int mgr_run_threads(void) { return run_threads; }

/* piece k of [0, n) in `pieces` contiguous runs, the first n % pieces one longer */
static void run_piece(mgr_part_fn part, void* ctx, int64_t n, int pieces, int k) {
    int64_t size = n / pieces, extra = n % pieces;
    int64_t lo = k * size + (k < extra ? k : extra);
    int64_t hi = lo + size + (k < extra);
    if (hi > lo) part(ctx, lo, hi);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void relax(void) { /* a spin-wait hint: the core's other work goes first */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_ia32_pause();
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* polls *word until its bits above `shift` equal `value` (want 1) or differ from it (want 0),
 * for at most MGR_SPIN_NS: whether they did (else the caller sleeps) */
static int spin_until(_Atomic uint64_t* word, int shift, uint64_t value, int want) {
    if (MGR_SPIN_NS <= 0) return 0;
    int64_t deadline = now_ns() + MGR_SPIN_NS;
    for (unsigned polls = 1;; polls++) {
        if ((atomic_load_explicit(word, memory_order_acquire) >> shift == value) == want) return 1;
        relax();
        if (polls % 32 == 0 && now_ns() > deadline) return 0; /* a clock read per ~1 us */
    }
}

/* the next unclaimed piece of `generation` (of `pieces`), now claimed; 0 when none is left */
static int claim(uint64_t generation, int pieces) {
    uint64_t ticket = atomic_load(&pool.ticket);
    for (;;) {
        if (ticket >> TICKET_BITS != generation || (int)(ticket & MAX_PIECES) >= pieces) return 0;
        if (atomic_compare_exchange_weak(&pool.ticket, &ticket, ticket + 1))
            return (int)(ticket & MAX_PIECES);
    }
}

/* the pieces of `generation` still unclaimed, run here */
static void run_claimed(uint64_t generation, mgr_part_fn part, void* ctx, int64_t n, int pieces) {
    for (int k; (k = claim(generation, pieces)) > 0;) {
        run_piece(part, ctx, n, pieces, k);
        atomic_fetch_add(&pool.finished, 1);
    }
}

static void* worker(void* arg) {
    int k = (int)(intptr_t)arg; /* this worker takes part in generations of more than k threads */
    uint64_t seen = 0;
    int spin = 0; /* whether this worker took part in the last generation it saw, and spins */
    for (;;) {
        if (spin) spin_until(&pool.ticket, TICKET_BITS, seen, 0);
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.ticket) >> TICKET_BITS == seen) {
            pool.workers_asleep++;
            pthread_cond_wait(&pool.work, &pool.lock);
            pool.workers_asleep--;
        }
        seen = atomic_load(&pool.ticket) >> TICKET_BITS;
        spin = k < pool.threads && pool.spin;
        mgr_part_fn part = pool.part;
        void* ctx = pool.ctx;
        int64_t n = pool.n;
        int pieces = pool.pieces, threads = pool.threads;
        pthread_mutex_unlock(&pool.lock);
        if (k >= threads) continue;
        run_claimed(seen, part, ctx, n, pieces);
        pthread_mutex_lock(&pool.lock); /* a caller asleep before the last piece ended wakes */
        if (pool.caller_asleep) pthread_cond_signal(&pool.done);
        pthread_mutex_unlock(&pool.lock);
    }
    return NULL;
}

static int count_cpus(void) {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

static void before_fork(void) {
    pthread_mutex_lock(&pool_in_use);
    pthread_mutex_lock(&pool.lock);
}

static void after_fork_parent(void) {
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool_in_use);
}

static void after_fork_child(void) {
    pool.n_workers = pool.workers_asleep = pool.caller_asleep = 0;
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    after_fork_parent();
}

/* start workers up to `want` (as many as the system gives); how many there are */
static int workers_for(int want) {
    if (pool.cpus == 0) { /* the pool's first use */
        pool.cpus = count_cpus();
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    }
    while (pool.n_workers < want &&
           pthread_create(&pool.workers[pool.n_workers], NULL, worker,
                          (void*)(intptr_t)(pool.n_workers + 1)) == 0) {
        pthread_detach(pool.workers[pool.n_workers]);
        pool.n_workers++;
    }
    return pool.n_workers;
}

#ifdef MGR_PROFILE
static _Thread_local int parts_most; /* the most parts of this thread's calls since the last take */

int mgr_take_parts(void) {
    int most = parts_most;
    parts_most = 0;
    return most;
}
#endif

/* part over [0, n) in `pieces` contiguous runs, claimed in order by this thread (the first)
 * and up to `threads` - 1 workers */
static void share(int64_t n, int pieces, int threads, mgr_part_fn part, void* ctx) {
    if (threads <= 1 || pthread_mutex_trylock(&pool_in_use) != 0) {
#ifdef MGR_PROFILE
        if (n > 0 && parts_most < 1) parts_most = 1;
#endif
        if (n > 0) part(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    int workers = workers_for(threads - 1);
    threads = workers + 1 < threads ? workers + 1 : threads;
    pool.part = part;
    pool.ctx = ctx;
    pool.n = n;
    pool.pieces = pieces;
    pool.threads = threads;
    pool.spin = threads <= pool.cpus;
    uint64_t all_done = atomic_load(&pool.finished) + (uint64_t)(pieces - 1);
    uint64_t generation = (atomic_load(&pool.ticket) >> TICKET_BITS) + 1;
    atomic_store(&pool.ticket, generation << TICKET_BITS | 1); /* piece 0 is the caller's */
    int spin = pool.spin, wake = pool.workers_asleep > 0;
    pthread_mutex_unlock(&pool.lock);
    if (wake) pthread_cond_broadcast(&pool.work); /* (those asleep were counted under the lock) */
#ifdef MGR_PROFILE
    if (threads > parts_most) parts_most = threads;
#endif
    run_piece(part, ctx, n, pieces, 0);
    run_claimed(generation, part, ctx, n, pieces); /* those no worker has started yet */
    if (!spin || !spin_until(&pool.finished, 0, all_done, 1)) {
        pthread_mutex_lock(&pool.lock);
        pool.caller_asleep = 1;
        while (atomic_load(&pool.finished) != all_done) pthread_cond_wait(&pool.done, &pool.lock);
        pool.caller_asleep = 0;
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_mutex_unlock(&pool_in_use);
}

/* the threads a call over n units may use: at most `most` and the model's */
static int threads_upto(int64_t n, int64_t most) {
    int64_t cap = most < run_threads ? most : run_threads;
    return n < cap ? (int)n : (int)cap;
}

void mgr_parallel_for(int64_t n, mgr_part_fn part, void* ctx) {
    mgr_parallel_for_upto(n, run_threads, part, ctx);
}

void mgr_parallel_for_upto(int64_t n, int64_t most, mgr_part_fn part, void* ctx) {
    int threads = threads_upto(n, most);
    share(n, threads, threads, part, ctx);
}

void mgr_parallel_for_each(int64_t n, int64_t most, mgr_part_fn part, void* ctx) {
    share(n, n < MAX_PIECES ? (int)n : MAX_PIECES, threads_upto(n, most), part, ctx);
}
