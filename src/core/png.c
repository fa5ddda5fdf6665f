/*
 * An uncompressed PNG writer and the heatmap renderer on top of it (core/png.h says what the files
 * look like). The only parts of PNG and zlib needed are the chunk framing with its CRC-32, the zlib
 * header and Adler-32 trailer, and deflate's stored blocks, which are byte-aligned copies of the data.
 */
#include "core/png.h"
#include "core/files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------
// checksums

// CRC-32 with the reflected polynomial 0xEDB88320, four bits at a time: a 16-entry table is small
// enough to be a constant (no lazy init to race on), and at ~1 GB/s it is far faster than the disk
static const uint32_t CRC_NIBBLE_[16] = {
    0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4, 0x4db26158, 0x5005713c,
    0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c, 0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c,
};

// continue a CRC: crc is the value so far (0 for none), as zlib's crc32(crc, buf, n)
static uint32_t crc32_update_(uint32_t crc, const uint8_t *buf, size_t n) {
    uint32_t c = ~crc;
    for (size_t i = 0; i < n; i++) {
        c ^= buf[i];
        c = (c >> 4) ^ CRC_NIBBLE_[c & 15];
        c = (c >> 4) ^ CRC_NIBBLE_[c & 15];
    }
    return ~c;
}

uint32_t png_crc32(const uint8_t *buf, size_t n) { return crc32_update_(0, buf, n); }

uint32_t png_adler32(const uint8_t *buf, size_t n) {
    uint32_t a = 1, b = 0;
    while (n > 0) {
        // 5552 is the most bytes before b can overflow 32 bits (zlib's NMAX), so the modulo runs rarely
        size_t k = n < 5552 ? n : 5552;
        n -= k;
        while (k--) {
            a += *buf++;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    return b << 16 | a;
}

// ----------------------------------------------------------------------------
// the file

static void store_be32_(uint8_t *p, uint32_t x) {
    p[0] = (uint8_t)(x >> 24);
    p[1] = (uint8_t)(x >> 16);
    p[2] = (uint8_t)(x >> 8);
    p[3] = (uint8_t)x;
}

// length, type, data, CRC of type + data; write errors are sticky in f and checked once at the end
static void chunk_write_(FILE *f, const char type[4], const uint8_t *data, uint32_t n) {
    uint8_t head[8], tail[4];
    store_be32_(head, n);
    memcpy(head + 4, type, 4);
    store_be32_(tail, crc32_update_(crc32_update_(0, head + 4, 4), data, n));
    fwrite(head, 1, 8, f);
    if (n) fwrite(data, 1, n, f);
    fwrite(tail, 1, 4, f);
}

#define STORED_MAX_ 65535  // LEN of a stored block is 16 bits

int png_write(const char *path, const uint8_t *pix, int w, int h, int channels, Err *e) {
    // pix is (h, w, channels)
    if (w < 1 || h < 1 || (channels != 1 && channels != 3))
        return err_set(e, "%s: cannot write a %dx%d image of %d channels (need positive sizes, 1 or 3 channels)",
                       path, w, h, channels);
    size_t stride = (size_t)w * channels;
    if (stride * (size_t)h > ((size_t)1 << 30))
        return err_set(e, "%s: %dx%d is too large for an uncompressed PNG (over 1 GiB)", path, w, h);

    // the zlib payload: every row prefixed with its filter type, 0 = None (the bytes as they are)
    size_t n_raw = (stride + 1) * (size_t)h;
    uint8_t *raw = xmalloc(n_raw);
    for (int y = 0; y < h; y++) {
        raw[(size_t)y * (stride + 1)] = 0;
        memcpy(raw + (size_t)y * (stride + 1) + 1, pix + (size_t)y * stride, stride);
    }

    AtomicFile af;
    if (atomic_file_open(&af, path, e) != 0) {
        free(raw);
        return -1;
    }
    FILE *f = af.f;
    fwrite("\x89PNG\r\n\x1a\n", 1, 8, f);
    uint8_t ihdr[13];
    store_be32_(ihdr, (uint32_t)w);
    store_be32_(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8;                        // bits per sample
    ihdr[9] = channels == 3 ? 2 : 0;    // colour type: 2 truecolour, 0 greyscale
    ihdr[10] = ihdr[11] = ihdr[12] = 0; // compression deflate, filter method 0, no interlace
    chunk_write_(f, "IHDR", ihdr, 13);

    // one IDAT per stored block: the zlib header rides in the first, the Adler-32 in the last
    uint8_t *buf = xmalloc(2 + 5 + STORED_MAX_ + 4);
    uint32_t adler = png_adler32(raw, n_raw);
    for (size_t off = 0; off < n_raw; off += STORED_MAX_) {
        size_t len = n_raw - off < STORED_MAX_ ? n_raw - off : STORED_MAX_;
        int last = off + len == n_raw;
        size_t k = 0;
        if (off == 0) {
            buf[k++] = 0x78;  // CMF: deflate with a 32 KiB window
            buf[k++] = 0x01;  // FLG: no dictionary, "fastest" level; 0x7801 is a multiple of 31
        }
        buf[k++] = (uint8_t)last;  // BFINAL, BTYPE 00 = stored, then padding to the byte boundary
        buf[k++] = (uint8_t)len;
        buf[k++] = (uint8_t)(len >> 8);
        buf[k++] = (uint8_t)~len;
        buf[k++] = (uint8_t)(~len >> 8);
        memcpy(buf + k, raw + off, len);
        k += len;
        if (last) {
            store_be32_(buf + k, adler);
            k += 4;
        }
        chunk_write_(f, "IDAT", buf, (uint32_t)k);
    }
    chunk_write_(f, "IEND", NULL, 0);
    free(buf);
    free(raw);

    return atomic_file_commit(&af, e);
}

// ----------------------------------------------------------------------------
// heatmaps

// inferno (matplotlib's, by Smith and van der Walt) sampled at 0, 1/8, ..., 1: dark to bright with
// lightness rising steadily, so equal steps in value look like equal steps, also in grayscale print
static const uint8_t HEAT_ANCHORS_[9][3] = {
    {0, 0, 4},      {31, 12, 72},   {85, 15, 109},  {136, 34, 106}, {186, 54, 85},
    {227, 89, 51},  {249, 140, 10}, {249, 201, 50}, {252, 255, 164},
};

void png_colormap(float v, uint8_t rgb[3]) {
    if (isnan(v)) {  // masked: a grey that no colour of the map comes close to
        rgb[0] = rgb[1] = rgb[2] = 128;
        return;
    }
    float x = (v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v) * 8.0f;
    int k = (int)x;
    if (k > 7) k = 7;  // v = 1 is the end of the last segment
    float t = x - (float)k;
    for (int c = 0; c < 3; c++) {
        float a = HEAT_ANCHORS_[k][c], b = HEAT_ANCHORS_[k + 1][c];
        rgb[c] = (uint8_t)(a + t * (b - a) + 0.5f);
    }
}

// out (oh, ow): block means of m (rows, cols), NaN left out; identity when the sizes are equal
static void heat_downsample_(float *out, const float *m, int rows, int cols, int oh, int ow) {
    for (int i = 0; i < oh; i++) {
        int r0 = (int)((long)i * rows / oh), r1 = (int)((long)(i + 1) * rows / oh);
        for (int j = 0; j < ow; j++) {
            int c0 = (int)((long)j * cols / ow), c1 = (int)((long)(j + 1) * cols / ow);
            double sum = 0.0;
            long count = 0;
            for (int r = r0; r < r1; r++) {
                const float *m_r = m + (size_t)r * cols;
                for (int c = c0; c < c1; c++)
                    if (!isnan(m_r[c])) {
                        sum += m_r[c];
                        count++;
                    }
            }
            out[(size_t)i * ow + j] = count ? (float)(sum / (double)count) : NAN;
        }
    }
}

static int float_cmp_(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// the value that maps to the top colour: 99.5th percentile of the finite values, else their maximum,
// else 1 (no finite value above 0: everything is drawn at the bottom colour)
static float heat_scale_(const float *img, size_t n) {
    float *v = xmalloc(n * sizeof(float));
    size_t nf = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(img[i])) v[nf++] = img[i];
    float q = 0.0f;
    if (nf > 0) {
        qsort(v, nf, sizeof(float), float_cmp_);
        double pos = 0.995 * (double)(nf - 1);
        size_t k = (size_t)pos;
        q = k + 1 < nf ? (float)(v[k] + (pos - (double)k) * (v[k + 1] - v[k])) : v[k];
        if (!(q > 0.0f)) q = v[nf - 1];
    }
    free(v);
    return q > 0.0f ? q : 1.0f;
}

// a diverging map for signed values: white at 0, blue (33, 102, 172) at -1, red (178, 24, 43) at +1
void png_colormap_signed(float v, uint8_t rgb[3]) {
    if (isnan(v)) {
        rgb[0] = rgb[1] = rgb[2] = 128;
        return;
    }
    static const uint8_t mid[3] = {247, 247, 247}, neg[3] = {33, 102, 172}, pos[3] = {178, 24, 43};
    float t = fabsf(v) > 1.0f ? 1.0f : fabsf(v);
    const uint8_t *end = v < 0.0f ? neg : pos;
    for (int c = 0; c < 3; c++) rgb[c] = (uint8_t)(mid[c] + t * ((float)end[c] - mid[c]) + 0.5f);
}

static int heatmap_write_(const char *path, const float *m, int rows, int cols, int max_px, int sign, Err *e) {
    // m is (rows, cols)
    if (rows < 1 || cols < 1 || max_px < 1)
        return err_set(e, "%s: cannot draw a %dx%d heatmap at most %d pixels wide (need positive sizes)",
                       path, rows, cols, max_px);
    int oh = rows < max_px ? rows : max_px, ow = cols < max_px ? cols : max_px;
    size_t n = (size_t)oh * ow;
    float *img = xmalloc(n * sizeof(float));
    heat_downsample_(img, m, rows, cols, oh, ow);
    float scale;
    if (sign) {  // the scale of the magnitudes
        float *a = xmalloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) a[i] = fabsf(img[i]);
        scale = heat_scale_(a, n);
        free(a);
    } else {
        scale = heat_scale_(img, n);
    }
    uint8_t *pix = xmalloc(n * 3);
    for (size_t i = 0; i < n; i++) {
        float x = img[i];
        if (!isnan(x)) {
            x /= scale;
            float a = fabsf(x) > 1.0f ? 1.0f : fabsf(x);
            // gamma 0.5: small weights stay visible
            if (sign) x = x < 0.0f ? -sqrtf(a) : sqrtf(a);
            else x = x < 0.0f ? 0.0f : sqrtf(a);
        }
        if (sign) png_colormap_signed(x, pix + 3 * i);
        else png_colormap(x, pix + 3 * i);
    }
    free(img);
    int rc = png_write(path, pix, ow, oh, 3, e);
    free(pix);
    return rc;
}

int png_write_heatmap(const char *path, const float *m, int rows, int cols, int max_px, Err *e) {
    return heatmap_write_(path, m, rows, cols, max_px, 0, e);
}

int png_write_heatmap_signed(const char *path, const float *m, int rows, int cols, int max_px, Err *e) {
    return heatmap_write_(path, m, rows, cols, max_px, 1, e);
}
