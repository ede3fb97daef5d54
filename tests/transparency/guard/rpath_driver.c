/* SPDX-License-Identifier: MIT */
/*
 * Links a libcuda.so.1 (the fake one beside it) with a DT_RPATH to its own
 * folder, which beats LD_LIBRARY_PATH, as a library shipping its own driver
 * copy would: natively that copy serves it ("driver ran natively"); under
 * phos-fn the guard resolves the DT_NEEDED libcuda.so.1 to the driver
 * stand-in, whose calls are forwarded ("driver: forwarded ok").
 */
#include <dlfcn.h>
#include <stdio.h>

#include "common.h"

int cuInit(unsigned flags);

int main(void)
{
	return drive_driver(RTLD_DEFAULT, (void *)cuInit);
}
