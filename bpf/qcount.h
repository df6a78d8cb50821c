/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* qcount (tier 0): exact per-queue counts, and flows from sampled packets.
 * Structs shared between qcount.bpf.c and userspace (user/src/probe/qcount.rs;
 * the Rust types are generated from this object's BTF). */
#ifndef __QCOUNT_H
#define __QCOUNT_H

#include "common.h"

/* Per CPU, direction and queue (qc_queues), summed over CPUs by userspace.
 * Three cache lines, so that a queue's counts never share a line with another
 * queue's or CPU's: the first for the packet counter, the second for a poll
 * of up to 15 frames (the third holds the larger batches' buckets). */
struct qc_queue_stats {
	__u64 packets;          /* wire frames: a GSO/GRO skb counts its segments */
	__u64 bytes;            /* frame bytes, L2 header included, per segment */
	__u64 skbs;             /* skbs the counting program ran for */
	__u64 drops;
	/* Sampled sums no flow entry could take (the flow table was full),
	 * estimated as a flow's are: the queue's overflow bucket. */
	__u64 flow_overflow_x256;    /* wire frames, in 1/256 */
	__u64 flow_overflow_bytes;   /* frame bytes */
	__u64 flow_unparsed;         /* wire frames of sampled skbs that were no TCP/UDP flow */
	__u64 pad0[1];
	__u64 napi_polls;
	__u64 napi_work;
	__u64 napi_budget_exhausted;
	__u64 napi_work_hist[NAPI_BUCKETS];
	__u64 pad1[1];
};

/* One flow, estimated from the skbs sampled for it: an skb of d bytes is
 * sampled with probability min(1, d / flow_bytes) (threshold sampling), and
 * each sample adds what it carried divided by that probability, so every
 * field is an unbiased estimate of the flow's total (Horvitz-Thompson), and
 * bytes_var an unbiased estimate of the bytes estimate's variance. Big skbs
 * (a GRO skb of a bulk flow) are always sampled: bulk flows come out nearly
 * exact, while a flood of small packets costs one sample per flow_bytes. */
struct qc_flow_stats {
	__u64 samples;          /* sampled skbs */
	__u64 packets_x256;     /* wire frames, estimated, in 1/256 */
	__u64 bytes;            /* frame bytes, estimated */
	__u64 payload_x256;     /* L4 payload bytes, estimated, in 1/256 */
	__u64 bytes_var;        /* the bytes estimate's variance, estimated */
	__u64 first_ns;
	__u64 last_ns;
	__u32 queue;            /* of the latest sample */
	__u32 pad;
};

/* A flow's sums in the cache of the CPU and direction that sampled it
 * (qc_flow_cache): a sample of a flow the slot holds adds to the slot, a line
 * the CPU keeps warm, instead of walking the flow table, whose bucket, entry
 * and per-CPU copy are three lines out of the cache under load. A flow that
 * takes the slot moves the one before it into the current flow table;
 * userspace adds the slots to the tables. seq is odd while the slot changes
 * flows. */
struct qc_flow_slot {
	__u64 seq;
	struct pl_flow_key key;
	struct qc_flow_stats stats;
	__u64 pad[2];
};

enum qc_flow_cache_slots {
	QC_FLOW_SLOTS = 32,     /* per CPU and direction; a power of two */
};

enum qc_flow_table_entries {
	QC_FLOW_ENTRIES = 16384, /* per flow table (there are two, see flow_gen) */
};

enum qc_counter {
	QC_QUEUE_CLAMPED = 0,   /* packets on queues >= MAX_QUEUES, counted on the last */
	QC_FLOW_INSERTS = 2,    /* flows entered into a flow table (userspace drains it early when full) */
	QC_NAPI_UNMAPPED = 3,   /* polls of our device before any frame named its queue */
	QC_RUNS = 4,            /* runs of this object's programs: what the windows' run budget holds */
	QC_NR = 8,
};

/* A NAPI instance and the RX queue it serves, in a slot of qc_napi_queue
 * (indexed by napi_id modulo its size; the id says whose the slot is). */
struct qc_napi_slot {
	__u32 napi_id;
	__u32 queue;
};

enum qc_napi_slots {
	QC_NAPI_SLOTS = 4096,   /* a power of two */
};

/* NAPI instances a CPU remembers writing to qc_napi_queue (by napi_id). */
#define QC_NAPI_KNOWN 4

/* Per-CPU scratch of the counting programs: the first line is what the
 * hooks touch per event. */
struct qc_cpu {
	__u32 napi_id;          /* the NAPI instance and queue of the last frame */
	__u32 queue;            /*   counted on this CPU (napi_queue written on change) */
	__u32 seen;             /* frames counted since this CPU's last poll ended */
	__u32 pad;
	__u64 draw;             /* the flow sampler's generator state (flow_sampled) */
	__u64 net_seen;         /* the recorded namespace's struct net (netns.hooks.h) */
	struct qc_napi_slot known[QC_NAPI_KNOWN]; /* slots this CPU wrote or found right */
	__u64 net_other;        /* the last other namespace's (netns.hooks.h) */
	__u64 scratch;          /* see as_number() */
	__u64 pad1[6];
};

/* How the RX frames are counted (userspace picks the cheapest that attaches). */
enum qc_rx_source {
	QC_RX_TCX = 0,          /* tcx ingress on the device: its frames only, after GRO */
	QC_RX_HANDUP = 1,       /* the driver hand-up tracepoints: every device's frames */
};

#endif /* __QCOUNT_H */
