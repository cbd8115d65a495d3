/* conv2d on the gather tiles (conv_tile.h) over the whole batch's cells: the driver both
 * executors run, one source. conv.pyx's conv2d_packed (conv_blocked.pxi's packed_call) and the
 * C runtime's conv2d_f32 and data gradient (deploy/csrc/kernels/conv_gather_c.h) each keep
 * their own threads and scratch: they fill a conv_gather (conv_gather_geometry from a
 * conv_shape, conv_gather_walk from the tile), pad the batch (conv_gather_pad over parts of
 * its images), pack the weights where they come unpacked (conv_gather_pack over parts of the
 * blocks) and run conv_gather_item on every work item, each with a slot of conv_gather_slot
 * floats of its thread's.
 *
 * A tile keeps PIX output cells x CH output channels in registers and sums each over (input
 * channel, tap) in order from zero, by fused multiply-adds where its isa has them; conv_out
 * then adds the bias and applies the activation. So the tiles of one arithmetic give the same
 * bits: on packed weights (blocks of P channels, w[g][block][c][tap][P], conv2d_pack_weight's
 * layout) any tile whose CH divides P reads its columns in place (rows P floats apart), which
 * lets an AVX2 CPU run a plan packed for AVX-512's 64-channel tile, bitwise.
 *
 * Work items: a chunk of at most chunk_tiles cell tiles (over the whole batch's cells, so small
 * planes fill the tiles: 8 images of 2x2 cells make 5 tiles of 7 cells rather than 8 half-empty
 * ones) by a group of channel blocks. Per block, the chunk's tiles innermost: a block's weights
 * stay in L2 while the chunk's windows pass (with the blocks innermost, ResNet's 512 -> 512 at
 * 7x7 streamed its 9 MiB of weights from L3 once per tile, 4.5 ms against 3.1 on 1 thread,
 * Intel Xeon family 6 model 207); then the chunk's results go out (transposed into y with the
 * epilogue) from the item's slot while they are still in L1/L2. The channel blocks are split
 * into groups when the items are too few for the threads (min_items: a 7x7 plane is one or two
 * chunks), and so that a group's weights fit in L2 (CONV_GROUP_BYTES) where the next chunk
 * reads them again. No output's sum depends on the items, so every thread count and every
 * min_items gives the same bits. Padded images are copied once into zeroed planes, so the taps
 * need no bounds. */
#ifndef MG_CONV_GATHER_H
#define MG_CONV_GATHER_H

#include <stddef.h>
#include <string.h>

#include "conv_data.h"
#include "conv_tile.h"

#define CONV_GATHER_MAX_TAPS 64         /* the tap table's; larger kernels take another path */
#define CONV_CHUNK_TILES 8              /* a chunk's cell tiles (but panels': below) */
#define CONV_GROUP_BYTES (512 * 1024)   /* a group of channel blocks' weights, where it can */
#define CONV_PANEL_CHUNK_BYTES (256 * 1024) /* a chunk of panels at least (L2) */

typedef struct {
    /* the geometry (conv_gather_geometry); nc, no: channels per group */
    ptrdiff_t batch, groups, cin, cout, nc, no, taps, kdim;
    ptrdiff_t h, w, ph, pw, hp, wp, plane, sh, sw, ow;
    ptrdiff_t ncols, ncells; /* one image's output cells, the batch's */
    ptrdiff_t offs[CONV_GATHER_MAX_TAPS];
    /* the walk (conv_gather_walk) */
    conv_packed_tile t;
    conv_out_fn out;
    ptrdiff_t pack, ldy, nblocks, ntiles, nchunks, chunk_tiles, ogroups;
    int panels; /* planes holds each tile's cells' channels together (conv_gather_panels) */
    /* the call's buffers */
    const float* planes; /* x, its zero-padded copy (batch, cin, hp, wp), or the panels */
    const float* weights; /* per group, blocks of `pack` out channels: [block][c][tap][pack] */
    const float* bias;   /* NULL or per output channel */
    float* y;
    int act;
} conv_gather;

static inline ptrdiff_t conv_ceil_div(ptrdiff_t a, ptrdiff_t b) { return (a + b - 1) / b; }
/* where part i of n units cut into `parts` begins (parallel.pxd's cut) */
static inline ptrdiff_t conv_cut(ptrdiff_t n, ptrdiff_t parts, ptrdiff_t i) {
    return n * i / parts;
}

/* The tile of instruction set `isa` (conv_packed_tiles) that runs weights packed by `pack`
 * channels (the widest whose channels divide it), or, for pack 0, the one padding `no`
 * channels the least; 0 where the isa has none. */
static inline int conv_gather_tile_for(int isa, ptrdiff_t pack, ptrdiff_t no,
                                       conv_packed_tile* out) {
    conv_packed_tile tiles[CONV_PACKED_MAX];
    int n = conv_packed_tiles(isa, tiles), found = 0;
    for (int i = 0; i < n; i++) {
        ptrdiff_t ch = tiles[i].ch;
        int better = pack ? pack % ch == 0 && (!found || ch > out->ch)
                          : !found || conv_ceil_div(no, ch) * ch < conv_ceil_div(no, out->ch) *
                                                                        out->ch;
        if (better) *out = tiles[i];
        found |= better;
    }
    return found;
}

/* c's geometry from the convolution's sizes, its other fields zero; 0 where it has more taps
 * than CONV_GATHER_MAX_TAPS. The caller has checked that the sizes make no overflow. */
static inline int conv_gather_geometry(conv_gather* c, const conv_shape* s) {
    memset(c, 0, sizeof *c);
    if (s->kh * s->kw > CONV_GATHER_MAX_TAPS) return 0;
    c->batch = s->batch, c->groups = s->groups, c->cin = s->cin, c->cout = s->cout;
    c->nc = s->cin / s->groups, c->no = s->cout / s->groups;
    c->taps = s->kh * s->kw, c->kdim = c->nc * c->taps;
    c->h = s->h, c->w = s->w, c->ph = s->ph, c->pw = s->pw;
    c->hp = s->h + 2 * s->ph, c->wp = s->w + 2 * s->pw, c->plane = c->hp * c->wp;
    c->sh = s->sh, c->sw = s->sw, c->ow = s->ow;
    c->ncols = s->oh * s->ow, c->ncells = s->batch * c->ncols;
    for (ptrdiff_t i = 0; i < s->kh; i++)
        for (ptrdiff_t j = 0; j < s->kw; j++)
            c->offs[i * s->kw + j] = i * s->dh * c->wp + j * s->dw;
    return 1;
}

/* the fewest groups, at least `wanted`, that split `blocks` evenly: 3 groups of 4 blocks
 * (1, 1, 2) left one of 2 threads half as much work again as the other */
static inline ptrdiff_t conv_even_groups(ptrdiff_t blocks, ptrdiff_t wanted) {
    ptrdiff_t groups = wanted < 1 ? 1 : wanted > blocks ? blocks : wanted;
    if (groups < 1) return 1;
    while (blocks % groups) groups++;
    return groups;
}

/* c's work items on tile t (of instruction set isa) over weights packed by `pack` channels (0:
 * by the tile's, packed on the call): chunks of CONV_CHUNK_TILES tiles, the channel blocks in
 * groups of at least min_items items in all and, where chunks reread them, CONV_GROUP_BYTES of
 * weights at most */
static inline void conv_gather_walk(conv_gather* c, conv_packed_tile t, ptrdiff_t pack,
                                    ptrdiff_t min_items, int isa) {
    ptrdiff_t units, wanted, bytes;
    c->t = t;
    c->out = conv_out_of(isa);
    c->pack = pack ? pack : t.ch;
    c->nblocks = conv_ceil_div(c->no, t.ch);
    c->ldy = c->nblocks * t.ch;
    c->ntiles = conv_ceil_div(c->ncells, t.pix);
    c->chunk_tiles = CONV_CHUNK_TILES;
    c->nchunks = conv_ceil_div(c->ntiles, CONV_CHUNK_TILES);
    units = c->groups * c->nchunks;
    wanted = conv_ceil_div(min_items, units > 0 ? units : 1);
    bytes = conv_ceil_div(c->kdim * c->ldy * (ptrdiff_t)sizeof(float), CONV_GROUP_BYTES);
    if (c->nchunks > 1 && bytes > wanted) wanted = bytes;
    c->ogroups = conv_even_groups(c->nblocks, wanted);
}

/* the work items of c's walk */
static inline ptrdiff_t conv_gather_items(const conv_gather* c) {
    return c->groups * c->ogroups * c->nchunks;
}

/* the floats of one work item's slot: a chunk's results, cells by the padded channels */
static inline ptrdiff_t conv_gather_slot(const conv_gather* c) {
    return c->chunk_tiles * c->t.pix * c->ldy;
}

/* images [n0, n1) of x (batch, cin, h, w) copied into zeroed planes (batch, cin, hp, wp) */
static inline void conv_gather_pad(const conv_gather* c, const float* x, float* padded,
                                   ptrdiff_t n0, ptrdiff_t n1) {
    for (ptrdiff_t n = n0; n < n1; n++) {
        float* dst = padded + n * c->cin * c->plane;
        memset(dst, 0, (size_t)(c->cin * c->plane) * sizeof(float));
        for (ptrdiff_t ch = 0; ch < c->cin; ch++)
            for (ptrdiff_t r = 0; r < c->h; r++)
                memcpy(dst + (ch * c->hp + r + c->ph) * c->wp + c->pw,
                       x + ((n * c->cin + ch) * c->h + r) * c->w, (size_t)c->w * sizeof(float));
    }
}

/* Blocks [b0, b1) of the weights packed by `pack` output channels: packed[g][block][k][pack] =
 * the weight of output channel block * pack + r of group g, k = input channel * taps + tap, 0
 * past the group's `no`; blocks = groups * ceil(no / pack). The filters w (groups * no, nc,
 * taps), or with flip the data gradient's weights of the forward filters w (conv_data.h: nc
 * dy channels, no dx channels per group). */
static inline void conv_gather_pack(const float* w, float* packed, ptrdiff_t nc,
                                    ptrdiff_t no, ptrdiff_t taps, ptrdiff_t pack, int flip,
                                    ptrdiff_t b0, ptrdiff_t b1) {
    ptrdiff_t kdim = nc * taps, blocks = conv_ceil_div(no, pack);
    for (ptrdiff_t gb = b0; gb < b1; gb++) {
        ptrdiff_t g = gb / blocks, o0 = gb % blocks * pack;
        float* blk = packed + gb * kdim * pack;
        for (ptrdiff_t r = 0; r < pack; r++)
            for (ptrdiff_t j = 0, o = o0 + r; j < kdim; j++)
                blk[j * pack + r] = o >= no ? 0.0f
                                    : flip  ? w[conv_data_weight(g, o, j / taps, j % taps, nc,
                                                                 no, taps)]
                                            : w[(g * no + o) * kdim + j];
    }
}

/* Work item `item` of c: chunk item % nchunks of the cells, channel block group (item /
 * nchunks) % ogroups of convolution group item / (nchunks * ogroups), through `res` (a slot)
 * into y */
static inline void conv_gather_item(const conv_gather* c, ptrdiff_t item, float* res) {
    const float* px[CONV_PIX_MAX];
    ptrdiff_t pix = c->t.pix, ch = c->t.ch, chunk = item % c->nchunks;
    ptrdiff_t og = item / c->nchunks % c->ogroups, g = item / (c->nchunks * c->ogroups);
    ptrdiff_t first = conv_cut(c->ntiles, c->nchunks, chunk) * pix;
    ptrdiff_t last = conv_cut(c->ntiles, c->nchunks, chunk + 1) * pix;
    ptrdiff_t ob0 = og * c->nblocks / c->ogroups, ob1 = (og + 1) * c->nblocks / c->ogroups;
    ptrdiff_t o1 = ob1 * ch < c->no ? ob1 * ch : c->no;
    const float* planes = c->planes + g * c->nc * c->plane;
    const float* wg = c->weights + g * conv_ceil_div(c->no, c->pack) * c->pack * c->kdim;
    if (last > c->ncells) last = c->ncells;
    for (ptrdiff_t o = ob0; o < ob1; o++) { /* a block's weights stay in cache past the tiles */
        const float* wo = wg + o * ch / c->pack * c->kdim * c->pack + o * ch % c->pack;
        for (ptrdiff_t i = 0; i * pix < last - first; i++) {
            for (ptrdiff_t p = 0; p < pix; p++) { /* a tile past the last cell repeats it */
                ptrdiff_t cell = first + i * pix + p < c->ncells ? first + i * pix + p
                                                                 : c->ncells - 1;
                ptrdiff_t q = cell % c->ncols;
                px[p] = c->panels ? planes + cell / pix * c->cin * pix + cell % pix
                                  : planes + cell / c->ncols * c->cin * c->plane +
                                        q / c->ow * c->sh * c->wp + q % c->ow * c->sw;
            }
            c->t.fn(px, c->plane, c->offs, c->taps, c->nc, wo, c->pack,
                    res + i * pix * c->ldy + o * ch, c->ldy, 0);
        }
    }
    for (ptrdiff_t cell = first; cell < last;) { /* out by images: a chunk may span them */
        ptrdiff_t n = cell / c->ncols;
        ptrdiff_t end = (n + 1) * c->ncols < last ? (n + 1) * c->ncols : last;
        c->out(res + (cell - first) * c->ldy, c->ldy,
               c->y + (n * c->cout + g * c->no) * c->ncols + cell % c->ncols, c->ncols,
               end - cell, ob0 * ch, o1, c->bias ? c->bias + g * c->no : NULL, c->act);
        cell = end;
    }
}

/* ---- 1x1 convolutions, unpadded, one group: their cells packed into panels ------------------
 * A gather tile broadcasts each of its cells' values, channel after channel: on NCHW planes
 * every channel's few cells sit on a cache line of their own (at a stride, half used or less),
 * so a tile over 256 channels touches 256 lines, besides its weights, and L1 holds no more.
 * Here each tile's PIX cells are copied once, channel by channel, into a panel
 * (panels[tile][c][PIX]) the tiles read as a stream, at a channel stride of PIX: each output
 * the same sum in the same order (one tap: the input channels from zero), bitwise the walk
 * over the planes. */

/* the floats of c's panels (its walk made): a tile's cells by every input channel */
static inline ptrdiff_t conv_gather_panels_size(const conv_gather* c) {
    return c->ntiles * c->t.pix * c->cin;
}

/* panels [t0, t1) of x (batch, cin, h, w), by c's walk before conv_gather_on_panels: panel t
 * holds cells t * pix .. (the last one's cells only) */
static inline void conv_gather_panel(const conv_gather* c, const float* x, float* panels,
                                     ptrdiff_t t0, ptrdiff_t t1) {
    ptrdiff_t from[CONV_PIX_MAX], pix = c->t.pix;
    for (ptrdiff_t t = t0; t < t1; t++) {
        ptrdiff_t n = c->ncells - t * pix < pix ? c->ncells - t * pix : pix;
        float* panel = panels + t * c->cin * pix;
        for (ptrdiff_t p = 0; p < n; p++) {
            ptrdiff_t cell = t * pix + p, q = cell % c->ncols;
            from[p] = cell / c->ncols * c->cin * c->plane + q / c->ow * c->sh * c->w +
                      q % c->ow * c->sw;
        }
        for (ptrdiff_t ch = 0; ch < c->cin; ch++, panel += pix)
            for (ptrdiff_t p = 0; p < n; p++) panel[p] = x[from[p] + ch * c->plane];
    }
}

/* c's walk over `panels` (conv_gather_panel's, every tile's): chunks of as many panels as
 * CONV_PANEL_CHUNK_BYTES hold, so that each block of weights is read once per chunk (a layer of
 * few cells and many weights, ResNet's last skip: 49 cells by 256 x 512 weights, reads them
 * once), the channel blocks in groups of at least min_items items in all */
static inline void conv_gather_on_panels(conv_gather* c, const float* panels,
                                         ptrdiff_t min_items) {
    ptrdiff_t per = CONV_PANEL_CHUNK_BYTES / (c->cin * c->t.pix * (ptrdiff_t)sizeof(float));
    c->chunk_tiles = per > CONV_CHUNK_TILES ? per : CONV_CHUNK_TILES;
    c->nchunks = conv_ceil_div(c->ntiles, c->chunk_tiles);
    c->ogroups = conv_even_groups(c->nblocks,
                                  conv_ceil_div(min_items, c->nchunks > 0 ? c->nchunks : 1));
    c->planes = panels;
    c->plane = c->t.pix; /* the tiles' channel stride */
    c->panels = 1;
}

/* ---- a 1x1 convolution of 1x1 planes: a GEMM of rows ----------------------------------------
 * y[r, :] = x[r, :] W^T over the batch's rows r, each read where it is (x (m, k) row-major, y
 * (m, n)): the prepack pass makes one of every linear layer of weights alone. Its work items
 * are the other way round from conv_gather_item's: a channel block by a group of row tiles, so
 * one block's weights (k x 64 floats: 200 KiB for k = 784) stay in L2 while every row tile
 * passes, where the chunks stream all the weights past each tile (4 MiB per 7 rows of a 1024 x
 * 1024 layer, from L3). A tile writes into y directly where it is whole, else into a stack
 * buffer; each output the same sum as conv_gather_item's. */

/* work item `item`: channel block item / rgroups, its group item % rgroups of row tiles;
 * packed: blocks of t.ch channels, bias NULL or per channel, act an activation.h code */
static inline void conv_gather_rows_item(const float* x, const float* packed,
                                         const float* bias, int act, float* y, ptrdiff_t item,
                                         ptrdiff_t rgroups, conv_packed_tile t, ptrdiff_t m,
                                         ptrdiff_t n, ptrdiff_t k) {
    const float* px[CONV_PIX_MAX];
    float part[CONV_PIX_MAX * 64]; /* a tile's result: at most 12 rows x 64 channels */
    ptrdiff_t zero = 0, ntiles = conv_ceil_div(m, t.pix), o = item / rgroups;
    ptrdiff_t g = item % rgroups, c0 = o * t.ch, c1 = c0 + t.ch < n ? c0 + t.ch : n;
    for (ptrdiff_t tile = g * ntiles / rgroups; tile < (g + 1) * ntiles / rgroups; tile++) {
        ptrdiff_t r0 = tile * t.pix, rows = m - r0 < t.pix ? m - r0 : t.pix, ld;
        float* dst;
        for (ptrdiff_t p = 0; p < t.pix; p++) /* a short last tile reads its last row again */
            px[p] = x + (r0 + p < m ? r0 + p : m - 1) * k;
        if (rows == t.pix && c1 - c0 == t.ch) dst = y + r0 * n + c0, ld = n;
        else dst = part, ld = t.ch;
        t.fn(px, 1, &zero, 1, k, packed + o * k * t.ch, t.ch, dst, ld, 0);
        for (ptrdiff_t r = 0; r < rows; r++) /* the epilogue while the tile is in L1 */
            for (ptrdiff_t c = c0; c < c1; c++)
                y[(r0 + r) * n + c] = conv_out_one(dst[r * ld + c - c0], bias ? bias[c] : 0, act);
    }
}

#endif
