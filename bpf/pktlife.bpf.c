// SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause
/* pktlife: the detail tiers of the recorder, per-queue packet lifetimes on one
 * network device, attached only inside the recorder's sampled windows (tier 1)
 * or for the whole recording (tier 2, `record --detail full`). Counts are not
 * kept here: tier 0 (qcount.bpf.c) counts every packet at a fraction of the
 * cost, and these hooks time the packets that start a life while they run.
 *
 * RX: driver hand-up (napi_gro_receive / netif_receive_skb / netif_rx, before
 * GRO merges frames) -> stack entry (__netif_receive_skb) -> first payload copy
 * to user (skb_copy_datagram_iovec) -> free (consume_skb / kfree_skb).
 * TX: enqueue (dev_queue_xmit) -> driver xmit -> completion free.
 *
 * Stage histograms live in a per-CPU array (no atomics on the hot path); a
 * 1-in-N sample of per-packet records leaves through the ring buffer; with an
 * L3-miss sampler, the buffer-page map and the CPU work context feed the
 * attribution (attrib.bpf.h, read by l3miss.bpf.c). Only metadata is read:
 * never payload bytes.
 *
 * Every hook is compiled twice, as tp_btf and raw_tp; userspace autoloads the
 * flavour its feature probe picked (see user/src/probe/features.rs). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "common.h"
#include "pktlife.h"
#include "attrib.h"
#include "bits.bpf.h"
#include "flow.bpf.h"
#include "fragaddr.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by userspace before load. */
const volatile __u32 filter_ifindex = 0;   /* 0: every device (not used by the CLI) */
const volatile __u32 filter_netns = 0;     /* netns inode; 0: any namespace */
const volatile __u32 sample_every = 0;     /* 1-in-N packet records; 0: none */
const volatile __u32 stage_every = 1;      /* stage latencies for 1 in N packets; 0: none */
/* How the driver stores the RX queue in skb->queue_mapping: NIC drivers call
 * skb_record_rx_queue (queue + 1); veth hands the peer's TX queue index
 * through unchanged (offset 0). */
const volatile __u8 rx_queue_offset = 1;
/* Keep the page -> packet map and the per-CPU work context: only when an
 * L3-miss sampler is attached. */
const volatile __u8 join_buffers = 0;
/* Page sampling of the address join: only pages whose buffer-table set has
 * these bits clear (1 page in join_page_mask + 1, by address hash) are kept
 * (attrib.bpf.h). Must match l3miss's. */
const volatile __u32 join_page_mask = 0;
/* A context older than this is stale: the CPU has moved on to other work. */
const volatile __u64 ctx_window_ns = 200000;
/* The current window's number, bumped by userspace as each window begins:
 * a packet state or CPU context left from an earlier window (its hooks went
 * away before its life ended) is stale. 0 for the whole of a full-detail run. */
volatile __u32 join_generation = 0;
/* Map frag pages too (with join_buffers), through the page -> address layout
 * below (see fragaddr.h); 0 where userspace found no layout for this host. */
const volatile __u8 join_frags = 0;
const volatile __u64 mem_page_offset = 0;      /* direct-map base, or 0 ... */
const volatile __u64 mem_page_offset_addr = 0; /* ... read at this address */
const volatile __u64 mem_vmemmap = 0;          /* vmemmap base, or 0 ... */
const volatile __u64 mem_vmemmap_addr = 0;     /* ... read at this address */
const volatile __u64 mem_max_pfn = 0;          /* end of the memory map, in pages */
/* --miss-sampling software-copy: the copy hook remembers the buffers being
 * copied for the stand-in sample (l3miss.bpf.c) to draw an address from. */
const volatile __u8 copy_standin = 0;
/* How long a copy of n bytes is taken to last: an upper bound, 1 µs plus 1 ns
 * per byte (a copy at 1 GB/s or faster). Samples after it are not "inside the
 * copy" even while the CPU context is still fresh. */
#define COPY_BASE_NS 1000ULL
#define COPY_NS_PER_BYTE 1ULL

/* The recorded namespace's struct net once seen (netns.hooks.h): beside
 * join_generation, which every timed packet's hooks read. Not the other
 * namespaces': a line every CPU reads is not one to write as they change. */
__u64 net_seen = 0;

static __always_inline __u64 *net_seen_at(void)
{
	return &net_seen;
}

static __always_inline __u64 *net_other_at(void)
{
	return NULL;
}

/* The bases read from kernel variables, once (pl_base). */
__u64 mem_page_offset_cache = 0;
__u64 mem_vmemmap_cache = 0;

#include "attrib.bpf.h"

/* Per CPU, then per direction and queue: entry cpu * 2 * MAX_QUEUES + dir *
 * MAX_QUEUES + queue, by CPU number rather than a per-CPU array (as the CPU
 * contexts, attrib.bpf.h); sized to the possible CPUs by userspace. */
_Static_assert(sizeof(struct pl_stage_stats) % 64 == 0, "a stage's counts are whole cache lines");
_Static_assert(sizeof(struct pl_queue_stats) % 64 == 0, "a queue's counts are whole cache lines");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * MAX_QUEUES);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pl_queue_stats);
} queue_stats SEC(".maps");

/* In-flight packet state: a direct-mapped table indexed by a hash of the skb's
 * head buffer, the owner stored in the slot. Every free on the host checks it
 * while the hooks run, so the check must be cheap: array lookups are inlined
 * by the verifier (no helper call, no lock), where a hash map costs a call and
 * a bucket walk. A packet whose slot is taken over before it is freed loses
 * its remaining stages, and that is counted (PLC_STATE_EVICT). The slots are
 * random accesses, most of them cache misses under load: an mmapable array
 * starts its values on a page, so each 64-byte state is exactly one line. */
#define STATE_SLOTS 16384
_Static_assert(sizeof(struct pl_skb_state) == 64, "a packet's state is one cache line");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STATE_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pl_skb_state);
} skb_states SEC(".maps");

/* The flow of a sampled packet (has_flow), by its state's slot: only the 1 in
 * sample_every packets that leave a record need it, so it stays out of the
 * state's line. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STATE_SLOTS);
	__type(key, __u32);
	__type(value, struct pl_flow_key);
} skb_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PLC_NR);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

#define RING_BYTES (1 << 20)
/* A quarter of the ring: ~2000 records, far more than an interval's worth at
 * 1 in 64 packets below a million packets per second. */
#define RING_WAKE_BYTES (RING_BYTES / 4)
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RING_BYTES);
} events SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		*c += 1;
}

static __always_inline void count_n(__u32 idx, __u32 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		*c += n;
}

static __always_inline struct pl_queue_stats *qstats(__u8 dir, __u32 queue)
{
	if (queue >= MAX_QUEUES) {
		count(PLC_QUEUE_CLAMPED);
		queue = MAX_QUEUES - 1;
	}
	__u32 idx = bpf_get_smp_processor_id() * (2 * MAX_QUEUES) + (__u32)dir * MAX_QUEUES + queue;
	return bpf_map_lookup_elem(&queue_stats, &idx);
}

static __always_inline void record_stage(struct pl_queue_stats *qs, __u32 stage, __u64 from, __u64 to)
{
	if (!qs || !from || to < from || stage >= NSTAGES)
		return;
	__u64 d = to - from;
	__u32 b = log2_u64(d);
	if (b >= NBUCKETS)
		b = NBUCKETS - 1;
	struct pl_stage_stats *s = &qs->stage[stage];
	s->count += 1;
	s->sum_ns += d;
	if (d > s->max_ns)
		s->max_ns = d;
	s->hist[b] += 1;
}

/* A kernel address as a plain number. The verifier keeps typing a pointer
 * loaded from a BTF object (and forbids hashing it); a value read back from
 * map memory is a number. */
static __always_inline __u64 as_number(__u64 v)
{
	struct pl_cpu_ctx *c = cpu_ctx_get();
	if (!c)
		return 0;
	*(volatile __u64 *)&c->scratch = v;
	return *(volatile __u64 *)&c->scratch;
}

/* Slots are chosen by the head buffer's address. */
static __always_inline __u32 state_slot(__u64 head)
{
	/* Drop the alignment bits, then a multiplicative hash. */
	return (__u32)(((head >> 6) * 0x9E3779B97F4A7C15ULL) >> 40) & (STATE_SLOTS - 1);
}

/* The value of a packet's sampling decisions (timed 1 in stage_every,
 * recorded 1 in sample_every, from one value so a recorded packet is also
 * timed): a hash of the head buffer's address it starts its life at, not a
 * random draw. A state is only ever stored for a head that hashes to
 * "timed", so a packet whose head does not cannot find a leftover state of
 * its own (one whose free went unseen) and need not look for one: the
 * untimed packets, most of them, never touch the state table, and the hooks
 * after the hand-up let them go on this arithmetic alone. The head is a
 * plain number to the verifier (a pointer to bytes, where the skb pointer
 * would need a trip through map memory first: as_number). A queue cycles
 * through as many heads as its ring holds buffers (more where the slab
 * hands them out), so every busy queue gets its share. None needed when
 * neither setting samples (const volatile: the verifier prunes the work). */
static __always_inline __u32 life_draw(__u64 head)
{
	if (!(sample_every > 1 || stage_every > 1))
		return 0;
	/* Another multiplier than state_slot's, so timed heads do not crowd
	 * some slots. */
	return (__u32)((head * 0xBF58476D1CE4E5B9ULL) >> 32);
}

/* Whether a life of this draw is timed: recorded ones are timed too. */
static __always_inline bool life_timed(__u32 draw)
{
	return one_in(draw, sample_every) || one_in(draw, stage_every);
}

/* The state of this packet (skb and head buffer), or NULL if not tracked. */
static __always_inline struct pl_skb_state *state_of(__u64 skb, __u64 head)
{
	skb = as_number(skb);
	head = as_number(head);
	__u32 slot = state_slot(head);
	struct pl_skb_state *st = bpf_map_lookup_elem(&skb_states, &slot);
	return (st && st->skb == skb && st->head == head && st->gen == join_generation) ? st : NULL;
}

/* Returns the state as stored, or NULL. */
static __always_inline struct pl_skb_state *store_state(__u64 key, struct pl_skb_state *st)
{
	key = as_number(key);
	st->head = as_number(st->head);
	__u32 slot = state_slot(st->head);
	struct pl_skb_state *cur = bpf_map_lookup_elem(&skb_states, &slot);
	if (!cur)
		return NULL;
	/* A state of an earlier window is a leftover, not a live packet pushed out;
	 * one of this very pair is an earlier life of it whose free went unseen. */
	if (cur->skb && cur->gen == join_generation) {
		if (cur->skb == key && cur->head == st->head)
			count(PLC_STATE_STALE);
		else
			count(PLC_STATE_EVICT);
		struct pl_queue_stats *qs = qstats(cur->dir, cur->queue);
		if (qs)
			qs->unended += 1;
	}
	st->skb = key;
	st->gen = join_generation;
	*cur = *st;
	return cur;
}

/* A sampled packet's flow, beside its state (which must be stored already:
 * the slot follows its head). */
static __always_inline void store_flow(struct pl_skb_state *st, const struct pl_flow_key *k)
{
	__u32 slot = state_slot(st->head);
	struct pl_flow_key *f = bpf_map_lookup_elem(&skb_flows, &slot);
	if (!f)
		return;
	*f = *k;
	st->has_flow = 1;
}

/* A frame of len bytes (segs segments) in its queue's size histogram. */
static __always_inline void size_count(struct pl_queue_stats *qs, __u32 len, __u32 segs)
{
	__u32 seg = segs > 1 ? len / segs : len;
	__u32 b = seg <= 64 ? 0 : log2_u64(seg - 1) - 5;
	if (b >= PL_SIZE_BUCKETS)
		b = PL_SIZE_BUCKETS - 1;
	qs->size_hist[b & (PL_SIZE_BUCKETS - 1)] += segs;
}

/* An RX life begins: its state (and a sampled packet's flow) stored, counted
 * as a timed hand-up of its queue. */
static __always_inline void store_rx_life(__u64 skb, struct pl_skb_state *st, const struct pl_flow_key *k)
{
	struct pl_queue_stats *qs = qstats(PL_RX, st->queue);
	if (qs)
		qs->handups += 1;
	struct pl_skb_state *stored = store_state(skb, st);
	if (stored && st->sampled)
		store_flow(stored, k);
}

static __always_inline void drop_state(struct pl_skb_state *st)
{
	st->skb = 0;
}

/* ---- flavour-independent stages (map lookups only) ----------------------- */

static __always_inline int rx_stack_stage(struct pl_skb_state *st)
{
	if (!st || st->dir != PL_RX || st->ts[1])
		return 0;
	__u64 now = bpf_ktime_get_ns();
	st->ts[1] = now;
	record_stage(qstats(PL_RX, st->queue), RX_DRIVER_TO_STACK, st->ts[0], now);
	return 0;
}

static __always_inline int copy_stage(struct pl_skb_state *st)
{
	if (!st || st->dir != PL_RX || st->ts[2])
		return 0;
	__u64 now = bpf_ktime_get_ns();
	st->ts[2] = now;
	struct pl_queue_stats *qs = qstats(PL_RX, st->queue);
	if (qs)
		qs->copies += 1;
	record_stage(qs, RX_STACK_TO_COPY, st->ts[1], now);
	return 0;
}

static __always_inline void emit_sample(const struct pl_skb_state *st, __u64 skb, __u64 now,
					__u8 dropped, __u32 reason)
{
	struct pl_pkt_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(PLC_LOST);
		return;
	}
	__builtin_memcpy(e->ts, st->ts, sizeof(st->ts));
	e->ts[NSTAGES - 1] = 0;
	e->free_ns = now;
	e->skb_addr = skb;
	e->data_addr = st->data_addr;
	e->len = st->len;
	e->cpu = bpf_get_smp_processor_id();
	e->queue = st->queue;
	e->dir = st->dir;
	e->dropped = dropped;
	e->drop_reason = reason;
	__builtin_memset(&e->flow, 0, sizeof(e->flow));
	if (st->has_flow) {
		__u32 slot = state_slot(st->head);
		struct pl_flow_key *k = bpf_map_lookup_elem(&skb_flows, &slot);
		if (k)
			e->flow = *k;
	}
	/* Wake the reader only once a good part of the ring waits. A wakeup is
	 * an irq_work (a self-IPI; under virtualisation usually a VM exit)
	 * charged to this free, once per record while the reader keeps up; the
	 * reader drains the ring at every interval anyway. */
	__u64 flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= RING_WAKE_BYTES ? BPF_RB_FORCE_WAKEUP
											 : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(e, flags);
	count(PLC_SAMPLED);
}

/* The end of a tracked packet's life (drops are tier 0's to count). */
static __always_inline int free_stage(struct pl_skb_state *st, __u64 key, bool dropped, __u32 reason)
{
	__u64 now = bpf_ktime_get_ns();
	struct pl_queue_stats *qs = qstats(st->dir, st->queue);
	if (qs)
		qs->frees += 1;
	if (st->dir == PL_RX) {
		record_stage(qs, RX_COPY_TO_FREE, st->ts[2], now);
		record_stage(qs, RX_DRIVER_TO_FREE, st->ts[0], now);
	} else {
		record_stage(qs, TX_XMIT_TO_FREE, st->ts[1], now);
		record_stage(qs, TX_QUEUE_TO_FREE, st->ts[0], now);
	}
	if (st->sampled)
		emit_sample(st, key, now, dropped, reason);
	drop_state(st);
	return 0;
}

/* A NAPI poll ended on this CPU, ours or another device's: the hand-up's CPU
 * context (set_ctx, PL_CTX_RX_NAPI) is over. */
static __always_inline void end_napi_ctx(void)
{
	struct pl_cpu_ctx *c = cpu_ctx_get();
	if (c && c->cur_kind == PL_CTX_RX_NAPI)
		c->cur_kind = PL_CTX_NONE;
}

static __always_inline int tx_done_stage(struct pl_skb_state *st)
{
	if (!st || st->dir != PL_TX || !st->ts[1] || st->ts[2])
		return 0;
	__u64 now = bpf_ktime_get_ns();
	st->ts[2] = now;
	record_stage(qstats(PL_TX, st->queue), TX_XMIT_TO_DONE, st->ts[1], now);
	return 0;
}

/* napi_gro_receive returned. A timed frame's state was held back for this
 * (pl_rx_pending): GRO_MERGED_FREE means its data was merged into another skb
 * and the frame itself freed with no free tracepoint, so it has no life of its
 * own to time; any other result leaves an skb whose life goes on (GRO_MERGED
 * keeps the frame on the other skb's list, freed with it). */
static __always_inline int on_gro_exit(int ret)
{
	struct pl_cpu_ctx *c = cpu_ctx_get();
	if (!c || !c->pending.skb)
		return 0;
	if (ret != GRO_MERGED_FREE && c->pending.gen == join_generation) {
		struct pl_skb_state st = {};
		st.ts[0] = c->pending.ts;
		st.head = c->pending.head;
		st.data_addr = c->pending.data_addr;
		st.len = c->pending.len;
		st.queue = c->pending.queue;
		st.dir = PL_RX;
		st.sampled = c->pending.sampled;
		store_rx_life(c->pending.skb, &st, &c->pending_flow);
	}
	/* Cleared whatever GRO did: an untimed frame after it must not find it. */
	c->pending.skb = 0;
	return 0;
}

/* ---- the buffer-page map (address join) ---------------------------------- */

/* One page of a live packet buffer. A page that comes back for the same queue
 * and flow (page_pool recycling, a socket's page frag) only gets its hand-up
 * time renewed: one 8-byte store. Anything else rewrites a way with the tag
 * cleared first and set last, so a sample that reads the tag before and
 * after copying the info (lookup_page) never charges a mix of two owners.
 * x86 keeps stores and loads in program order (TSO), and PEBS addresses only
 * exist there; the barriers stop the compiler reordering. */
static __always_inline void remember_page(__u64 page, __u32 set, const struct pl_buf_info *b)
{
	struct pl_buf_bucket *bk = bpf_map_lookup_elem(&buf_pages, &set);
	if (!bk)
		return;
	struct pl_buf_slot *e = NULL, *oldest = &bk->way[0];
#pragma unroll
	for (int i = 0; i < PL_BUF_WAYS; i++) {
		if ((bk->way[i].page & ~BUF_GEN_MASK) == page) {
			e = &bk->way[i];
			break;
		}
		if (bk->way[i].info.handup_ns < oldest->info.handup_ns)
			oldest = &bk->way[i];
	}
	if (!e) {
		/* An empty way has hand-up time 0: it is always the oldest (the
		 * first such). Ways are never emptied, so fills of empty ways count
		 * the ways in use. */
		e = oldest;
		count(e->page ? PLC_BUF_REPLACED : PLC_BUF_FILLED);
	}
	__u64 tag = e->page;
	if ((tag & ~BUF_GEN_MASK) == page && e->info.queue == b->queue && e->info.dir == b->dir &&
	    e->info.has_flow == b->has_flow && (!b->has_flow || flow_key_eq(&e->info.flow, &b->flow))) {
		e->info.handup_ns = b->handup_ns;
		return;
	}
	e->page = 0;
	barrier();
	e->info = *b;
	barrier();
	e->page = page | ((tag + 1) & BUF_GEN_MASK);
}

/* One skb's walk over its buffer ranges (pl_remember_range). */
struct pl_range_walk {
	struct pl_buf_info owner;
	__u64 prev;    /* last page of the previous range: not written twice */
	__u32 budget;  /* pages this skb may still write */
	__u32 pad;
};

/* Every page of [addr, addr + len) not written just before, within the skb's
 * page budget, that is in the sampled subset; pages past the budget are
 * counted. A global function: the verifier
 * checks it once, on its own, instead of once per path through every range of
 * every caller (the page loop inside the frag loop would exceed its limit). */
__noinline int pl_remember_range(__u64 addr, __u32 len, __u32 counter, struct pl_range_walk *w)
{
	if (!w)
		return 0;
	if (!len)
		return 0;
	__u64 first = addr & ~4095ULL, last = (addr + len - 1) & ~4095ULL;
	if (first == w->prev)
		first += 4096;
	if (first > last)
		return 0;
	__u64 npages = ((last - first) >> 12) + 1;
	__u32 left = w->budget;
	__u32 n = npages < left ? (__u32)npages : left;
	__u32 written = 0;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < PL_MAX_JOIN_PAGES; i++) {
		if (i >= n)
			break;
		__u64 page = first + ((__u64)i << 12);
		__u32 set = buf_set_of(page);
		if (!in_join_subset(set))
			continue;
		/* The clock only once a page is kept: under --join-sample most
		 * packets keep none and need no time. */
		if (!w->owner.handup_ns)
			w->owner.handup_ns = bpf_ktime_get_ns();
		remember_page(page, set, &w->owner);
		written++;
	}
	/* The last page written (none: keep the previous one). */
	if (n)
		w->prev = first + ((__u64)(n - 1) << 12);
	w->budget = left - n;
	if (written)
		count_n(counter, written);
	if (npages > n)
		count_n(PLC_PAGES_OVER_CAP, npages - n);
	return 0;
}

/* The page -> address layout, or false (bases unknown or unreadable). */
static __always_inline bool mem_layout(__u64 *page_offset, __u64 *vmemmap)
{
	*page_offset = pl_base(mem_page_offset, mem_page_offset_addr, &mem_page_offset_cache);
	*vmemmap = pl_base(mem_vmemmap, mem_vmemmap_addr, &mem_vmemmap_cache);
	return *page_offset && *vmemmap && mem_max_pfn;
}

/* The layout, checked against an skb: its head (kmalloc or page-frag memory)
 * must lie in the direct map the layout describes. */
static __always_inline bool mem_layout_for(__u64 head, __u64 *page_offset, __u64 *vmemmap)
{
	return join_frags && mem_layout(page_offset, vmemmap) &&
	       pl_in_direct_map(as_number(head), *page_offset, mem_max_pfn);
}

/* An skb's buffers in the page map: the linear data, then the pages of its
 * first PL_MAX_JOIN_FRAGS frags, at most PL_MAX_JOIN_PAGES pages in all.
 * head: the skb's head buffer, a direct-map address that checks the layout;
 * shinfo: head + end; typed: read the frags with typed loads (tp_btf hooks);
 * now: the packet's time, or 0 to read the clock only if a page is kept.
 * Returns the time the pages were kept with (0: none kept, no clock read). */
static __always_inline __u64 remember_buffer(bool typed, __u64 data, __u32 len, __u64 head, const unsigned char *shinfo,
					     __u32 nr_frags, __u8 dir, __u32 queue, const struct pl_flow_key *k,
					     __u64 now)
{
	/* The common case under --join-sample: linear data within one page
	 * outside the subset, no frags. Nothing to keep, nothing to set up. */
	__u64 d = as_number(data);
	if (!nr_frags && len && ((d ^ (d + len - 1)) & ~4095ULL) == 0 && !in_join_subset(buf_set_of(d & ~4095ULL)))
		return now;
	struct pl_range_walk w = { .owner = { .handup_ns = now, .queue = queue, .dir = dir, .has_flow = k != NULL },
				   .budget = PL_MAX_JOIN_PAGES };
	if (k)
		w.owner.flow = *k;
	pl_remember_range(d, len, PLC_BUF_LINEAR, &w);
	if (!nr_frags)
		return w.owner.handup_ns;
	__u64 po, vm;
	struct pl_frag f[PL_MAX_JOIN_FRAGS] = {};
	if (!mem_layout_for(head, &po, &vm) ||
	    (typed ? pl_load_frags(shinfo, f, PL_MAX_JOIN_FRAGS, nr_frags) : pl_read_frags(shinfo, f, PL_MAX_JOIN_FRAGS))) {
		count_n(PLC_FRAG_NO_LAYOUT, nr_frags);
		return w.owner.handup_ns;
	}
	if (nr_frags > PL_MAX_JOIN_FRAGS)
		count_n(PLC_FRAG_OVER_CAP, nr_frags - PL_MAX_JOIN_FRAGS);
	for (int i = 0; i < PL_MAX_JOIN_FRAGS; i++) {
		if (i >= nr_frags)
			break;
		if (f[i].page & 1) {
			count(PLC_FRAG_NO_PAGE);
			continue;
		}
		__u64 virt = pl_page_virt(f[i].page, po, vm, mem_max_pfn);
		if (!virt) {
			count(PLC_FRAG_NO_LAYOUT);
			continue;
		}
		pl_remember_range(virt + f[i].offset, f[i].len, PLC_BUF_FRAG, &w);
	}
	return w.owner.handup_ns;
}

/* An skb's shared info, as the hooks read it (H(shinfo)). */
struct pl_shinfo {
	const unsigned char *at;  /* skb->head + skb->end */
	__u32 segs;
	__u32 nr_frags;
};

/* ---- flavour-specific hooks: tp_btf (direct loads) and raw_tp (probe reads) -- */

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#define H(name) CAT(name, _btf)
#define RD(p, f) ((p)->f)
#define PL_CAST 1
#include "pktlife.hooks.h"
#undef H
#undef RD
#undef PL_CAST

#define H(name) CAT(name, _raw)
#define RD(p, f) BPF_CORE_READ(p, f)
#define PL_CAST 0
#include "pktlife.hooks.h"
#undef H
#undef RD
#undef PL_CAST

/* ---- attach points: every hook as tp_btf and as raw_tp ------------------ */

#define PKTLIFE_HOOKS(FL, PFX)                                                                        \
	SEC(PFX "napi_gro_receive_entry")                                                             \
	int BPF_PROG(rx_gro##FL, const struct sk_buff *skb) { count(PLC_RUNS); return on_rx_handup##FL(skb, true, true, PLC_HANDUP_GRO); } \
	SEC(PFX "napi_gro_frags_entry")                                                               \
	int BPF_PROG(rx_frags##FL, const struct sk_buff *skb) { count(PLC_RUNS); return on_rx_handup##FL(skb, true, false, PLC_HANDUP_FRAGS); } \
	SEC(PFX "napi_gro_receive_exit")                                                              \
	int BPF_PROG(rx_gro_exit##FL, int ret) { count(PLC_RUNS); return on_gro_exit(ret); }                           \
	SEC(PFX "netif_receive_skb_entry")                                                            \
	int BPF_PROG(rx_nrs##FL, const struct sk_buff *skb) { count(PLC_RUNS); return on_rx_handup##FL(skb, false, false, PLC_HANDUP_NRS); }  \
	SEC(PFX "netif_receive_skb_list_entry")                                                       \
	int BPF_PROG(rx_list##FL, const struct sk_buff *skb) { count(PLC_RUNS); return on_rx_handup##FL(skb, false, false, PLC_HANDUP_LIST); } \
	SEC(PFX "netif_rx_entry")                                                                     \
	int BPF_PROG(rx_netif_rx##FL, const struct sk_buff *skb) { count(PLC_RUNS); return on_rx_handup##FL(skb, false, false, PLC_HANDUP_NETIF_RX); } \
	SEC(PFX "netif_receive_skb")                                                                  \
	int BPF_PROG(rx_stack##FL, struct sk_buff *skb) { count(PLC_RUNS); return on_rx_stack##FL(skb); }              \
	SEC(PFX "napi_poll")                                                                          \
	int BPF_PROG(napi_poll##FL, struct napi_struct *napi, int work, int budget)                   \
	{ count(PLC_RUNS); return on_napi_poll##FL(napi); }                                                            \
	SEC(PFX "skb_copy_datagram_iovec")                                                            \
	int BPF_PROG(rx_copy##FL, const struct sk_buff *skb, int len) { count(PLC_RUNS); return on_copy##FL(skb, len); } \
	SEC(PFX "consume_skb")                                                                        \
	int BPF_PROG(skb_consume##FL, struct sk_buff *skb, void *loc) { count(PLC_RUNS); return on_free##FL(skb, false, 0); } \
	SEC(PFX "kfree_skb")                                                                          \
	int BPF_PROG(skb_kfree##FL, struct sk_buff *skb, void *loc, int reason)                       \
	{ count(PLC_RUNS); return on_free##FL(skb, true, (__u32)reason); }                                             \
	SEC(PFX "net_dev_queue")                                                                      \
	int BPF_PROG(tx_queue##FL, struct sk_buff *skb) { count(PLC_RUNS); return on_tx_queue##FL(skb); }              \
	SEC(PFX "net_dev_start_xmit")                                                                 \
	int BPF_PROG(tx_xmit##FL, const struct sk_buff *skb, const struct net_device *dev)            \
	{ count(PLC_RUNS); return on_tx_xmit##FL(skb, dev); }                                                          \
	SEC(PFX "net_dev_xmit")                                                                       \
	int BPF_PROG(tx_done##FL, struct sk_buff *skb, int rc, struct net_device *dev)                \
	{ count(PLC_RUNS); return on_tx_done##FL(skb, dev); }

PKTLIFE_HOOKS(_btf, "tp_btf/")
PKTLIFE_HOOKS(_raw, "raw_tp/")

/* Anchors in BTF what libbpf-cargo should generate Rust twins of: the ring
 * buffer's record type (ring buffers carry no value type of their own) and
 * the enums userspace reads counters and sizes by. */
struct pl_pkt_event pkt_event_type_anchor = {};
enum pl_counter pl_counter_anchor = PLC_SAMPLED;
enum pl_limits pl_limits_anchor = PL_NSTAGES;
enum pl_rx_stage pl_rx_stage_anchor = RX_DRIVER_TO_STACK;
enum pl_tx_stage pl_tx_stage_anchor = TX_QUEUE_TO_XMIT;
