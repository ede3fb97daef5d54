/* SPDX-License-Identifier: MIT */
/*
 * Kernel metadata from fatbins, and the parameter kinds that drive speculation.
 *
 *   fatbin (from __cudaRegisterFatBinary)
 *     ├─ ELF cubin entries (sm_XX) ── .nv.info.<kernel>: EIATTR_KPARAM_INFO
 *     │                                 → ordinal, offset, size of each parameter
 *     └─ PTX entries               ── .entry <kernel>( .param ... ) → the same,
 *                                       when no cubin carries the kernel
 *   mangled name (_Z7vec_addPKfPfi) ── Itanium demangling of the parameter list
 *                                       → const T*, T*, scalar, struct, ...
 *
 * Speculation (docs/design.md "Kernel metadata and speculation"): at a launch every
 * pointer-sized argument is looked up in the buffer table:
 *   PHOS_PARAM_CONST_PTR  → read set
 *   PHOS_PARAM_PTR        → read + write set
 *   PHOS_PARAM_SCALAR     → ignored (int, float, enum, ...)
 *   PHOS_PARAM_OPAQUE     → struct/union/class by value, or an unknown type, or
 *                           any parameter of an extern "C" kernel (no mangling):
 *                           every aligned 8-byte word is a candidate pointer,
 *                           read + write.
 *
 * Parsers are bounded: every offset and size read from the input is checked
 * against the input's length, and malformed input gives -EINVAL / -EBADMSG, never
 * a crash. Entries nvcc compressed with LZ4 (--compress-mode=speed) or zstd
 * (nvcc's default for PTX) are decompressed with a size cap: see kparam.c.
 *
 * Parameter kinds alone do not bound what a kernel reaches (a pointer kept in
 * device memory): every kernel also carries the verdict of the PTX access
 * analysis (ptx_access.h), which speculation trusts before the kinds.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "ptx_access.h"

enum phos_param_kind {
	PHOS_PARAM_SCALAR = 0,
	PHOS_PARAM_CONST_PTR,
	PHOS_PARAM_PTR,
	PHOS_PARAM_OPAQUE,
};

struct phos_kparam {
	uint16_t offset;
	uint16_t size;
	uint8_t kind;      /* enum phos_param_kind */
};

struct phos_kernel_info {
	char *name;                    /* mangled name, owned */
	uint32_t nparams;
	uint32_t param_bytes;          /* end of the last parameter */
	struct phos_kparam params[PHOS_MAX_PARAMS];
	struct phos_kernel_access access; /* from the PTX analysis; OPAQUE without PTX */
};

struct phos_fatbin;

/* Parses a fatbin. data points at the fatbin header (magic 0xBA55ED50) or at a
 * __fatBinC_Wrapper_t (magic 0x466243B1), in which case the wrapper's data
 * pointer must point inside [data, data+len) or be given as the blob itself by
 * the caller. Copies what it needs; the input may be freed afterwards.
 * Returns 0, -EINVAL (not a fatbin), -EBADMSG (truncated/corrupt), -ENOMEM. */
int phos_fatbin_parse(const void *data, size_t len, struct phos_fatbin **ret_fb);
void phos_fatbin_free(struct phos_fatbin *fb);

/* Size of the fatbin starting at data (header + entries), read from its header,
 * or 0 if data does not start with a valid fatbin header or the size exceeds
 * max. The preload uses this to know how many bytes to ship; max bounds how far
 * it may read. */
size_t phos_fatbin_size(const void *data, size_t max);

/* Parameter layout and kinds of kernel `name` (mangled), filled into *ret_info
 * (name is duplicated), with its access verdict. -ENOENT if the fatbin has no
 * such kernel; -E2BIG if it has more than PHOS_MAX_PARAMS parameters. */
int phos_fatbin_kernel(const struct phos_fatbin *fb, const char *name, struct phos_kernel_info *ret_info);

/* The text of the first PTX entry of the fatbin at data (a fatbin header, not
 * a wrapper), decompressed, NUL-terminated, malloc'd into *ret_text (the caller
 * frees it). -ENOENT when it has no PTX, -EINVAL/-EBADMSG/-ENOMEM. */
int phos_fatbin_ptx(const void *data, size_t len, char **ret_text, size_t *ret_len);

/* The mangled name of kernel i (0 <= i < the count phos_fatbin_stats gives),
 * owned by fb; NULL past the end. */
const char *phos_fatbin_kernel_name(const struct phos_fatbin *fb, size_t i);

/*
 * Module images as the driver API takes them (cuModuleLoadData): a fatbin, a
 * cubin (ELF) or NUL-terminated PTX text. The executor keeps and loads the
 * image as it came (the driver reads all three) and parses it with
 * phos_modimage_parse, which gives the same kernel table as for a fatbin: a
 * cubin's kernels from its .nv.info (opaque: no PTX), PTX's from its .entry
 * lines and the access analysis.
 */
enum phos_modimage_kind {
	PHOS_MODIMAGE_NONE = 0,
	PHOS_MODIMAGE_FATBIN,     /* magic 0xBA55ED50 */
	PHOS_MODIMAGE_WRAPPER,    /* a __fatBinC_Wrapper_t (magic 0x466243B1) */
	PHOS_MODIMAGE_CUBIN,      /* \x7fELF */
	PHOS_MODIMAGE_PTX,        /* text with .version and .target */
};

/* What the first bytes of data[0..len) are (len: what may be read). */
enum phos_modimage_kind phos_modimage_kind(const void *data, size_t len);

/* Bytes of the image at data, read from its own headers (a fatbin, a cubin) or
 * up to its NUL (PTX, counted), reading no more than max bytes; 0 when it is
 * none of these or does not fit in max. A wrapper gives 0: unwrap it first. */
size_t phos_modimage_size(const void *data, size_t max);

/* phos_fatbin_parse for any image kind. -EINVAL when data is no image. */
int phos_modimage_parse(const void *data, size_t len, struct phos_fatbin **ret_fb);

/* phos_fatbin_ptx for any image kind: PTX text is copied; -ENOENT for a cubin. */
int phos_modimage_ptx(const void *data, size_t len, char **ret_text, size_t *ret_len);

/* Bytes of the module-scope variable `name` (.global or .const) of PTX text,
 * from its declaration (type size times array lengths). -ENOENT when not declared. */
int phos_ptx_global_size(const char *text, size_t len, const char *name, uint64_t *ret_size);

/* Frees what phos_fatbin_kernel put into info (not info itself). */
void phos_kernel_info_exit(struct phos_kernel_info *info);

/* Number of cubin entries, PTX entries, and kernels found (for logs and tests). */
void phos_fatbin_stats(const struct phos_fatbin *fb, unsigned *ret_cubins, unsigned *ret_ptx,
		       unsigned *ret_kernels);

/* Classifies the parameters of a mangled kernel name. Writes up to max kinds and
 * returns their number, or -EINVAL for a malformed name. A name that is not
 * mangled (extern "C") returns -ENOENT: the caller then treats every parameter
 * as PHOS_PARAM_OPAQUE. */
int phos_demangle_params(const char *mangled, uint8_t *ret_kinds, unsigned max);

/* The kernel's base name for logs ("vec_add" for _Z7vec_addPKfPfi), into buf. */
const char *phos_demangle_basename(const char *mangled, char *buf, size_t buflen);
