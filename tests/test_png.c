/*
 * The PNG writer, checked by reading its files back with a small independent reader: signature, every
 * chunk's CRC, IHDR, the zlib stream of stored blocks (LEN/NLEN, BFINAL, Adler-32), the filter bytes and
 * every pixel. Then the heatmap: its size after downsampling, the masked grey, the colormap's ends.
 */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/png.h"
#include "test.h"
#include "testfs.h"

static uint32_t be32_(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

typedef struct Png {
    int w, h, channels;
    uint8_t *pix;  // (h, w, channels)
    int n_blocks;  // stored blocks in the zlib stream
} Png;

// parse path into p; returns NULL when fine, else what is wrong with the file
static const char *png_read_(const char *path, Png *p) {
    static char why[200];
    memset(p, 0, sizeof *p);
    size_t n;
    uint8_t *f = file_read_(path, &n);
    if (!f) return "cannot read the file";
    uint8_t *z = malloc(n);  // the IDAT chunks concatenated
    size_t nz = 0, at = 8;
    int saw_ihdr = 0, saw_iend = 0, depth = 0, ctype = -1;
    const char *bad = NULL;
    if (n < 8 || memcmp(f, "\x89PNG\r\n\x1a\n", 8) != 0) bad = "no PNG signature";
    while (!bad && !saw_iend) {
        if (at + 12 > n) { bad = "truncated chunk"; break; }
        uint32_t len = be32_(f + at);
        if (len > n - at - 12) { bad = "chunk length past the end"; break; }
        const uint8_t *type = f + at + 4, *data = f + at + 8;
        if (png_crc32(type, (size_t)len + 4) != be32_(data + len)) {
            snprintf(why, sizeof why, "bad CRC on chunk %.4s at byte %zu", (const char *)type, at);
            bad = why;
            break;
        }
        if (!saw_ihdr && memcmp(type, "IHDR", 4) != 0) { bad = "first chunk is not IHDR"; break; }
        if (!memcmp(type, "IHDR", 4)) {
            if (len != 13) { bad = "IHDR is not 13 bytes"; break; }
            p->w = (int)be32_(data);
            p->h = (int)be32_(data + 4);
            depth = data[8];
            ctype = data[9];
            if (data[10] || data[11] || data[12]) { bad = "IHDR compression/filter/interlace not 0"; break; }
            saw_ihdr = 1;
        } else if (!memcmp(type, "IDAT", 4)) {
            memcpy(z + nz, data, len);
            nz += len;
        } else if (!memcmp(type, "IEND", 4)) {
            if (len != 0) { bad = "IEND has data"; break; }
            saw_iend = 1;
        }
        at += (size_t)len + 12;
    }
    if (!bad && at != n) bad = "bytes after IEND";
    if (!bad && depth != 8) bad = "bit depth is not 8";
    if (!bad && ctype != 0 && ctype != 2) bad = "colour type is not 0 or 2";
    p->channels = ctype == 2 ? 3 : 1;

    // zlib: CMF/FLG, stored blocks, Adler-32 of the inflated bytes
    size_t stride = (size_t)p->w * p->channels, n_raw = (stride + 1) * (size_t)p->h, got = 0;
    uint8_t *raw = bad ? NULL : malloc(n_raw);
    if (!bad && (nz < 2 || z[0] != 0x78 || (z[0] * 256 + z[1]) % 31 != 0 || (z[1] & 0x20))) bad = "bad zlib header";
    size_t zi = 2;
    int final = 0;
    while (!bad && !final) {
        if (zi + 5 > nz) { bad = "truncated stored block"; break; }
        if ((z[zi] & 6) != 0) { bad = "block is not stored (BTYPE != 00)"; break; }
        final = z[zi] & 1;
        size_t len = z[zi + 1] | (size_t)z[zi + 2] << 8, nlen = z[zi + 3] | (size_t)z[zi + 4] << 8;
        if ((len ^ 0xffff) != nlen) { bad = "NLEN is not the complement of LEN"; break; }
        zi += 5;
        if (zi + len > nz || got + len > n_raw) { bad = "stored block runs past the data"; break; }
        memcpy(raw + got, z + zi, len);
        got += len;
        zi += len;
        p->n_blocks++;
    }
    if (!bad && got != n_raw) bad = "inflated size is not (1 + w*channels) * h";
    if (!bad && (zi + 4 != nz || be32_(z + zi) != png_adler32(raw, n_raw))) bad = "bad Adler-32 trailer";
    if (!bad) {  // undo filter type 0 (the only one the writer uses)
        p->pix = malloc(stride * (size_t)p->h);
        for (int y = 0; y < p->h && !bad; y++) {
            if (raw[(size_t)y * (stride + 1)] != 0) bad = "row filter is not 0";
            memcpy(p->pix + (size_t)y * stride, raw + (size_t)y * (stride + 1) + 1, stride);
        }
    }
    free(raw);
    free(z);
    free(f);
    return bad;
}

static void test_checksums(void) {
    CHECK(png_crc32((const uint8_t *)"123456789", 9) == 0xCBF43926u, "CRC-32 check value of \"123456789\"");
    CHECK(png_crc32(NULL, 0) == 0, "CRC-32 of nothing");
    CHECK(png_adler32((const uint8_t *)"Wikipedia", 9) == 0x11E60398u, "Adler-32 of \"Wikipedia\"");
    CHECK(png_adler32(NULL, 0) == 1, "Adler-32 of nothing");
    // a million 0xff bytes: past zlib's NMAX many times, so the deferred modulo must not overflow
    size_t n = 1000000;
    uint8_t *ff = malloc(n);
    memset(ff, 0xff, n);
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < n; i++) {
        a = (a + 0xff) % 65521;
        b = (b + a) % 65521;
    }
    CHECK(png_adler32(ff, n) == (b << 16 | a), "Adler-32 of 1e6 x 0xff matches the per-byte modulo");
    free(ff);
}

// write a (h, w, channels) pattern, read it back, compare every pixel
static void round_trip_(int w, int h, int channels, int want_blocks) {
    char path[256], name[64];
    snprintf(name, sizeof name, "rt_%dx%dx%d.png", w, h, channels);
    path_(path, sizeof path, name);
    size_t n = (size_t)w * h * channels;
    uint8_t *pix = malloc(n);
    for (size_t i = 0; i < n; i++) pix[i] = (uint8_t)(i * 7 + i / 251);
    Err e = {{0}};
    CHECK(png_write(path, pix, w, h, channels, &e) == 0, "png_write %dx%dx%d: %.200s", w, h, channels, e.msg);
    Png p;
    const char *bad = png_read_(path, &p);
    CHECK(bad == NULL, "%dx%dx%d reads back as a valid PNG: %s", w, h, channels, bad ? bad : "");
    CHECK(p.w == w && p.h == h && p.channels == channels, "%dx%dx%d IHDR: %dx%d, %d channels", w, h, channels,
          p.w, p.h, p.channels);
    CHECK(p.pix && memcmp(p.pix, pix, n) == 0, "%dx%dx%d pixels round trip exactly", w, h, channels);
    if (want_blocks) CHECK(p.n_blocks == want_blocks, "%dx%dx%d: %d stored blocks (want %d)", w, h, channels,
                           p.n_blocks, want_blocks);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "%dx%dx%d: no .tmp file left behind", w, h, channels);
    free(p.pix);
    free(pix);
}

static void test_write(void) {
    round_trip_(7, 5, 1, 1);
    round_trip_(3, 4, 3, 1);
    round_trip_(1, 1, 1, 1);
    // 300 * (1 + 900) = 270300 bytes: five stored blocks, the last one partial
    round_trip_(300, 300, 3, 5);
    // exactly 65535 bytes of payload: one full block, the edge of the block loop
    round_trip_(65534, 1, 1, 1);

    // overwriting an existing file replaces it
    char path[256];
    path_(path, sizeof path, "over.png");
    uint8_t a[4] = {1, 2, 3, 4}, b[4] = {9, 8, 7, 6};
    Err e = {{0}};
    png_write(path, a, 2, 2, 1, &e);
    CHECK(png_write(path, b, 2, 2, 1, &e) == 0, "png_write over an existing file: %.200s", e.msg);
    Png p;
    CHECK(png_read_(path, &p) == NULL && p.pix && memcmp(p.pix, b, 4) == 0, "the file holds the second image");
    free(p.pix);
}

static void test_errors(void) {
    uint8_t px[3] = {0};
    char path[256], file[256];
    Err e = {{0}};
    path_(path, sizeof path, "no/such/dir/x.png");
    CHECK(png_write(path, px, 1, 1, 3, &e) == -1, "png_write into a missing directory fails");
    CHECK_CONTAINS(e.msg, path, "the error names the path");
    CHECK_CONTAINS(e.msg, "No such file", "the error says why");

    path_(file, sizeof file, "plain");
    file_write_(file, "x", 1);
    path_(path, sizeof path, "plain/x.png");  // a "directory" that is a regular file: fails even as root
    e.msg[0] = '\0';
    CHECK(png_write_heatmap(path, (const float[]){1.0f}, 1, 1, 8, &e) == -1, "heatmap under a regular file fails");
    CHECK_CONTAINS(e.msg, path, "the heatmap error names the path");

    path_(path, sizeof path, "bad.png");
    CHECK(png_write(path, px, 1, 1, 2, &e) == -1, "2 channels refused");
    CHECK_CONTAINS(e.msg, "channels", "the error says channels");
    CHECK(png_write(path, px, 0, 1, 1, &e) == -1, "width 0 refused");
    CHECK(png_write_heatmap(path, (const float[]){1.0f}, 1, 1, 0, &e) == -1, "max_px 0 refused");
    CHECK(access(path, F_OK) != 0, "refused writes create no file");
}

static void pixel_(const Png *p, int y, int x, uint8_t out[3]) { memcpy(out, p->pix + ((size_t)y * p->w + x) * 3, 3); }

static int rgb_eq_(const uint8_t a[3], int r, int g, int b) { return a[0] == r && a[1] == g && a[2] == b; }

static void test_heatmap(void) {
    uint8_t top[3], bottom[3], grey[3], c[3];
    png_colormap(1.0f, top);
    png_colormap(0.0f, bottom);
    png_colormap(NAN, grey);
    CHECK(rgb_eq_(top, 252, 255, 164), "colormap top is pale yellow (252, 255, 164)");
    CHECK(rgb_eq_(bottom, 0, 0, 4), "colormap bottom is near black (0, 0, 4)");
    CHECK(rgb_eq_(grey, 128, 128, 128), "NaN is mid grey");
    png_colormap(7.0f, c);
    CHECK(rgb_eq_(c, 252, 255, 164), "values above 1 clip to the top colour");
    int rising = 1, prev = -1;
    for (int i = 0; i <= 64; i++) {  // dark to bright: the channel sum never falls
        png_colormap((float)i / 64.0f, c);
        int s = c[0] + c[1] + c[2];
        rising &= s >= prev;
        prev = s;
    }
    CHECK(rising, "colormap brightness rises monotonically");

    // 4096x4096 with max_px 512: 8x8 blocks. The top-left quarter is masked; values are small except
    // one entry, which makes its block the brightest; a zero stripe stays at the bottom colour.
    int R = 4096, C = 4096;
    float *m = malloc((size_t)R * C * sizeof(float));
    for (int r = 0; r < R; r++)
        for (int k = 0; k < C; k++)
            m[(size_t)r * C + k] = r < 2048 && k < 2048 ? NAN : k >= 4000 && k < 4008 ? 0.0f : 0.01f * ((r + k) % 50);
    m[(size_t)3000 * C + 2500] = 1000.0f;
    m[(size_t)2047 * C + 2047] = NAN;
    m[(size_t)2047 * C + 2046] = 0.0f;  // one finite entry in the last masked block: that block is not NaN
    char path[256];
    path_(path, sizeof path, "heat.png");
    Err e = {{0}};
    CHECK(png_write_heatmap(path, m, R, C, 512, &e) == 0, "png_write_heatmap 4096x4096: %.200s", e.msg);
    free(m);
    Png p;
    const char *bad = png_read_(path, &p);
    CHECK(bad == NULL, "heatmap is a valid PNG: %s", bad ? bad : "");
    CHECK(p.w == 512 && p.h == 512 && p.channels == 3, "4096x4096 at max_px 512 is 512x512 RGB (got %dx%dx%d)",
          p.w, p.h, p.channels);
    if (!p.pix) return;
    int all_grey = 1;
    for (int y = 0; y < 256; y++)
        for (int x = 0; x < 256; x++)
            if (!(y == 255 && x == 255)) {
                pixel_(&p, y, x, c);
                all_grey &= rgb_eq_(c, 128, 128, 128);
            }
    CHECK(all_grey, "the all-NaN region is mid grey");
    pixel_(&p, 255, 255, c);
    CHECK(rgb_eq_(c, 0, 0, 4), "a block with one finite 0 among NaN is the bottom colour, not grey");
    pixel_(&p, 3000 / 8, 2500 / 8, c);
    CHECK(rgb_eq_(c, 252, 255, 164), "the brightest entry's block is the top colour");
    pixel_(&p, 100, 4000 / 8, c);
    CHECK(rgb_eq_(c, 0, 0, 4), "a zero block is the bottom colour");
    free(p.pix);

    // no downsampling: a 1x3 map [0, 0.25, 1]; the 99.5th percentile is 0.9925, so 0.25 lands at
    // sqrt(0.2519) = 0.502, just past the middle anchor (186, 54, 85)
    path_(path, sizeof path, "small.png");
    CHECK(png_write_heatmap(path, (const float[]){0.0f, 0.25f, 1.0f}, 1, 3, 512, &e) == 0, "1x3 heatmap: %.200s", e.msg);
    bad = png_read_(path, &p);
    CHECK(bad == NULL && p.w == 3 && p.h == 1, "1x3 heatmap is 3x1 pixels");
    if (!p.pix) return;
    pixel_(&p, 0, 0, c);
    CHECK(rgb_eq_(c, 0, 0, 4), "0 is the bottom colour");
    pixel_(&p, 0, 1, c);
    CHECK(abs(c[0] - 186) <= 2 && abs(c[1] - 54) <= 2 && abs(c[2] - 85) <= 2, "0.25 is mid-map (%d, %d, %d)",
          c[0], c[1], c[2]);
    pixel_(&p, 0, 2, c);
    CHECK(rgb_eq_(c, 252, 255, 164), "the maximum is the top colour");
    free(p.pix);

    // sparse: nearly all zeros, so the percentile is 0 and the scale falls back to the maximum
    // (with 1600 values the percentile falls between the 9th and 8th largest, both 0)
    float sparse[1600] = {0};
    sparse[17] = 3.0f;
    sparse[18] = 0.75f;  // a quarter of the maximum: sqrt gives exactly the middle anchor
    path_(path, sizeof path, "sparse.png");
    CHECK(png_write_heatmap(path, sparse, 40, 40, 512, &e) == 0, "sparse heatmap: %.200s", e.msg);
    bad = png_read_(path, &p);
    CHECK(bad == NULL && p.w == 40 && p.h == 40, "sparse heatmap is 40x40");
    if (!p.pix) return;
    pixel_(&p, 0, 17, c);
    CHECK(rgb_eq_(c, 252, 255, 164), "sparse map: the maximum is the top colour");
    pixel_(&p, 0, 18, c);
    CHECK(rgb_eq_(c, 186, 54, 85), "sparse map: a quarter of the maximum is the middle anchor");
    free(p.pix);
}

// the signed map: white at 0, blue and red at the ends, the scale from the magnitudes (a 1x3 map [-2, 0, 0.5]:
// the 99.5th percentile of |v| is 1.985, so 0.5 is drawn at sqrt(0.2519) = 0.502 of the way to red)
static void test_heatmap_signed(void) {
    uint8_t c[3];
    png_colormap_signed(0.0f, c);
    CHECK(rgb_eq_(c, 247, 247, 247), "signed colormap: 0 is white (247, 247, 247)");
    png_colormap_signed(-1.0f, c);
    CHECK(rgb_eq_(c, 33, 102, 172), "signed colormap: -1 is blue (33, 102, 172)");
    png_colormap_signed(3.0f, c);
    CHECK(rgb_eq_(c, 178, 24, 43), "signed colormap: above 1 clips to red (178, 24, 43)");
    png_colormap_signed(NAN, c);
    CHECK(rgb_eq_(c, 128, 128, 128), "signed colormap: NaN is mid grey");
    char path[256];
    path_(path, sizeof path, "signed.png");
    Err e = {{0}};
    CHECK(png_write_heatmap_signed(path, (const float[]){-2.0f, 0.0f, 0.5f}, 1, 3, 512, &e) == 0,
          "1x3 signed heatmap: %.200s", e.msg);
    Png p;
    const char *bad = png_read_(path, &p);
    CHECK(bad == NULL && p.w == 3 && p.h == 1, "1x3 signed heatmap is 3x1 pixels");
    if (!p.pix) return;
    pixel_(&p, 0, 0, c);
    CHECK(rgb_eq_(c, 33, 102, 172), "the most negative value is blue");
    pixel_(&p, 0, 1, c);
    CHECK(rgb_eq_(c, 247, 247, 247), "0 is white");
    pixel_(&p, 0, 2, c);
    CHECK(abs(c[0] - 212) <= 2 && abs(c[1] - 135) <= 2 && abs(c[2] - 145) <= 2, "0.5 is half way to red (%d, %d, %d)",
          c[0], c[1], c[2]);
    free(p.pix);
}

int main(void) {
    if (testfs_init("seqtrain_png") != 0) return 1;
    test_heatmap_signed();
    test_checksums();
    test_write();
    test_errors();
    test_heatmap();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir_);
    return test_summary();
}
