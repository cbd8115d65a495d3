/* mgegraph's C runtime: the blob loader and its checks, the arena, the API of mgr_runtime.h.
 *
 * Design: the loader trusts nothing in a blob. It reads the header and every record through
 * bounds-checked accessors, checks each number against what it sizes (docs/c_runtime.md, "What
 * the loader checks") and only then allocates; a kernel's own check bounds the fields of its
 * parameter block that size its loops. After loading, running is a loop of plain calls. */
#include "mgr_runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef MGR_PROFILE
#include <time.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "mgr_kernel.h"

#define MGR_MAGIC "MGRBLOB1"
#define MGR_VERSION 1
#define MGR_HEADER_FIELDS 20
#define MGR_TENSOR_FIELDS 16
#define MGR_INSTR_FIELDS 8
#define MGR_NAME_BYTES 32
#define MGR_ALIGN 64
#define MGR_MAX_ARENA ((int64_t)1 << 36) /* 64 GiB: past it, a blob is refused */

enum { KIND_ARENA = 0, KIND_WEIGHT = 1, KIND_INPUT = 2, KIND_OUTPUT = 3 };
/* the header's fields, after the magic (field 0) */
enum { H_VERSION = 1, H_BLOB_BYTES, H_ARENA_BYTES, H_N_KERNELS, H_KERNELS_OFF, H_N_TENSORS,
       H_TENSORS_OFF, H_N_INSTR, H_INSTR_OFF, H_N_REFS, H_REFS_OFF, H_N_INTS, H_INTS_OFF,
       H_N_FLOATS, H_FLOATS_OFF, H_WEIGHTS_BYTES, H_WEIGHTS_OFF, H_STRINGS_BYTES,
       H_STRINGS_OFF };

typedef struct {
    int64_t kind, index, offset, nbytes, dtype, ndim;
    int64_t shape[MGR_MAX_NDIM];
    int64_t name_off, name_len;
} tensor_rec;

typedef struct {  /* an input's or output's root buffer */
    char* name;
    int dtype, ndim;
    int64_t shape[MGR_MAX_NDIM];
    size_t nbytes;
    char* own;    /* the model's buffer */
    char* data;   /* where runs read it (own, or the caller's pointer for an input) */
} io_buf;

struct mgr_model {
    unsigned char* blob;  /* the blob, copied: weights are read in place from it */
    char* arena;
    size_t n_instr;
    mgr_kernel_fn* fns;
    mgr_call* calls;
    char** bufs;
    size_t n_inputs, n_outputs;
    io_buf* inputs;
    io_buf* outputs;
    int64_t* tensor_kind;   /* per tensor: its kind, root index and offset, to bind pointers */
    int64_t* tensor_index;
    int64_t* tensor_offset;
    size_t* buf_tensor;     /* per entry of bufs: its tensor */
    size_t n_bufs;
    int threads;
#ifdef MGR_PROFILE
    int64_t* instruction_ns; /* the last run's time of each instruction */
    int* instruction_parts;  /* and the most threads one of its parallel loops ran on */
#endif
};

static _Thread_local char last_error[512];

const char* mgr_last_error(void) { return last_error; }

static int fail(int status, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    return status;
}

static const size_t DTYPE_SIZE[MGR_N_DTYPES] = {4, 8, 4, 8, 1, 1, 1, 2};
static const char* const DTYPE_NAME[MGR_N_DTYPES] = {"float32", "float64", "int32", "int64",
                                                     "uint8", "int8", "bool", "int16"};

size_t mgr_dtype_size(int dtype) {
    return dtype >= 0 && dtype < MGR_N_DTYPES ? DTYPE_SIZE[dtype] : 0;
}

const char* mgr_dtype_name(int dtype) {
    return dtype >= 0 && dtype < MGR_N_DTYPES ? DTYPE_NAME[dtype] : NULL;
}

/* -- reading the blob ---------------------------------------------------------------------- */
typedef struct {
    const unsigned char* p;
    int64_t n;
} view;

static int64_t rd64(const unsigned char* p) {  /* little-endian, any alignment */
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return (int64_t)v;
}

/* section [off, off + count * size) inside the blob, 8-byte aligned */
static int section(view b, int64_t off, int64_t count, int64_t size, const char* what) {
    int64_t end;
    if (off < 0 || count < 0 || off % 8 || !mgr_muladd(off, count, size, &end) || end > b.n)
        return fail(MGR_BAD_BLOB, "blob: the %s (%lld of %lld bytes at offset %lld) run past "
                    "its %lld bytes", what, (long long)count, (long long)size, (long long)off,
                    (long long)b.n);
    return MGR_OK;
}

static int64_t field(view b, int64_t off, int64_t i) { return rd64(b.p + off + 8 * i); }

static void read_tensor(view b, int64_t off, int64_t t, tensor_rec* r) {
    int64_t base = off + t * MGR_TENSOR_FIELDS * 8;
    r->kind = field(b, base, 0);
    r->index = field(b, base, 1);
    r->offset = field(b, base, 2);
    r->nbytes = field(b, base, 3);
    r->dtype = field(b, base, 4);
    r->ndim = field(b, base, 5);
    for (int d = 0; d < MGR_MAX_NDIM; d++) r->shape[d] = field(b, base, 6 + d);
    r->name_off = field(b, base, 14);
    r->name_len = field(b, base, 15);
}

/* -- checks ------------------------------------------------------------------------------------ */
typedef struct {
    view b;
    int64_t h[MGR_HEADER_FIELDS];
    const mgr_kernel** bound;  /* per blob kernel index: the table's entry */
} blob;

static int check_header(blob* B) {
    if (B->b.n < MGR_HEADER_FIELDS * 8)
        return fail(MGR_BAD_BLOB, "blob: %lld bytes, shorter than its header (%d)",
                    (long long)B->b.n, MGR_HEADER_FIELDS * 8);
    if (memcmp(B->b.p, MGR_MAGIC, 8) != 0)
        return fail(MGR_BAD_BLOB, "blob: not an mgegraph C runtime blob (magic)");
    for (int i = 1; i < MGR_HEADER_FIELDS; i++) B->h[i] = field(B->b, 0, i);
    if (B->h[H_VERSION] != MGR_VERSION)
        return fail(MGR_BAD_BLOB, "blob: version %lld, this runtime reads %d",
                    (long long)B->h[H_VERSION], MGR_VERSION);
    if (B->h[H_BLOB_BYTES] != B->b.n)
        return fail(MGR_BAD_BLOB, "blob: the header says %lld bytes, %lld were given "
                    "(truncated?)", (long long)B->h[H_BLOB_BYTES], (long long)B->b.n);
    if (B->h[H_ARENA_BYTES] < 0 || B->h[H_ARENA_BYTES] > MGR_MAX_ARENA)
        return fail(MGR_BAD_BLOB, "blob: arena of %lld bytes", (long long)B->h[H_ARENA_BYTES]);
    int s = MGR_OK;
    if (!s) s = section(B->b, B->h[H_KERNELS_OFF], B->h[H_N_KERNELS], MGR_NAME_BYTES, "kernels");
    if (!s) s = section(B->b, B->h[H_TENSORS_OFF], B->h[H_N_TENSORS], 8 * MGR_TENSOR_FIELDS,
                        "tensors");
    if (!s) s = section(B->b, B->h[H_INSTR_OFF], B->h[H_N_INSTR], 8 * MGR_INSTR_FIELDS,
                        "instructions");
    if (!s) s = section(B->b, B->h[H_REFS_OFF], B->h[H_N_REFS], 8, "buffer refs");
    if (!s) s = section(B->b, B->h[H_INTS_OFF], B->h[H_N_INTS], 8, "ints");
    if (!s) s = section(B->b, B->h[H_FLOATS_OFF], B->h[H_N_FLOATS], 8, "floats");
    if (!s) s = section(B->b, B->h[H_WEIGHTS_OFF], B->h[H_WEIGHTS_BYTES], 1, "weights");
    if (!s) s = section(B->b, B->h[H_STRINGS_OFF], B->h[H_STRINGS_BYTES], 1, "strings");
    if (!s && B->h[H_WEIGHTS_OFF] % MGR_ALIGN)
        s = fail(MGR_BAD_BLOB, "blob: weights at offset %lld, not %d-byte aligned",
                 (long long)B->h[H_WEIGHTS_OFF], MGR_ALIGN);
    return s;
}

static int bind_kernels(blob* B) {
    int64_t n = B->h[H_N_KERNELS];
    B->bound = calloc(n ? (size_t)n : 1, sizeof *B->bound);
    if (!B->bound) return fail(MGR_NO_MEMORY, "out of memory for the kernel table");
    for (int64_t k = 0; k < n; k++) {
        const char* name = (const char*)B->b.p + B->h[H_KERNELS_OFF] + k * MGR_NAME_BYTES;
        if (memchr(name, 0, MGR_NAME_BYTES) == NULL)
            return fail(MGR_BAD_BLOB, "blob: kernel name %lld is not NUL-terminated",
                        (long long)k);
        for (size_t t = 0; t < mgr_n_kernels; t++)
            if (strcmp(mgr_kernels[t].name, name) == 0) B->bound[k] = &mgr_kernels[t];
        if (!B->bound[k])
            return fail(MGR_BAD_BLOB, "blob: kernel %lld (%s) is not in this build's table",
                        (long long)k, name);
    }
    return MGR_OK;
}

/* the bytes of a tensor's root: the arena, the weights, or input/output `index`'s buffer */
static int check_tensor(const blob* B, int64_t t, const tensor_rec* r, int64_t* io_count) {
    int64_t elems = 1, end;
    if (r->dtype < 0 || r->dtype >= MGR_N_DTYPES || r->ndim < 0 || r->ndim > MGR_MAX_NDIM)
        return fail(MGR_BAD_BLOB, "blob: tensor %lld has dtype %lld and %lld dims", (long long)t,
                    (long long)r->dtype, (long long)r->ndim);
    for (int64_t d = 0; d < r->ndim; d++)
        if (!mgr_muladd(0, elems, r->shape[d], &elems))
            return fail(MGR_BAD_BLOB, "blob: tensor %lld has dimension %lld of %lld",
                        (long long)t, (long long)d, (long long)r->shape[d]);
    if (!mgr_muladd(0, elems, (int64_t)DTYPE_SIZE[r->dtype], &end) || end != r->nbytes)
        return fail(MGR_BAD_BLOB, "blob: tensor %lld says %lld bytes, its shape and dtype "
                    "make %lld", (long long)t, (long long)r->nbytes, (long long)end);
    /* every root starts 64-byte aligned, so an offset of whole elements keeps them aligned */
    if (r->offset < 0 || r->offset % (int64_t)DTYPE_SIZE[r->dtype] ||
        !mgr_muladd(r->offset, r->nbytes, 1, &end))
        return fail(MGR_BAD_BLOB, "blob: tensor %lld at offset %lld (a %s's offset is a "
                    "multiple of its %zu bytes)", (long long)t, (long long)r->offset,
                    DTYPE_NAME[r->dtype], DTYPE_SIZE[r->dtype]);
    if (r->kind == KIND_ARENA || r->kind == KIND_WEIGHT) {
        int64_t limit = r->kind == KIND_ARENA ? B->h[H_ARENA_BYTES] : B->h[H_WEIGHTS_BYTES];
        if (end > limit)
            return fail(MGR_BAD_BLOB, "blob: tensor %lld's bytes [%lld, %lld) run past the "
                        "%s's %lld", (long long)t, (long long)r->offset, (long long)end,
                        r->kind == KIND_ARENA ? "arena" : "weights", (long long)limit);
        return MGR_OK;
    }
    if (r->kind != KIND_INPUT && r->kind != KIND_OUTPUT)
        return fail(MGR_BAD_BLOB, "blob: tensor %lld has kind %lld", (long long)t,
                    (long long)r->kind);
    if (r->index < 0 || r->index >= B->h[H_N_TENSORS])
        return fail(MGR_BAD_BLOB, "blob: tensor %lld is %s %lld of at most %lld", (long long)t,
                    r->kind == KIND_INPUT ? "input" : "output", (long long)r->index,
                    (long long)B->h[H_N_TENSORS]);
    if (r->name_len > 0) io_count[r->kind - KIND_INPUT]++;  /* a named record: a root */
    return MGR_OK;
}

static int check_name(const blob* B, int64_t t, const tensor_rec* r) {
    int64_t end;
    if (r->name_off < 0 || r->name_len <= 0 || r->name_len > 4096 ||
        !mgr_muladd(r->name_off, r->name_len, 1, &end) || end > B->h[H_STRINGS_BYTES])
        return fail(MGR_BAD_BLOB, "blob: tensor %lld's name [%lld, +%lld) is outside the "
                    "%lld bytes of strings", (long long)t, (long long)r->name_off,
                    (long long)r->name_len, (long long)B->h[H_STRINGS_BYTES]);
    return MGR_OK;
}

/* -- building the model ------------------------------------------------------------------------ */
/* Blocks from 4 MiB on (NumPy's threshold) start on a 2 MiB boundary and ask Linux for
 * transparent huge pages (where its setting is "madvise", as Debian's is): a weight matrix
 * streamed once per call then misses the TLB once per 2 MiB, not per 4 KiB. mlp-infer's
 * 1024 x 1024 single-row product ran at 0.75-0.91 of its time on 4 KiB pages (C harness, AMD
 * EPYC Zen 3, 1 thread); the Python executor's NumPy arrays had them already. Advice only: a
 * kernel without them runs as before. */
#define MGR_HUGE_FROM ((size_t)4 << 20)
#define MGR_HUGE_PAGE ((size_t)2 << 20)

/* n bytes at a 64-byte boundary, zeroed when asked (the arena is not: a plan writes each value
 * before reading it, and its pages are touched only as it runs) */
static void* aligned(size_t n, int zero) {
    void* p = NULL;
    size_t boundary = MGR_ALIGN;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (n >= MGR_HUGE_FROM) boundary = MGR_HUGE_PAGE;
#endif
    if (posix_memalign(&p, boundary, n ? n : MGR_ALIGN) != 0) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (boundary == MGR_HUGE_PAGE) (void)madvise(p, n / MGR_HUGE_PAGE * MGR_HUGE_PAGE,
                                                 MADV_HUGEPAGE);
#endif
    if (zero) memset(p, 0, n ? n : MGR_ALIGN);
    return p;
}

static int make_root(mgr_model* m, const blob* B, int64_t t, const tensor_rec* r) {
    size_t count = r->kind == KIND_INPUT ? m->n_inputs : m->n_outputs;
    io_buf* io = (r->kind == KIND_INPUT ? m->inputs : m->outputs);
    if (r->index >= (int64_t)count || io[r->index].name)
        return fail(MGR_BAD_BLOB, "blob: tensor %lld: %s %lld is given twice or out of range "
                    "0..%zu", (long long)t, r->kind == KIND_INPUT ? "input" : "output",
                    (long long)r->index, count);
    if (check_name(B, t, r)) return MGR_BAD_BLOB;
    io_buf* b = &io[r->index];
    b->name = calloc((size_t)r->name_len + 1, 1);
    b->own = aligned((size_t)r->nbytes, 1);
    if (!b->name || !b->own) return fail(MGR_NO_MEMORY, "out of memory for tensor %lld",
                                         (long long)t);
    memcpy(b->name, B->b.p + B->h[H_STRINGS_OFF] + r->name_off, (size_t)r->name_len);
    b->data = b->own;
    b->dtype = (int)r->dtype;
    b->ndim = (int)r->ndim;
    memcpy(b->shape, r->shape, sizeof b->shape);
    b->nbytes = (size_t)r->nbytes;
    return r->offset == 0 ? MGR_OK : fail(MGR_BAD_BLOB, "blob: tensor %lld, the root of %s "
                                          "%lld, at offset %lld", (long long)t,
                                          r->kind == KIND_INPUT ? "input" : "output",
                                          (long long)r->index, (long long)r->offset);
}

static int load_tensors(mgr_model* m, const blob* B) {
    int64_t n = B->h[H_N_TENSORS], io_count[2] = {0, 0};
    tensor_rec r;
    m->tensor_kind = calloc(n ? (size_t)n : 1, sizeof(int64_t));
    m->tensor_index = calloc(n ? (size_t)n : 1, sizeof(int64_t));
    m->tensor_offset = calloc(n ? (size_t)n : 1, sizeof(int64_t));
    if (!m->tensor_kind || !m->tensor_index || !m->tensor_offset)
        return fail(MGR_NO_MEMORY, "out of memory for the tensor table");
    for (int64_t t = 0; t < n; t++) {
        read_tensor(B->b, B->h[H_TENSORS_OFF], t, &r);
        if (check_tensor(B, t, &r, io_count)) return MGR_BAD_BLOB;
    }
    m->n_inputs = (size_t)io_count[0];
    m->n_outputs = (size_t)io_count[1];
    m->inputs = calloc(m->n_inputs + 1, sizeof(io_buf));
    m->outputs = calloc(m->n_outputs + 1, sizeof(io_buf));
    if (!m->inputs || !m->outputs) return fail(MGR_NO_MEMORY, "out of memory for the inputs");
    for (int64_t t = 0; t < n; t++) {  /* roots first: views are checked against them */
        read_tensor(B->b, B->h[H_TENSORS_OFF], t, &r);
        if (r.name_len > 0 && (r.kind == KIND_INPUT || r.kind == KIND_OUTPUT))
            if (make_root(m, B, t, &r)) return MGR_BAD_BLOB;
    }
    for (int64_t t = 0; t < n; t++) {
        read_tensor(B->b, B->h[H_TENSORS_OFF], t, &r);
        m->tensor_kind[t] = r.kind;
        m->tensor_index[t] = r.index;
        m->tensor_offset[t] = r.offset;
        if (r.kind != KIND_INPUT && r.kind != KIND_OUTPUT) continue;
        size_t count = r.kind == KIND_INPUT ? m->n_inputs : m->n_outputs;
        io_buf* io = r.kind == KIND_INPUT ? m->inputs : m->outputs;
        if (r.index >= (int64_t)count || r.offset + r.nbytes > (int64_t)io[r.index].nbytes)
            return fail(MGR_BAD_BLOB, "blob: tensor %lld's bytes [%lld, +%lld) are outside %s "
                        "%lld", (long long)t, (long long)r.offset, (long long)r.nbytes,
                        r.kind == KIND_INPUT ? "input" : "output", (long long)r.index);
    }
    return MGR_OK;
}

static int check_instruction(mgr_model* m, const blob* B, int64_t i, int64_t* rec) {
    const char* what[3] = {"buffer refs", "ints", "floats"};
    const int64_t pool[3] = {B->h[H_N_REFS], B->h[H_N_INTS], B->h[H_N_FLOATS]};
    int64_t end;
    if (rec[0] < 0 || rec[0] >= B->h[H_N_KERNELS])
        return fail(MGR_BAD_BLOB, "blob: instruction %lld calls kernel %lld of %lld",
                    (long long)i, (long long)rec[0], (long long)B->h[H_N_KERNELS]);
    for (int s = 0; s < 3; s++)
        if (rec[1 + 2 * s] < 0 || rec[2 + 2 * s] > 64 * 1024 ||
            !mgr_muladd(rec[1 + 2 * s], rec[2 + 2 * s], 1, &end) || end > pool[s])
            return fail(MGR_BAD_BLOB, "blob: instruction %lld's %s [%lld, +%lld) are outside "
                        "the %lld of the blob", (long long)i, what[s], (long long)rec[1 + 2 * s],
                        (long long)rec[2 + 2 * s], (long long)pool[s]);
    (void)m;
    return MGR_OK;
}

/* the instruction's buffers as its kernel's check sees them, then the check itself */
static int check_block(const blob* B, int64_t i, const int64_t* rec, int64_t* ints,
                       double* floats) {
    int64_t bytes[256], dtypes[256];
    const char* weights[256];
    tensor_rec r;
    if (rec[2] > 256)
        return fail(MGR_BAD_BLOB, "blob: instruction %lld has %lld buffers", (long long)i,
                    (long long)rec[2]);
    for (int64_t k = 0; k < rec[2]; k++) {
        int64_t t = field(B->b, B->h[H_REFS_OFF], rec[1] + k);
        if (t < 0 || t >= B->h[H_N_TENSORS])
            return fail(MGR_BAD_BLOB, "blob: instruction %lld's buffer %lld is tensor %lld of "
                        "%lld", (long long)i, (long long)k, (long long)t,
                        (long long)B->h[H_N_TENSORS]);
        read_tensor(B->b, B->h[H_TENSORS_OFF], t, &r);
        bytes[k] = r.nbytes;
        dtypes[k] = r.dtype;
        /* load_tensors checked a weight's bytes inside the blob's weights */
        weights[k] = r.kind == KIND_WEIGHT
                         ? (const char*)B->b.p + B->h[H_WEIGHTS_OFF] + r.offset : NULL;
    }
    for (int64_t k = 0; k < rec[4]; k++) ints[k] = field(B->b, B->h[H_INTS_OFF], rec[3] + k);
    for (int64_t k = 0; k < rec[6]; k++) {
        int64_t bits = field(B->b, B->h[H_FLOATS_OFF], rec[5] + k);
        memcpy(&floats[k], &bits, sizeof bits);
    }
    mgr_check_args a = {(size_t)rec[2], bytes, dtypes, (size_t)rec[4], ints, (size_t)rec[6],
                        floats, weights};
    const mgr_kernel* kernel = B->bound[rec[0]];
    const char* why = kernel->check(&a);
    if (why)
        return fail(MGR_BAD_BLOB, "blob: instruction %lld (kernel %s): %s", (long long)i,
                    kernel->name, why);
    return MGR_OK;
}

static char* buffer_address(const mgr_model* m, const blob* B, size_t t) {
    int64_t kind = m->tensor_kind[t], index = m->tensor_index[t], off = m->tensor_offset[t];
    if (kind == KIND_ARENA) return m->arena + off;
    if (kind == KIND_WEIGHT) return (char*)m->blob + B->h[H_WEIGHTS_OFF] + off;
    return (kind == KIND_INPUT ? m->inputs : m->outputs)[index].data + off;
}

static int load_instructions(mgr_model* m, const blob* B) {
    int64_t n = B->h[H_N_INSTR], rec[MGR_INSTR_FIELDS], total = 0;
    m->n_instr = (size_t)n;
    for (int64_t i = 0; i < n; i++) {
        for (int f = 0; f < MGR_INSTR_FIELDS; f++)
            rec[f] = field(B->b, B->h[H_INSTR_OFF] + i * MGR_INSTR_FIELDS * 8, f);
        if (check_instruction(m, B, i, rec)) return MGR_BAD_BLOB;
        total += rec[2];
    }
    size_t nb = (size_t)total, ni = (size_t)B->h[H_N_INTS], nf = (size_t)B->h[H_N_FLOATS];
    m->fns = calloc((size_t)n + 1, sizeof *m->fns);
    m->calls = calloc((size_t)n + 1, sizeof *m->calls);
    m->bufs = calloc(nb + 1, sizeof *m->bufs);
    m->buf_tensor = calloc(nb + 1, sizeof *m->buf_tensor);
    int64_t* ints = calloc(ni + 1, sizeof *ints);
    double* floats = calloc(nf + 3, sizeof *floats);  /* kernels may read floats[0..1] */
    if (!m->fns || !m->calls || !m->bufs || !m->buf_tensor || !ints || !floats) {
        free(ints);
        free(floats);
        return fail(MGR_NO_MEMORY, "out of memory for the instruction tables");
    }
    m->n_bufs = nb;
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int f = 0; f < MGR_INSTR_FIELDS; f++)
            rec[f] = field(B->b, B->h[H_INSTR_OFF] + i * MGR_INSTR_FIELDS * 8, f);
        int64_t* my_ints = ints + rec[3];
        double* my_floats = floats + rec[5];
        if (check_block(B, i, rec, my_ints, my_floats)) {
            free(ints);
            free(floats);
            return MGR_BAD_BLOB;
        }
        m->fns[i] = B->bound[rec[0]]->run;
        m->calls[i].bufs = m->bufs + at;
        m->calls[i].ints = my_ints;
        m->calls[i].floats = my_floats;
        for (int64_t k = 0; k < rec[2]; k++)
            m->buf_tensor[at + k] = (size_t)field(B->b, B->h[H_REFS_OFF], rec[1] + k);
        at += (size_t)rec[2];
    }
    /* the pools now belong to the calls: freed through the first call's pointers */
    m->calls[n].ints = ints;
    m->calls[n].floats = floats;
    return MGR_OK;
}

static void bind_buffers(mgr_model* m) {
    blob B = {{m->blob, 0}, {0}, NULL};
    for (int i = 1; i < MGR_HEADER_FIELDS; i++) B.h[i] = field(B.b, 0, i);
    for (size_t k = 0; k < m->n_bufs; k++) m->bufs[k] = buffer_address(m, &B, m->buf_tensor[k]);
}

void mgr_free(mgr_model* m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_inputs; i++) {
        free(m->inputs[i].name);
        free(m->inputs[i].own);
    }
    for (size_t i = 0; i < m->n_outputs; i++) {
        free(m->outputs[i].name);
        free(m->outputs[i].own);
    }
    if (m->calls) {
        free((void*)m->calls[m->n_instr].ints);
        free((void*)m->calls[m->n_instr].floats);
    }
    free(m->inputs);
    free(m->outputs);
    free(m->tensor_kind);
    free(m->tensor_index);
    free(m->tensor_offset);
    free(m->buf_tensor);
    free(m->fns);
    free(m->calls);
    free(m->bufs);
    free(m->arena);
    free(m->blob);
#ifdef MGR_PROFILE
    free(m->instruction_ns);
    free(m->instruction_parts);
#endif
    free(m);
}

mgr_model* mgr_load_memory(const void* data, size_t nbytes) {
    last_error[0] = 0;
    if (!data || nbytes > (size_t)INT64_MAX) {
        fail(MGR_BAD_ARGUMENT, "mgr_load_memory: no blob given");
        return NULL;
    }
    mgr_model* m = calloc(1, sizeof *m);
    if (!m || !(m->blob = aligned(nbytes, 0))) {
        free(m);
        fail(MGR_NO_MEMORY, "out of memory for a blob of %zu bytes", nbytes);
        return NULL;
    }
    memcpy(m->blob, data, nbytes);
    m->threads = 1;
    blob B = {{m->blob, (int64_t)nbytes}, {0}, NULL};
    int s = check_header(&B);
    if (!s) s = bind_kernels(&B);
    if (!s) s = load_tensors(m, &B);
    if (!s) s = load_instructions(m, &B);
    if (!s && !(m->arena = aligned((size_t)B.h[H_ARENA_BYTES], 0)))
        s = fail(MGR_NO_MEMORY, "out of memory for an arena of %lld bytes",
                 (long long)B.h[H_ARENA_BYTES]);
#ifdef MGR_PROFILE
    if (!s && (!(m->instruction_ns = calloc(m->n_instr + 1, sizeof(int64_t))) ||
               !(m->instruction_parts = calloc(m->n_instr + 1, sizeof(int)))))
        s = fail(MGR_NO_MEMORY, "out of memory for the instructions' times");
#endif
    free(B.bound);
    if (s) {
        mgr_free(m);
        return NULL;
    }
    bind_buffers(m);
    return m;
}

mgr_model* mgr_load_file(const char* path) {
    last_error[0] = 0;
    FILE* f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        fail(MGR_IO, "cannot open %s", path ? path : "(null)");
        return NULL;
    }
    unsigned char* data = NULL;
    size_t n = 0, cap = 0, got;
    do {  /* read to the end: a pipe or a file of any size, no seeking */
        if (n == cap) {
            unsigned char* bigger = realloc(data, cap = cap ? 2 * cap : 1 << 16);
            if (!bigger) {
                free(data);
                fclose(f);
                fail(MGR_NO_MEMORY, "out of memory reading %s", path);
                return NULL;
            }
            data = bigger;
        }
        got = fread(data + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(data);
        fail(MGR_IO, "cannot read %s", path);
        return NULL;
    }
    mgr_model* m = mgr_load_memory(data, n);
    free(data);
    return m;
}

/* -- the API ---------------------------------------------------------------------------------- */
size_t mgr_input_count(const mgr_model* m) { return m ? m->n_inputs : 0; }
size_t mgr_output_count(const mgr_model* m) { return m ? m->n_outputs : 0; }

static const io_buf* io_at(const mgr_model* m, size_t i, int input) {
    if (!m) return NULL;
    if (input) return i < m->n_inputs ? &m->inputs[i] : NULL;
    return i < m->n_outputs ? &m->outputs[i] : NULL;
}

#define IO_GETTER(kind, input)                                                                \
    const char* mgr_##kind##_name(const mgr_model* m, size_t i) {                            \
        const io_buf* b = io_at(m, i, input);                                                 \
        return b ? b->name : NULL;                                                            \
    }                                                                                         \
    int mgr_##kind##_dtype(const mgr_model* m, size_t i) {                                   \
        const io_buf* b = io_at(m, i, input);                                                 \
        return b ? b->dtype : -1;                                                             \
    }                                                                                         \
    int mgr_##kind##_ndim(const mgr_model* m, size_t i) {                                    \
        const io_buf* b = io_at(m, i, input);                                                 \
        return b ? b->ndim : -1;                                                              \
    }                                                                                         \
    const int64_t* mgr_##kind##_shape(const mgr_model* m, size_t i) {                        \
        const io_buf* b = io_at(m, i, input);                                                 \
        return b ? b->shape : NULL;                                                           \
    }                                                                                         \
    size_t mgr_##kind##_nbytes(const mgr_model* m, size_t i) {                               \
        const io_buf* b = io_at(m, i, input);                                                 \
        return b ? b->nbytes : 0;                                                             \
    }                                                                                         \
    long mgr_##kind##_index(const mgr_model* m, const char* name) {                          \
        for (size_t k = 0; name && k < mgr_##kind##_count(m); k++)                           \
            if (strcmp(io_at(m, k, input)->name, name) == 0) return (long)k;                 \
        return -1;                                                                            \
    }

IO_GETTER(input, 1)
IO_GETTER(output, 0)

static int check_set(mgr_model* m, size_t i, const void* data, size_t nbytes, const char* fn) {
    if (!m || i >= m->n_inputs)
        return fail(MGR_BAD_ARGUMENT, "%s: input %zu of %zu", fn, i, m ? m->n_inputs : 0);
    if (!data || nbytes != m->inputs[i].nbytes)
        return fail(MGR_BAD_ARGUMENT, "%s: input %zu (%s) takes %zu bytes, got %zu%s", fn, i,
                    m->inputs[i].name, m->inputs[i].nbytes, nbytes, data ? "" : " at NULL");
    return MGR_OK;
}

int mgr_set_input(mgr_model* m, size_t i, const void* data, size_t nbytes) {
    int s = check_set(m, i, data, nbytes, "mgr_set_input");
    if (s) return s;
    memcpy(m->inputs[i].own, data, nbytes);
    if (m->inputs[i].data != m->inputs[i].own) {
        m->inputs[i].data = m->inputs[i].own;
        bind_buffers(m);
    }
    return MGR_OK;
}

int mgr_set_input_ptr(mgr_model* m, size_t i, const void* data, size_t nbytes) {
    int s = check_set(m, i, data, nbytes, "mgr_set_input_ptr");
    if (s) return s;
    m->inputs[i].data = (char*)data;  /* kernels only read an input's buffers */
    bind_buffers(m);
    return MGR_OK;
}

int mgr_set_threads(mgr_model* m, int threads) {
    if (!m || threads < 1)
        return fail(MGR_BAD_ARGUMENT, "mgr_set_threads: %d threads (at least 1)", threads);
    m->threads = threads;
    return MGR_OK;
}

int mgr_threads(const mgr_model* m) { return m ? m->threads : 0; }

#ifdef MGR_PROFILE
static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int64_t mgr_instruction_ns(const mgr_model* m, size_t i) {
    return m && i < m->n_instr ? m->instruction_ns[i] : -1;
}

int mgr_instruction_parts(const mgr_model* m, size_t i) {
    return m && i < m->n_instr ? m->instruction_parts[i] : -1;
}
#endif

int mgr_run(mgr_model* m) {
    if (!m) return fail(MGR_BAD_ARGUMENT, "mgr_run: no model");
    mgr_set_run_threads(m->threads);
    for (size_t i = 0; i < m->n_instr; i++) {
#ifdef MGR_PROFILE
        int64_t start = now_ns();
        mgr_take_parts();
        int status = m->fns[i](&m->calls[i]);
        m->instruction_ns[i] = now_ns() - start;
        m->instruction_parts[i] = mgr_take_parts();
#else
        int status = m->fns[i](&m->calls[i]);
#endif
        if (status != MGR_KERNEL_OK) {
            mgr_set_run_threads(1);
            return fail(MGR_KERNEL_FAILED, "instruction %zu failed with status %d", i, status);
        }
    }
    mgr_set_run_threads(1);
    return MGR_OK;
}

const void* mgr_output(const mgr_model* m, size_t i) {
    const io_buf* b = io_at(m, i, 0);
    return b ? b->data : NULL;
}
