/* The C runtime's thread pool under two callers and a fork: `pool_stress model.mgr RUNS THREADS
 * [fork]` loads the model twice and runs each copy RUNS times at THREADS threads from two threads
 * at once, back to back (so its workers take each next parallel_for while still polling, and
 * one caller's parallel_for runs on its own thread while the other's holds the pool), every
 * run's outputs compared bitwise with one run at 1 thread; with `fork`, then forks, and the
 * child runs a copy at THREADS threads (on workers of its own) and compares again. Prints
 * "same N" per caller and "child same"; exits 1 at the first difference. Built by
 * tests/deploy/test_export_pool.py, also under ThreadSanitizer. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mgr_runtime.h"

static const char* path;
static int runs, threads;
static void* want[16];  /* the 1-thread run's outputs */

static mgr_model* loaded(void) {  /* the model, its float32 inputs set to a fixed pattern */
    mgr_model* m = mgr_load_file(path);
    if (!m) {
        fprintf(stderr, "load: %s\n", mgr_last_error());
        exit(2);
    }
    uint32_t state = 12345;
    for (size_t i = 0; i < mgr_input_count(m); i++) {
        size_t n = mgr_input_nbytes(m, i) / sizeof(float);
        float* x = malloc(n * sizeof(float) + 1);
        for (size_t j = 0; j < n; j++) {
            state = state * 1664525u + 1013904223u;
            x[j] = (float)(state >> 8) / (float)(1u << 23) - 1.0f;
        }
        if (mgr_input_dtype(m, i) != MGR_FLOAT32 ||
            mgr_set_input(m, i, x, n * sizeof(float)) != MGR_OK) {
            fprintf(stderr, "input %zu: %s\n", i, mgr_last_error());
            exit(2);
        }
        free(x);
    }
    return m;
}

/* run m once at t threads: whether its outputs are want's bits */
static int same_bits(mgr_model* m, int t) {
    if (mgr_set_threads(m, t) != MGR_OK || mgr_run(m) != MGR_OK) {
        fprintf(stderr, "run: %s\n", mgr_last_error());
        exit(2);
    }
    for (size_t i = 0; i < mgr_output_count(m); i++)
        if (memcmp(mgr_output(m, i), want[i], mgr_output_nbytes(m, i)) != 0) return 0;
    return 1;
}

static void* caller(void* arg) {
    mgr_model* m = loaded();
    intptr_t same = 0;
    for (int r = 0; r < runs && same_bits(m, threads); r++) same++;
    mgr_free(m);
    printf("same %ld\n", (long)same);
    fflush(stdout);
    (void)arg;
    return (void*)same;
}

int main(int argc, char** argv) {
    if (argc < 4) return fprintf(stderr, "usage: pool_stress model.mgr RUNS THREADS [fork]\n"), 2;
    path = argv[1];
    runs = atoi(argv[2]);
    threads = atoi(argv[3]);
    mgr_model* one = loaded();
    if (mgr_run(one) != MGR_OK || mgr_output_count(one) > 16) return 2;
    for (size_t i = 0; i < mgr_output_count(one); i++) {
        want[i] = malloc(mgr_output_nbytes(one, i) + 1);
        memcpy(want[i], mgr_output(one, i), mgr_output_nbytes(one, i));
    }
    pthread_t two[2];
    void* same[2];
    for (int k = 0; k < 2; k++) pthread_create(&two[k], NULL, caller, NULL);
    for (int k = 0; k < 2; k++) pthread_join(two[k], &same[k]);
    if ((intptr_t)same[0] != runs || (intptr_t)same[1] != runs) return 1;
    if (argc > 4 && strcmp(argv[4], "fork") == 0) {
        pid_t child = fork();
        if (child == 0) {
            int ok = same_bits(one, threads) && same_bits(one, threads);
            printf("child %s\n", ok ? "same" : "differs");
            fflush(stdout);
            _exit(ok ? 0 : 1);
        }
        int status = 0;
        if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            return 1;
    }
    mgr_free(one);
    return 0;
}
