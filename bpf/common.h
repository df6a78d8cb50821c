/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* Definitions every probe family shares with userspace (the Rust types and
 * enums are generated from the objects' BTF by libbpf-cargo, never copied). */
#ifndef __DDIO_COMMON_H
#define __DDIO_COMMON_H

/* Queues per direction; higher queue ids fold into the last slot (counted). */
#define MAX_QUEUES 64
/* log2(ns) latency buckets: bucket b holds [2^b, 2^(b+1)) ns. */
#define NBUCKETS 32
/* NAPI batch buckets: 0 holds empty polls; b > 0 work in [2^(b-1), 2^b). */
#define NAPI_BUCKETS 12
#define MAX_DROP_REASONS 256

/* The constants above as an enum: libbpf-cargo generates enums, not macros,
 * and userspace checks its array sizes against these at compile time. */
enum ddio_limits {
	DDIO_MAX_QUEUES = MAX_QUEUES,
	DDIO_NBUCKETS = NBUCKETS,
	DDIO_NAPI_BUCKETS = NAPI_BUCKETS,
	DDIO_MAX_DROP_REASONS = MAX_DROP_REASONS,
};

enum pl_dir { PL_RX = 0, PL_TX = 1 };

struct pl_flow_key {
	__u8 family;   /* 4 or 6 */
	__u8 proto;    /* IPPROTO_TCP / IPPROTO_UDP */
	__u8 dir;      /* enum pl_dir */
	__u8 qslot;    /* tier 0's flows: the queue (255 for 255 and up), so a flow that
			* moves between queues is sampled per queue; 0 elsewhere */
	__u16 sport;   /* host byte order */
	__u16 dport;
	__u8 saddr[16];
	__u8 daddr[16];
};

#endif /* __DDIO_COMMON_H */
