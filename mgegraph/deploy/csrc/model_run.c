/* model_run: run an exported model on .npy inputs, write its outputs as .npy files.
 *
 *     model_run model.mgr x.npy [more.npy ...] [-o DIR] [--threads N] [--runs N] [--by-pointer]
 *
 * The inputs are given in the model's input order; each must have the input's dtype and shape
 * (little-endian, C order). Outputs go to DIR/output0.npy, ... (DIR defaults to "."). --runs N
 * runs N times and prints the median run's milliseconds; --by-pointer gives the inputs with
 * mgr_set_input_ptr instead of copying them. Exit status 0, or 1 with the error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "mgr_runtime.h"

static int die(const char* what, const char* detail) {
    fprintf(stderr, "model_run: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return 1;
}

static const char* descr_of(int dtype) {
    static const char* const D[] = {"<f4", "<f8", "<i4", "<i8", "|u1", "|i1", "|b1", "<i2"};
    return dtype >= 0 && dtype < MGR_N_DTYPES ? D[dtype] : "?";
}

/* the header text of an .npy file for a C-order array of `dtype` and `shape` */
static void npy_header(char* text, size_t size, int dtype, int ndim, const int64_t* shape) {
    char dims[256] = "";
    size_t at = 0;
    for (int d = 0; d < ndim; d++)
        at += (size_t)snprintf(dims + at, sizeof dims - at, "%lld,%s", (long long)shape[d],
                               d + 1 < ndim ? " " : "");
    if (ndim > 1) dims[at - 1] = 0;  /* (2, 3) but (2,) */
    snprintf(text, size, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
             descr_of(dtype), dims);
}

static int read_npy(const char* path, mgr_model* m, size_t i, void** held) {
    FILE* f = fopen(path, "rb");
    if (!f) return die("cannot open", path);
    unsigned char pre[12];
    char header[4096], want[512];
    size_t hlen;
    int ok = fread(pre, 1, 10, f) == 10 && memcmp(pre, "\x93NUMPY", 6) == 0;
    if (ok && pre[6] == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (ok && pre[6] >= 2 && fread(pre + 10, 1, 2, f) == 2) {
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        fclose(f);
        return die("not an .npy file", path);
    }
    if (hlen >= sizeof header || fread(header, 1, hlen, f) != hlen) {
        fclose(f);
        return die("an .npy header too long or truncated", path);
    }
    while (hlen > 0 && (header[hlen - 1] == '\n' || header[hlen - 1] == ' ')) hlen--;
    header[hlen] = 0;
    npy_header(want, sizeof want, mgr_input_dtype(m, i), mgr_input_ndim(m, i),
               mgr_input_shape(m, i));
    if (strcmp(header, want) != 0) {
        fprintf(stderr, "model_run: %s holds %s; input %s wants %s\n", path, header,
                mgr_input_name(m, i), want);
        fclose(f);
        return 1;
    }
    size_t n = mgr_input_nbytes(m, i);
    void* data = malloc(n ? n : 1);
    int got = data && fread(data, 1, n, f) == n;
    fclose(f);
    int set = !got ? MGR_IO
              : held ? mgr_set_input_ptr(m, i, data, n) : mgr_set_input(m, i, data, n);
    if (set != MGR_OK) {
        free(data);
        return die(got ? mgr_last_error() : "truncated data in", got ? NULL : path);
    }
    if (held) *held = data;  /* read where it lies by every run: freed after them */
    else free(data);
    return 0;
}

static int write_npy(const char* dir, mgr_model* m, size_t i) {
    char path[4096], text[512];
    snprintf(path, sizeof path, "%s/output%zu.npy", dir, i);
    npy_header(text, sizeof text, mgr_output_dtype(m, i), mgr_output_ndim(m, i),
               mgr_output_shape(m, i));
    size_t len = strlen(text), total = 10 + len + 1, pad = (64 - total % 64) % 64;
    FILE* f = fopen(path, "wb");
    if (!f) return die("cannot write", path);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    pre[8] = (unsigned char)((len + pad + 1) & 0xFF);
    pre[9] = (unsigned char)((len + pad + 1) >> 8);
    fwrite(pre, 1, 10, f);
    fwrite(text, 1, len, f);
    for (size_t k = 0; k < pad; k++) fputc(' ', f);
    fputc('\n', f);
    fwrite(mgr_output(m, i), 1, mgr_output_nbytes(m, i), f);
    return fclose(f) == 0 ? 0 : die("cannot write", path);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int compare(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

int main(int argc, char** argv) {
    const char* out = ".";
    const char* inputs[64];
    void* held[64] = {0};
    int n_inputs = 0, threads = 1, runs = 1, by_pointer = 0;
    if (argc < 2) return die("usage: model_run model.mgr x.npy ... [-o DIR] [--threads N] "
                             "[--runs N]", NULL);
    for (int a = 2; a < argc; a++) {
        if (strcmp(argv[a], "-o") == 0 && a + 1 < argc) out = argv[++a];
        else if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) threads = atoi(argv[++a]);
        else if (strcmp(argv[a], "--runs") == 0 && a + 1 < argc) runs = atoi(argv[++a]);
        else if (strcmp(argv[a], "--by-pointer") == 0) by_pointer = 1;
        else if (n_inputs < 64) inputs[n_inputs++] = argv[a];
        else return die("too many inputs", NULL);
    }
    mgr_model* m = mgr_load_file(argv[1]);
    if (!m) return die(mgr_last_error(), NULL);
    int status = 0;
    if ((size_t)n_inputs != mgr_input_count(m)) {
        fprintf(stderr, "model_run: the model takes %zu inputs, %d given\n", mgr_input_count(m),
                n_inputs);
        status = 1;
    }
    if (!status && mgr_set_threads(m, threads) != MGR_OK) status = die(mgr_last_error(), NULL);
    for (int i = 0; !status && i < n_inputs; i++)
        status = read_npy(inputs[i], m, (size_t)i, by_pointer ? &held[i] : NULL);
    double* times = calloc(runs > 0 ? (size_t)runs : 1, sizeof(double));
    for (int r = 0; !status && r < runs; r++) {
        double start = now_ms();
        if (mgr_run(m) != MGR_OK) status = die(mgr_last_error(), NULL);
        times[r] = now_ms() - start;
    }
    if (!status && runs > 1) {
        qsort(times, (size_t)runs, sizeof(double), compare);
        printf("median of %d runs: %.4f ms\n", runs, times[runs / 2]);
    }
    free(times);
    /* the output folder is made where missing, as `-o out` reads to a user */
    if (!status && mkdir(out, 0777) != 0 && errno != EEXIST)
        status = die("cannot make the output folder", out);
    for (size_t i = 0; !status && i < mgr_output_count(m); i++) status = write_npy(out, m, i);
    mgr_free(m);
    for (int i = 0; i < n_inputs; i++) free(held[i]);
    return status;
}
