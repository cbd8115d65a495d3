/* The C runtime's thread pool (MegEngine Lite's thread count, mgr_set_threads): kernels split
 * their outputs into contiguous parts, one per thread, through mgr_parallel_for.
 *
 * Design: workers are started on first use and kept, each waiting on a condition variable for
 * the next generation of work; the caller runs part 0 itself and waits for the others, as
 * ONNX Runtime's pool does, so one thread costs nothing and an oversubscribed machine never has
 * a spinning caller. Each output is computed by exactly one part, in the order one thread would
 * compute it, so results are the same bits on any thread count. One parallel_for runs at a time
 * in a process; a second, from another thread running another model, runs its parts on its own
 * thread (the same bits again). */
#include <pthread.h>
#include <stdint.h>

#include "mgr_kernel.h"

#define MGR_MAX_THREADS 64

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    pthread_t workers[MGR_MAX_THREADS];
    int n_workers;
    uint64_t generation; /* bumped for each parallel_for the workers take part in */
    int parts, pending;  /* this generation's parts, and those of workers not yet finished */
    mgr_part_fn part;
    void* ctx;
    int64_t n;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

static pthread_mutex_t pool_in_use = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int run_threads = 1;

void mgr_set_run_threads(int threads) {
    run_threads = threads < 1 ? 1 : threads > MGR_MAX_THREADS ? MGR_MAX_THREADS : threads;
}

int mgr_run_threads(void) { return run_threads; }

/* part k of [0, n) in `parts` contiguous runs, the first n % parts one longer */
static void run_part(mgr_part_fn part, void* ctx, int64_t n, int parts, int k) {
    int64_t size = n / parts, extra = n % parts;
    int64_t lo = k * size + (k < extra ? k : extra);
    int64_t hi = lo + size + (k < extra);
    if (hi > lo) part(ctx, lo, hi);
}

static void* worker(void* arg) {
    int k = (int)(intptr_t)arg; /* this worker runs part k (1..) of each generation */
    uint64_t seen = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.generation == seen) pthread_cond_wait(&pool.work, &pool.lock);
        seen = pool.generation;
        if (k >= pool.parts) continue;
        mgr_part_fn part = pool.part;
        void* ctx = pool.ctx;
        int64_t n = pool.n;
        int parts = pool.parts;
        pthread_mutex_unlock(&pool.lock);
        run_part(part, ctx, n, parts, k);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0) pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* start workers up to `want` (as many as the system gives); how many there are */
static int workers_for(int want) {
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

void mgr_parallel_for(int64_t n, mgr_part_fn part, void* ctx) {
    mgr_parallel_for_upto(n, run_threads, part, ctx);
}

void mgr_parallel_for_upto(int64_t n, int64_t most, mgr_part_fn part, void* ctx) {
    int64_t cap = most < run_threads ? most : run_threads;
    int parts = n < cap ? (int)n : (int)cap;
    if (parts <= 1 || pthread_mutex_trylock(&pool_in_use) != 0) {
#ifdef MGR_PROFILE
        if (n > 0 && parts_most < 1) parts_most = 1;
#endif
        if (n > 0) part(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    int workers = workers_for(parts - 1);
    parts = workers + 1 < parts ? workers + 1 : parts;
    pool.part = part;
    pool.ctx = ctx;
    pool.n = n;
    pool.parts = parts;
    pool.pending = parts - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
#ifdef MGR_PROFILE
    if (parts > parts_most) parts_most = parts;
#endif
    run_part(part, ctx, n, parts, 0);
    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool_in_use);
}
