/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* qcount (tier 0): exact per-queue counts, and flows from sampled packets.
 * Structs shared between qcount.bpf.c and userspace (user/src/probe/qcount.rs;
 * the Rust types are generated from this object's BTF). */
#ifndef __QCOUNT_H
#define __QCOUNT_H

#include "common.h"

/* Per queue and direction, summed over CPUs by userspace. */
struct qc_queue_stats {
	__u64 packets;          /* wire frames: a GSO/GRO skb counts its segments */
	__u64 bytes;            /* frame bytes, L2 header included, per segment */
	__u64 skbs;             /* skbs the counting program ran for */
	__u64 napi_polls;
	__u64 napi_work;
	__u64 napi_budget_exhausted;
	__u64 drops;
	__u64 napi_work_hist[NAPI_BUCKETS];
};

/* One flow, from the skbs sampled for it (1 in flow_every on average): the
 * sums of what those skbs carried. Userspace scales them by flow_every and
 * bounds the estimate with bytes_sq. */
struct qc_flow_stats {
	__u64 samples;          /* sampled skbs */
	__u64 packets;          /* wire frames in them */
	__u64 bytes;            /* frame bytes in them */
	__u64 payload_bytes;    /* L4 payload in them */
	__u64 bytes_sq;         /* sum of each sampled skb's frame bytes squared */
	__u64 first_ns;
	__u64 last_ns;
	__u32 queue;            /* of the latest sample */
	__u32 pad;
};

enum qc_counter {
	QC_QUEUE_CLAMPED = 0,   /* packets on queues >= MAX_QUEUES, counted on the last */
	QC_FLOW_SAMPLES = 1,    /* skbs sampled for the flow view */
	QC_FLOW_UNPARSED = 2,   /* sampled skbs that were not TCP/UDP (no flow) */
	QC_NAPI_UNMAPPED = 3,   /* polls of our device before any frame named its queue */
	QC_NR = 8,
};

/* Per-CPU scratch of the counting programs. */
struct qc_cpu {
	__u32 skip[2];          /* skbs until the next flow sample, per direction */
	__u32 napi_id;          /* the NAPI instance and queue of the last frame */
	__u32 queue;            /*   counted on this CPU (napi_queue written on change) */
	__u32 seen;             /* frames counted since this CPU's last poll ended */
	__u32 pad;
	__u64 scratch;          /* see as_number() */
};

/* How the RX frames are counted (userspace picks the cheapest that attaches). */
enum qc_rx_source {
	QC_RX_TCX = 0,          /* tcx ingress on the device: its frames only, after GRO */
	QC_RX_HANDUP = 1,       /* the driver hand-up tracepoints: every device's frames */
};

#endif /* __QCOUNT_H */
