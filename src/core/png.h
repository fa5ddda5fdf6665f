/*
 * PNG images without zlib: enough to look at an attention map or a weight matrix from a run.
 *
 * The file is a valid PNG (ISO/IEC 15948) that any viewer opens, only not compressed: 8-bit gray or
 * RGB, no interlacing, filter type 0 (None) on every row, and the zlib stream (RFC 1950) holds deflate
 * "stored" blocks (RFC 1951 3.2.4) of at most 65535 bytes, one IDAT chunk per block. So a file is about
 * as large as the raw pixels (a 512x512 RGB map: 769 KiB), which is fine for the few images a run
 * writes, and there is nothing to link.
 *
 * Writes are atomic: the image goes to "<path>.tmp", is fsync'ed, then renamed over path, so a crash
 * leaves either the previous file or the new one, never half a file.
 */
#ifndef SEQ_PNG_H
#define SEQ_PNG_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

// pix is (h, w, channels) row-major, top row first; channels 1 = gray, 3 = RGB; 0 ok, -1 with e set
int png_write(const char *path, const uint8_t *pix, int w, int h, int channels, Err *e);

// Draws m, (rows, cols) row-major, as an RGB heatmap: row 0 at the top, column 0 at the left, so an
// attention map (queries, keys) reads like the matrix. Meant for non-negative values; NaN means
// "masked" (e.g. the future half of a causal map) and is drawn mid grey (128, 128, 128).
//   1. size: min(rows, max_px) x min(cols, max_px) pixels. A larger side is downsampled by averaging
//      blocks of (nearly) equal size: output row i averages input rows [i*rows/oh, (i+1)*rows/oh).
//      NaN entries are left out of a block's mean; a block that is all NaN stays NaN (grey).
//   2. scale: divided by the 99.5th percentile of the finite pixel values (linear interpolation
//      between order statistics, as numpy.percentile), falling back to the maximum when that
//      percentile is 0 (a sparse map); values above the scale clip to 1, negatives to 0, +Inf to 1.
//      One outlier thus cannot turn the rest of the map black, and the largest value is always at 1.
//   3. gamma 0.5 (square root), so weights 100x smaller than the top still show (at 0.1).
//   4. colour: an inferno-like perceptual map, dark purple-black (0, 0, 4) at 0 through red and orange
//      to pale yellow (252, 255, 164) at 1, interpolated linearly between 9 anchor colours.
int png_write_heatmap(const char *path, const float *m, int rows, int cols, int max_px, Err *e);

// the colour png_write_heatmap uses for a scaled value v in [0, 1] (clipped); NaN gives the mask grey
void png_colormap(float v, uint8_t rgb[3]);

// png_write_heatmap for signed values (a Kalman attention matrix): the same sizes, downsampling and masking;
// the scale is the 99.5th percentile of the magnitudes, gamma 0.5 on the magnitude, and a diverging colour
// map: white (247, 247, 247) at 0, blue (33, 102, 172) at -1, red (178, 24, 43) at +1 (png_colormap_signed)
int png_write_heatmap_signed(const char *path, const float *m, int rows, int cols, int max_px, Err *e);
void png_colormap_signed(float v, uint8_t rgb[3]);

// the checksums a PNG needs, exposed for the tests: CRC-32 (ISO 3309, as zlib's crc32; over each
// chunk's type and data) and Adler-32 (RFC 1950; over the uncompressed zlib payload)
uint32_t png_crc32(const uint8_t *buf, size_t n);
uint32_t png_adler32(const uint8_t *buf, size_t n);

#endif
