/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* l3miss: what the L3-miss sample program counts. Shared with userspace
 * (user/src/probe/l3miss.rs; Rust types generated from this object's BTF). */
#ifndef __L3MISS_H
#define __L3MISS_H

#include "common.h"

/* L3-miss sample totals (per-CPU array, one slot). */
enum pl_miss_counter {
	PLM_SAMPLES = 0,     /* samples the perf_event program saw */
	PLM_ON_PACKET = 1,   /* data address on a live packet buffer: joined */
	PLM_OTHER_ADDR = 2,  /* data address elsewhere */
	PLM_NO_ADDR = 3,     /* no data address (software stand-in events, non-PEBS) */
	PLM_CTX_CHARGED = 4, /* not joined, charged to the CPU's current network work */
	PLM_UNCHARGED = 5,   /* neither */
	/* software-copy stand-in: joined samples by where their address was
	 * drawn from (the skb's linear data or one of its frags). */
	PLM_COPY_LINEAR_JOINED = 6,
	PLM_COPY_FRAG_JOINED = 7,
	/* data address on a page outside the join's sampled subset (join_page_mask) */
	PLM_OUT_OF_SUBSET = 8,
	/* charged (by address or context) with no flow key: userspace tells these
	 * from charges whose flow the LRU flow map evicted (lost to the flow view) */
	PLM_NO_FLOW = 9,
	/* charged to a queue number past MAX_QUEUES, counted on the last one */
	PLM_QUEUE_CLAMPED = 10,
	/* joined on a page last kept before the current window: charged to that
	 * owner, its age not in age_hist */
	PLM_BEFORE_WINDOW = 11,
	PLM_NR = 12,
};

struct pl_miss_totals {
	__u64 c[PLM_NR];
	__u64 age_hist[NBUCKETS];  /* joined samples: ns since the buffer's hand-up, log2 */
};

/* Miss samples charged to a queue or flow, by method. */
struct pl_miss_count {
	__u64 addr_join;
	__u64 cpu_ctx;
};

#endif /* __L3MISS_H */
