/* SPDX-License-Identifier: MIT */
/*
 * What the devices are (device.c says how the executor's GPUs appear):
 * their count, and each one's DEVICE_INFO, asked once and cached. Below
 * the files that ask it (launches, copies, streams, graph memory); the
 * runtime API of devices is device.c.
 */
#include <pthread.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"

#define MAX_DEVICES 16

static pthread_mutex_t info_lock = PTHREAD_MUTEX_INITIALIZER;
static struct phos_reply_device info[MAX_DEVICES];
static bool info_valid[MAX_DEVICES];

int phos_device_count(int *ret_count)
{
	int r = phos_preload_connect();

	if (r)
		return r;
	*ret_count = (int)phos_preload_hello()->device_count;
	if (*ret_count > MAX_DEVICES)
		*ret_count = MAX_DEVICES;
	return *ret_count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

int phos_device_check(int device)
{
	int n = 0, r = phos_device_count(&n);

	if (r)
		return r;
	return device >= 0 && device < n ? cudaSuccess : cudaErrorInvalidDevice;
}

int phos_device_info(int device, const struct phos_reply_device **ret_info)
{
	struct phos_device_query d = { .device = device };
	int r = phos_device_check(device);

	if (r)
		return r;
	pthread_mutex_lock(&info_lock);
	if (!info_valid[device]) {
		struct phos_reply_device tmp;
		size_t len = 0;

		r = phos_preload_call(PHOS_OP_DEVICE_INFO, &d, sizeof(d), NULL, 0, &tmp, sizeof(tmp), &len, NULL);
		if (r == cudaSuccess && len < sizeof(tmp))
			r = cudaErrorUnknown;
		if (r == cudaSuccess) {
			tmp.name[sizeof(tmp.name) - 1] = '\0';
			info[device] = tmp;
			info_valid[device] = true;
		}
	}
	pthread_mutex_unlock(&info_lock);
	if (r == cudaSuccess)
		*ret_info = &info[device];
	return r;
}

int phos_device_attr(int attr, int *ret_value)
{
	const struct phos_reply_device *di;
	int r;

	if (attr < 0 || attr >= PHOS_DEVICE_ATTR_MAX)
		return cudaErrorInvalidValue;
	r = phos_device_info(phos_current_device(), &di);
	if (r == cudaSuccess)
		*ret_value = di->attr[attr];
	return r;
}
