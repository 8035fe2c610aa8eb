/*
 * qcow2: reading compressed clusters.
 *
 * Theory of operation.  A compressed cluster is one cluster of guest data
 * deflated into a run of 512-byte sectors that need not start on a
 * sector or cluster boundary (qcow2-cluster.c reads the run).  The image
 * header says which method every compressed cluster of the image uses:
 * zlib (type 0: a raw deflate stream, no zlib header) or zstd (type 1:
 * zstd frames).  Either way decompression stops as soon as a whole
 * cluster has come out, because the run ends on a sector boundary and
 * the bytes after the stream may belong to the next compressed cluster.
 * Output shorter than a cluster, or a stream the library rejects, is a
 * corrupt image: -EIO for that request.  Each library is optional at
 * build time (meson features zlib, zstd); an image that needs a missing
 * one is refused at open with a message saying so (qcow2.c).
 *
 * Any thread, no lock needed: everything is on the caller's stack.
 */
#include <errno.h>
#include <string.h>
#include "qcow2.h"
#ifdef CONFIG_ZLIB
#include <zlib.h>
#endif
#ifdef CONFIG_ZSTD
#include <zstd.h>
#endif

bool qcow2_compression_supported(uint32_t t)
{
#ifdef CONFIG_ZLIB
    if (t == 0) {
        return true;
    }
#endif
#ifdef CONFIG_ZSTD
    if (t == 1) {
        return true;
    }
#endif
    return false;
}

#ifdef CONFIG_ZLIB
static int qcow2_inflate_zlib(const uint8_t *in, size_t in_len, uint8_t *out,
                              size_t out_len)
{
    z_stream z = { 0 };
    int r;

    /* Negative window bits: a raw deflate stream, 4 KiB window (12). */
    if (inflateInit2(&z, -12) != Z_OK) {
        return -ENOMEM;
    }
    z.next_in = (Bytef *)in;
    z.avail_in = in_len;
    z.next_out = out;
    z.avail_out = out_len;
    r = inflate(&z, Z_FINISH);
    inflateEnd(&z);
    /* The stream may end exactly at the cluster (Z_STREAM_END) or run
     * into the next one's bytes (Z_BUF_ERROR with the output full). */
    if ((r == Z_STREAM_END || r == Z_BUF_ERROR) && z.avail_out == 0) {
        return 0;
    }
    return -EIO;
}
#endif

#ifdef CONFIG_ZSTD
#define QCOW2_ZSTD_MIN_WINDOW_LOG 10

static int qcow2_inflate_zstd(const uint8_t *in, size_t in_len, uint8_t *out,
                              size_t out_len)
{
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    ZSTD_inBuffer ib = { in, in_len, 0 };
    ZSTD_outBuffer ob = { out, out_len, 0 };
    int ret = 0;

    if (!dctx) {
        return -ENOMEM;
    }
    /*
     * A frame's header says how big a window the decoder must keep, and
     * the decoder allocates it before the first block: up to 128 MiB by
     * zstd's default limit, from a few bytes of an untrusted image, in
     * each worker at once.  A cluster's data needs no window larger than
     * the cluster (zstd's smallest is 1 KiB), so a frame that asks for
     * more is refused (-EIO) before anything is allocated for it.
     */
    if (ZSTD_isError(ZSTD_DCtx_setParameter(
            dctx, ZSTD_d_windowLogMax,
            MAX(__builtin_ctzll(out_len), QCOW2_ZSTD_MIN_WINDOW_LOG)))) {
        ZSTD_freeDCtx(dctx);
        return -EIO;
    }
    /* Frame after frame until the cluster is full; a call that makes
     * no progress means the input ran out first. */
    while (ob.pos < ob.size) {
        size_t in_before = ib.pos, out_before = ob.pos;
        size_t r = ZSTD_decompressStream(dctx, &ob, &ib);

        if (ZSTD_isError(r) ||
            (ib.pos == in_before && ob.pos == out_before)) {
            ret = -EIO;
            break;
        }
    }
    ZSTD_freeDCtx(dctx);
    return ret;
}
#endif

int qcow2_decompress(Qcow2State *s, const uint8_t *in, size_t in_len,
                     uint8_t *out)
{
    switch (s->compression_type) {
#ifdef CONFIG_ZLIB
    case 0:
        return qcow2_inflate_zlib(in, in_len, out, s->cluster_size);
#endif
#ifdef CONFIG_ZSTD
    case 1:
        return qcow2_inflate_zstd(in, in_len, out, s->cluster_size);
#endif
    default:
        return -ENOTSUP;
    }
}
