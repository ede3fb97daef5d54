/* SPDX-License-Identifier: MIT */
/*
 * Shared between image.c (building and writing) and image_read.c (parsing and
 * validating); not part of the image interface.
 */
#pragma once

#include <stddef.h>

#include "image.h"

#define PHOS_IMAGE_MANIFEST "manifest.json"

/* Checks an image against every rule a reader enforces that does not need
 * files (ranges, limits, overlaps, references). img->bufs must be sorted by
 * address. Returns 0, or -EINVAL / -E2BIG with one line in err. */
int phos_image_validate(const struct phos_image *img, char *err, size_t errlen);

/* Orders buffers by address (qsort comparator). */
int phos_image_buf_cmp(const void *a, const void *b);
