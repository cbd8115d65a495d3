/* Fuzz the C runtime's loader: `blob_fuzz model.mgr SEED COUNT` loads COUNT mutations of the
 * blob (a few bytes overwritten, a header or record field set to an edge value, or the blob
 * cut short) and runs each one that loads on zeroed inputs (every other one given by pointer).
 * Built with AddressSanitizer and UBSan by tests/deploy: any access out of bounds aborts there.
 * Prints how many loaded and how many were refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgr_runtime.h"

static uint64_t state;

static uint64_t next(void) {  /* xorshift64 */
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

static const int64_t EDGES[] = {0, 1, -1, 7, 8, 63, 64, 255, 4096, INT64_MAX, INT64_MIN,
                                INT64_MAX / 4 + 1, (int64_t)1 << 32, (int64_t)1 << 40};

static void mutate(unsigned char* b, size_t* n) {
    size_t kind = next() % 4;
    if (kind == 0) {  /* a few random bytes */
        int m = 1 + (int)(next() % 4);
        for (int k = 0; k < m; k++) b[next() % *n] = (unsigned char)next();
    } else if (kind == 1 || kind == 2) {  /* an aligned field (header or a record) to an edge */
        size_t limit = kind == 1 ? 160 : *n;
        size_t at = (next() % (limit / 8)) * 8;
        int64_t v = EDGES[next() % (sizeof EDGES / sizeof EDGES[0])];
        if (at + 8 <= *n) memcpy(b + at, &v, 8);
    } else {  /* cut short */
        *n = next() % *n;
    }
}

int main(int argc, char** argv) {
    if (argc != 4) return fprintf(stderr, "usage: blob_fuzz model.mgr SEED COUNT\n"), 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    static unsigned char blob[1 << 24];
    size_t n = fread(blob, 1, sizeof blob, f);
    fclose(f);
    state = strtoull(argv[2], NULL, 10) * 2654435761u + 1;
    long count = atol(argv[3]), loaded = 0, refused = 0;
    unsigned char* copy = malloc(n);
    for (long c = 0; c < count; c++) {
        size_t len = n;
        memcpy(copy, blob, n);
        mutate(copy, &len);
        mgr_model* m = mgr_load_memory(copy, len);
        if (!m) {
            refused += mgr_last_error()[0] != 0;
            continue;
        }
        loaded++;
        void* held[64] = {0};  /* inputs given by pointer (every other one): alive while it runs */
        for (size_t i = 0; i < mgr_input_count(m); i++) {
            size_t bytes = mgr_input_nbytes(m, i);
            void* zero = calloc(bytes ? bytes : 1, 1);
            if (i % 2 && i < 64) {
                mgr_set_input_ptr(m, i, zero, bytes);
                held[i] = zero;
            } else {
                mgr_set_input(m, i, zero, bytes);
                free(zero);
            }
        }
        mgr_run(m);
        for (size_t i = 0; i < 64; i++) free(held[i]);
        for (size_t i = 0; i < mgr_output_count(m); i++) (void)mgr_output(m, i);
        mgr_free(m);
    }
    free(copy);
    printf("loaded %ld refused %ld\n", loaded, refused);
    return 0;
}
