/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* What the packet probes (pktlife.bpf.c) keep for L3-miss attribution and the
 * sample program (l3miss.bpf.c) reads: the buffer-page map and each CPU's
 * current network work. Shared with userspace (types generated from BTF). */
#ifndef __ATTRIB_H
#define __ATTRIB_H

#include "common.h"

/* Segments the software-copy stand-in remembers of the skb being copied: the
 * linear data and the first frags (a GRO-merged skb holds up to 17). */
#define PL_COPY_SEGS 9

enum pl_ctx_kind { PL_CTX_NONE = 0, PL_CTX_RX_NAPI = 1, PL_CTX_RX_COPY = 2, PL_CTX_TX = 3 };

/* A timed frame handed to GRO on this CPU, its state held back until GRO
 * says whether the frame lives on as an skb: most frames of a TCP stream are
 * merged into another skb and freed there, and a state stored for one of them
 * would be a write to a random line of the state table (a cache miss under
 * load) for a life that ends at once. skb 0: none. */
struct pl_rx_pending {
	__u64 skb;
	__u64 head;
	__u64 ts;
	__u64 data_addr;
	__u32 len;
	/* The window it was handed up in: the hooks may go away between a frame's
	 * hand-up and GRO's exit, and a frame left over from an earlier window
	 * starts no life. */
	__u32 gen;
	__u16 queue;
	__u8 sampled;  /* pending_flow is its flow */
	__u8 pad[5];
};

/* Per-CPU state of the packet probes. A NAPI poll runs on one CPU without
 * preemption, so per-CPU scratch is consistent within a poll. */
struct pl_cpu_ctx {
	struct pl_rx_pending pending;
	__u64 scratch;      /* see as_number() */
	struct pl_flow_key pending_flow;
	/* The network work this CPU is doing now (enum pl_ctx_kind), for charging
	 * L3-miss samples that carry no packet-buffer address; cur_since 0: a
	 * GRO hand-up's, current until its poll ends (ctx_current). */
	__u64 cur_since;
	__u32 cur_queue;
	__u8 cur_kind;
	__u8 cur_dir;
	__u8 cur_has_flow;
	__u8 cur_gen;  /* window it was set in (join_generation, low bits) */
	struct pl_flow_key cur_flow;
	/* --miss-sampling software-copy: the buffers of the skb being copied to
	 * a socket reader on this CPU (kernel virtual addresses and lengths). */
	__u64 copy_addr[PL_COPY_SEGS];
	__u32 copy_len[PL_COPY_SEGS];
	__u32 copy_nseg;
	__u32 copy_total;
	__u32 copy_nlinear;  /* 1: copy_addr[0] is the linear data */
	__u32 copy_pad;
	__u64 copy_until;    /* the copy is taken to last until then (copy_window) */
	__u64 pad[4];        /* to whole cache lines: no CPU shares a line with another */
};

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

#define PL_BUF_WAYS 4
/* One set of the buffer-page table. */
struct pl_buf_bucket {
	struct pl_buf_slot way[PL_BUF_WAYS];
};

/* Sets of the buffer-page table. */
#define BUF_SETS 16384

#endif /* __ATTRIB_H */
