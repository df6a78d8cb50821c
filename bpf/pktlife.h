/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* pktlife (tiers 1 and 2): packet lifetimes, sampled packet records and the
 * buffer-page map. Structs shared between pktlife.bpf.c and userspace (Rust
 * types and enums are generated from this object's BTF, never hand-copied). */
#ifndef __PKTLIFE_H
#define __PKTLIFE_H

#include "common.h"

#define NSTAGES 4

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
	/* Timed frames of our device each hand-up tracepoint began (which of
	 * them the driver uses, so windows attach those alone). */
	PLC_HANDUP_GRO = 13,   /* napi_gro_receive_entry */
	PLC_HANDUP_FRAGS = 14, /* napi_gro_frags_entry */
	PLC_HANDUP_NRS = 15,   /* netif_receive_skb_entry */
	PLC_HANDUP_LIST = 16,  /* netif_receive_skb_list_entry */
	PLC_HANDUP_NETIF_RX = 17, /* netif_rx_entry */
	PLC_RUNS = 18,         /* runs of this object's programs: what the windows' run budget holds */
	PLC_NR = 24,
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

/* The constants above as an enum, for userspace (libbpf-cargo generates
 * enums, not macros). */
enum pl_limits {
	PL_NSTAGES = NSTAGES,
	PL_MAX_JOIN_PAGES_ = PL_MAX_JOIN_PAGES,
	PL_MAX_JOIN_FRAGS_ = PL_MAX_JOIN_FRAGS,
	PL_SIZE_BUCKETS = 8,
};

/* One stage of one queue on one CPU: a timed stage updates its count, sum and
 * maximum (one line) and one bucket. Whole cache lines. */
struct pl_stage_stats {
	__u64 count;
	__u64 sum_ns;
	__u64 max_ns;
	__u64 hist[NBUCKETS];
	__u64 pad[5];
};

/* Per CPU, queue and direction: what the packets timed inside the detail
 * windows went through. Packet, byte, NAPI and drop counts are tier 0's
 * (qcount.h). Whole cache lines, none shared with another CPU's or queue's. */
struct pl_queue_stats {
	__u64 handups;          /* timed packets that started a life while the hooks ran */
	__u64 copies;
	__u64 frees;
	__u64 unended;          /* lives of this queue whose state a later packet took before
				 * their free was seen (the rest are counted at the window's end) */
	/* Timed frames by size, L2 header included (a GSO skb as its segments, each
	 * of the mean segment size): bucket 0 holds up to 64 bytes, bucket b > 0
	 * 2^(b+5)+1 .. 2^(b+6), the last everything above 4096. In the line the
	 * hand-up touches anyway, so 32 bits: a count wraps after 4G timed frames
	 * of one queue on one CPU, and that interval's sizes of the queue are lost. */
	__u32 size_hist[PL_SIZE_BUCKETS];
	struct pl_stage_stats stage[NSTAGES];
};

/* Stage-entry times a packet carries between hooks: three per life (RX hand-up,
 * stack entry, copy; TX enqueue, xmit, xmit done); the stages ending at its
 * free are timed from them. */
#define PL_STATE_TS 3

/* What the probes remember about a packet between stages: one cache line (the
 * table is page-aligned), so the hooks that look a packet up touch one line. A
 * sampled packet's flow sits in a table beside it (skb_flows). */
struct pl_skb_state {
	__u64 skb;             /* owner of the slot (struct sk_buff *); 0: free */
	__u64 head;            /* skb->head at the start: tells a reused skb address apart */
	__u64 ts[PL_STATE_TS]; /* stage-entry times, bpf_ktime_get_ns */
	__u64 data_addr;       /* skb->data at hand-up: the buffer the NIC DMA'd into */
	__u32 len;
	__u16 queue;
	__u8 dir;
	__u8 sampled;          /* a record leaves at free */
	__u32 gen;             /* the window it started in: a leftover of another is stale */
	__u8 has_flow;         /* skb_flows holds this packet's flow (sampled ones only) */
	__u8 pad[3];
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
