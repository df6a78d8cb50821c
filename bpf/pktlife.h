/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Structs shared between pktlife.bpf.c and userspace (Rust types are generated
 * from this file's BTF by libbpf-cargo, never hand-copied). */
#ifndef __PKTLIFE_H
#define __PKTLIFE_H

#define MAX_QUEUES 64          /* per direction; higher queue ids fold into the last slot */
#define NBUCKETS 32            /* log2(ns) latency buckets: bucket b holds [2^b, 2^(b+1)) ns */
#define NSTAGES 4
#define NAPI_BUCKETS 12        /* bucket 0: empty polls; b > 0: work in [2^(b-1), 2^b), budget 64 in 7 */
#define MAX_DROP_REASONS 256

enum pl_dir { PL_RX = 0, PL_TX = 1 };

/* Stage ids: the timestamp slots of struct pl_skb_state and the histogram rows. */
enum pl_rx_stage {
	RX_DRIVER_TO_STACK = 0, /* driver hand-up (pre-GRO) -> __netif_receive_skb */
	RX_STACK_TO_COPY = 1,   /* stack entry -> first skb_copy_datagram_iovec */
	RX_COPY_TO_FREE = 2,    /* first copy -> consume/kfree */
	RX_DRIVER_TO_FREE = 3,  /* whole RX buffer lifetime */
};
enum pl_tx_stage {
	TX_QUEUE_TO_XMIT = 0,   /* dev_queue_xmit (qdisc enqueue) -> driver ndo_start_xmit */
	TX_XMIT_TO_DONE = 1,    /* driver xmit call duration */
	TX_XMIT_TO_FREE = 2,    /* driver xmit -> completion free (the NIC's DMA window) */
	TX_QUEUE_TO_FREE = 3,
};

/* Global event counters (per-CPU array index). */
enum pl_counter {
	PLC_SAMPLED = 0,       /* records written to the ring buffer */
	PLC_LOST = 1,          /* records the ring buffer had no room for */
	PLC_STATE_EVICT = 2,   /* in-flight skb states pushed out of their slot before free */
	PLC_QUEUE_CLAMPED = 3, /* packets on queues >= MAX_QUEUES, counted in the last slot */
	PLC_STATE_STALE = 4,   /* states whose free went unseen (GRO merge, coalesce): discarded */
	/* The buffer-page map (address join; only with a miss sampler attached). */
	PLC_BUF_LINEAR = 5,    /* linear-data pages written (those in the sampled subset) */
	PLC_BUF_FRAG = 6,      /* frag pages written (likewise) */
	PLC_FRAG_OVER_CAP = 7, /* frags past PL_MAX_JOIN_FRAGS: not mapped */
	PLC_FRAG_NO_PAGE = 8,  /* frags without a struct page (net_iov device memory): not mapped */
	PLC_FRAG_NO_LAYOUT = 9, /* frags not mapped: no page->address layout, or it failed its check */
	PLC_BUF_REPLACED = 10, /* buffer-page ways taken over by a newer page (the older one live or long freed) */
	PLC_PAGES_OVER_CAP = 11, /* buffer pages past PL_MAX_JOIN_PAGES of one skb: not mapped */
	PLC_BUF_FILLED = 12,   /* buffer-page ways filled for the first time: the ways in use */
	PLC_NR = 16,
};

/* Frags mapped per skb at hand-up / xmit. A frame before GRO has one frag per
 * page of payload: 1 for a standard frame in page_pool or page-frag memory,
 * up to 3 for a 9000-byte jumbo frame in 4 KiB pages. Each mapped page costs a
 * table write, so a 17-frag TSO skb at xmit is mapped in part; the rest is
 * counted (PLC_FRAG_OVER_CAP). */
#define PL_MAX_JOIN_FRAGS 4
/* Pages mapped per skb, every page of each range (linear data, frags): a
 * 64 KiB TSO/LRO skb in 32 KiB page-frag chunks spans 16-21 pages. Pages past
 * it are counted (PLC_PAGES_OVER_CAP). */
#define PL_MAX_JOIN_PAGES 20
/* Segments the software-copy stand-in remembers of the skb being copied: the
 * linear data and the first frags (a GRO-merged skb holds up to 17). */
#define PL_COPY_SEGS 9

struct pl_queue_stats {
	__u64 packets;
	__u64 bytes;
	__u64 napi_polls;
	__u64 napi_work;
	__u64 napi_budget_exhausted;
	__u64 copies;
	__u64 frees;
	__u64 drops;
	__u64 stage_count[NSTAGES];
	__u64 stage_sum_ns[NSTAGES];
	__u64 stage_max_ns[NSTAGES];
	__u64 stage_hist[NSTAGES][NBUCKETS];
	__u64 napi_work_hist[NAPI_BUCKETS];
};

struct pl_flow_key {
	__u8 family;   /* 4 or 6 */
	__u8 proto;    /* IPPROTO_TCP / IPPROTO_UDP */
	__u8 dir;      /* enum pl_dir */
	__u8 pad;
	__u16 sport;   /* host byte order */
	__u16 dport;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct pl_flow_stats {
	__u64 packets;
	__u64 bytes;           /* frame bytes as counted per queue */
	__u64 payload_bytes;   /* L4 payload: what the application sends/receives */
	__u64 first_ns;
	__u64 last_ns;
	__u32 queue;
	__u32 pad;
};

/* A flow's counts held on one CPU until that CPU sees another flow in the same
 * slot (stats.packets == 0: nothing pending). */
struct pl_flow_pending {
	struct pl_flow_key key;
	struct pl_flow_stats stats;
};

/* Pending flows per CPU: one slot per direction and queue (modulo), since a CPU
 * that serves several queues interleaves their NAPI batches, and RSS keeps a
 * flow on one queue. */
#define PL_FLOW_SLOTS_PER_DIR 4
#define PL_FLOW_SLOTS (2 * PL_FLOW_SLOTS_PER_DIR)

/* Per-CPU scratch. rx_queue: the queue of the last frame handed up, which
 * names the queue a NAPI poll served. pend: the flows being accumulated: a
 * NAPI batch is mostly one flow, so its frames cost one map update, not one
 * each; userspace adds the pending counts when it reads flows. */
struct pl_cpu_ctx {
	__u32 rx_queue;
	__u32 frames;
	struct pl_flow_pending pend[PL_FLOW_SLOTS];
	/* The network work this CPU is doing now (enum pl_ctx_kind), for charging
	 * L3-miss samples that carry no packet-buffer address; cur_since 0: a
	 * GRO hand-up's, current until its poll ends (ctx_current). */
	__u64 cur_since;
	__u32 cur_queue;
	__u8 cur_kind;
	__u8 cur_dir;
	__u8 cur_has_flow;
	__u8 cur_gen;  /* attribution window it was set in (join_generation, low bits) */
	struct pl_flow_key cur_flow;
	__u64 last_rx_skb;  /* the skb just handed to GRO on this CPU */
	__u64 last_rx_head; /* and its head buffer */
	__u64 scratch;      /* see as_number() */
	/* --miss-sampling software-copy: the buffers of the skb being copied to
	 * a socket reader on this CPU (kernel virtual addresses and lengths). */
	__u64 copy_addr[PL_COPY_SEGS];
	__u32 copy_len[PL_COPY_SEGS];
	__u32 copy_nseg;
	__u32 copy_total;
	__u32 copy_nlinear;  /* 1: copy_addr[0] is the linear data */
	__u32 copy_pad;
	__u64 copy_until;    /* the copy is taken to last until then (copy_window) */
};

enum pl_ctx_kind { PL_CTX_NONE = 0, PL_CTX_RX_NAPI = 1, PL_CTX_RX_COPY = 2, PL_CTX_TX = 3 };

/* A live packet buffer page: who owns it, since when (address join). */
struct pl_buf_info {
	__u64 handup_ns;
	struct pl_flow_key flow;
	__u32 queue;
	__u8 dir;
	__u8 has_flow;
	__u16 pad;
};

/* One way of the buffer-page table: page is the tag, the page address with a
 * generation in its low 12 bits (0 while the way is empty or being rewritten). */
struct pl_buf_slot {
	__u64 page;
	struct pl_buf_info info;
};

#define PL_BUF_WAYS 2
/* One set of the buffer-page table. */
struct pl_buf_bucket {
	struct pl_buf_slot way[PL_BUF_WAYS];
};

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
	/* joined on a page last kept before the current attribution window
	 * (record --miss-duty): charged to that owner, age not in age_hist */
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

/* What the probes remember about a packet between stages. */
struct pl_skb_state {
	__u64 skb;             /* owner of the slot (struct sk_buff *); 0: free */
	__u64 head;            /* skb->head at the start: tells a reused skb address apart */
	__u64 ts[NSTAGES];     /* stage-entry times, bpf_ktime_get_ns */
	__u64 data_addr;       /* skb->data at hand-up: the buffer the NIC DMA'd into */
	__u32 len;
	__u16 queue;
	__u8 dir;
	__u8 sampled;
	struct pl_flow_key flow;  /* filled only for sampled packets */
};

/* One sampled packet's life, sent through the ring buffer at free time. */
struct pl_pkt_event {
	__u64 ts[NSTAGES];
	__u64 free_ns;
	__u64 skb_addr;
	__u64 data_addr;
	__u32 len;
	__u32 cpu;
	__u16 queue;
	__u8 dir;
	__u8 dropped;
	__u32 drop_reason;
	struct pl_flow_key flow;
};

#endif /* __PKTLIFE_H */
