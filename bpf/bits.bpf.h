/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* Small arithmetic shared by the probe families: log2 buckets and sampling
 * draws. */
#ifndef __DDIO_BITS_BPF_H
#define __DDIO_BITS_BPF_H

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

/* The NAPI batch bucket of a poll that did `work` (bucket 0: empty polls). */
static __always_inline __u32 napi_bucket(int work)
{
	__u32 b = work > 0 ? log2_u64(work) + 1 : 0;
	return b < NAPI_BUCKETS ? b : NAPI_BUCKETS - 1;
}

/* 1 in n at random, from one draw r: a multiply, not a division, maps r to
 * [0, n). n == 1: always; n == 0: never. */
static __always_inline bool one_in(__u32 r, __u32 n)
{
	if (n <= 1)
		return n == 1;
	return (((__u64)r * n) >> 32) == 0;
}

#endif /* __DDIO_BITS_BPF_H */
