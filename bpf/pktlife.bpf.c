// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* pktlife: per-queue packet lifetimes on one network device.
 *
 * RX: driver hand-up (napi_gro_receive / netif_receive_skb / netif_rx, before
 * GRO merges frames) -> stack entry (__netif_receive_skb) -> first payload copy
 * to user (skb_copy_datagram_iovec) -> free (consume_skb / kfree_skb).
 * TX: enqueue (dev_queue_xmit) -> driver xmit -> completion free.
 *
 * Everything is aggregated here: per-queue counters and log2 histograms in a
 * per-CPU array (no atomics on the hot path), flows in an LRU hash, and only a
 * 1-in-N sample of per-packet records leaves through the ring buffer.  Only
 * metadata is read: never payload bytes.
 *
 * Every hook is compiled twice, as tp_btf and raw_tp; userspace autoloads the
 * flavour its feature probe picked (see user/src/probe/features.rs).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "pktlife.h"
#include "fragaddr.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IP_OFFSET_MASK 0x1FFF
#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17

/* Set by userspace before load. */
const volatile __u32 filter_ifindex = 0;   /* 0: every device (not used by the CLI) */
const volatile __u32 filter_netns = 0;     /* netns inode; 0: any namespace */
const volatile __u32 sample_every = 0;     /* 1-in-N packet records; 0: none */
const volatile __u32 stage_every = 1;      /* stage latencies for 1 in N packets; 0: none */
const volatile __u8 track_flows = 1;
/* How the driver stores the RX queue in skb->queue_mapping: NIC drivers call
 * skb_record_rx_queue (queue + 1); veth hands the peer's TX queue index
 * through unchanged (offset 0). */
const volatile __u8 rx_queue_offset = 1;
/* Keep the page → packet map and the per-CPU work context (costs a map update
 * per packet): only when an L3-miss sampler is attached. */
const volatile __u8 join_buffers = 0;
/* Page sampling of the address join: only pages whose buffer-table set has
 * these bits clear (1 page in join_page_mask + 1, by address hash) are written
 * at hand-up and looked up by a sample; a sample on another page is counted
 * apart (PLM_OUT_OF_SUBSET). A subset chosen by address, not by packet, keeps
 * every entry current: each packet that uses a chosen page renews it. */
const volatile __u32 join_page_mask = 0;
/* Attribution windows (record --miss-duty N): outside its window userspace
 * sets join_paused, and the hooks keep no buffer pages and no CPU context (the
 * sampler is disabled too); join_window_start is when the current window's
 * buffer map came back on. Plain globals, not config: they change while
 * attached. Defaults: always on. */
volatile __u32 join_paused = 0;
volatile __u64 join_window_start = 0;
/* Bumped at every window's start: a CPU context set in an earlier window is
 * stale whatever its time says (a GRO hand-up's has none, and one whose poll
 * end went unseen would otherwise be dated by the next window's first sample). */
volatile __u32 join_generation = 0;
/* Is the join (buffer pages, CPU context) kept now? */
static __always_inline bool joining(void)
{
	return join_buffers && !join_paused;
}
/* A context older than this is stale: the CPU has moved on to other work. */
const volatile __u64 ctx_window_ns = 200000;
/* Map frag pages too (with join_buffers), through the page -> address layout
 * below (see fragaddr.h); 0 where userspace found no layout for this host. */
const volatile __u8 join_frags = 0;
const volatile __u64 mem_page_offset = 0;      /* direct-map base, or 0 ... */
const volatile __u64 mem_page_offset_addr = 0; /* ... read at this address */
const volatile __u64 mem_vmemmap = 0;          /* vmemmap base, or 0 ... */
const volatile __u64 mem_vmemmap_addr = 0;     /* ... read at this address */
const volatile __u64 mem_max_pfn = 0;          /* end of the memory map, in pages */
/* --miss-sampling software-copy: a cpu-clock sample taken while the CPU copies
 * an skb to a socket reader takes a byte of that skb's buffers as its data
 * address, where PEBS would report the copy's load. A stand-in that exercises
 * the join, not a measured miss. */
const volatile __u8 copy_standin = 0;
/* How long a copy of n bytes is taken to last: an upper bound, 1 µs plus 1 ns
 * per byte (a copy at 1 GB/s or faster). Samples after it are not "inside the
 * copy" even while the CPU context is still fresh. */
#define COPY_BASE_NS 1000ULL
#define COPY_NS_PER_BYTE 1ULL

/* The bases read from kernel variables, once (pl_base). */
__u64 mem_page_offset_cache = 0;
__u64 mem_vmemmap_cache = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct pl_queue_stats);
} queue_stats SEC(".maps");

/* In-flight packet state: a direct-mapped table indexed by a hash of the skb
 * pointer, the owner stored in the slot. Every free on the host checks it, so
 * the check must be cheap: array lookups are inlined by the verifier (no
 * helper call, no lock), where a hash map costs a call and a bucket walk. A
 * packet whose slot is taken over before it is freed loses its remaining
 * stages, and that is counted (PLC_STATE_EVICT). */
#define STATE_SLOTS 16384
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STATE_SLOTS);
	__type(key, __u32);
	__type(value, struct pl_skb_state);
} skb_states SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH); /* per-CPU: no atomics per packet */
	__uint(max_entries, 16384);
	__type(key, struct pl_flow_key);
	__type(value, struct pl_flow_stats);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_DROP_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} drop_reasons SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PLC_NR);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* napi_struct * -> RX queue, learned from the frames each poll handed up, so
 * polls that found no work are still charged to the right queue. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u32);
} napi_queue SEC(".maps");

/* struct pl_cpu_ctx (pktlife.h): a NAPI poll runs on one CPU without
 * preemption, so per-CPU scratch is consistent within a poll. */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pl_cpu_ctx);
} cpu_ctx SEC(".maps");

/* Live packet-buffer pages for the address join: a 2-way set-associative
 * table indexed by a hash of the page address, the way with the older hand-up
 * giving room (bounded; LRU within each set). An array element is an inlined
 * load, where an LRU hash update takes a lock and a free-list node on every
 * hand-up: this table is written for every RX packet. Two ways, because with
 * one a page still waiting for its copy was often pushed out by an unrelated
 * page hashed to its slot. */
#ifndef barrier
#define barrier() asm volatile("" ::: "memory")
#endif
#define BUF_SETS 32768
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BUF_SETS);
	__type(key, __u32);
	__type(value, struct pl_buf_bucket);
} buf_pages SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pl_miss_totals);
} miss_totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct pl_miss_count);
} miss_queues SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct pl_flow_key);
	__type(value, struct pl_miss_count);
} miss_flows SEC(".maps");

/* Samples per 2 MiB region of the data address: where misses land. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u64);
} miss_regions SEC(".maps");

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

static __always_inline struct pl_cpu_ctx *cpu_ctx_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cpu_ctx, &zero);
}

/* 1 in n packets, at random: a per-CPU counter aliases with any regular
 * interleave on that CPU (RX and TX, two queues polled in turn at one packet
 * per poll) and picks only one of them. r is one bpf_get_prandom_u32() per
 * packet shared by the decisions on it, so a recorded packet is also timed.
 * n == 1: always; n == 0: never. A multiply, not a division, maps r to [0, n). */
static __always_inline bool one_in(__u32 r, __u32 n)
{
	if (n <= 1)
		return n == 1;
	return (((__u64)r * n) >> 32) == 0;
}

/* The random value of a packet's sampling decisions; none needed when neither
 * setting samples (const volatile: the verifier prunes the call). */
static __always_inline __u32 sampling_draw(void)
{
	return sample_every > 1 || stage_every > 1 ? bpf_get_prandom_u32() : 0;
}

static __always_inline struct pl_queue_stats *qstats(__u8 dir, __u32 queue)
{
	if (queue >= MAX_QUEUES) {
		count(PLC_QUEUE_CLAMPED);
		queue = MAX_QUEUES - 1;
	}
	__u32 idx = (__u32)dir * MAX_QUEUES + queue;
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
	qs->stage_count[stage] += 1;
	qs->stage_sum_ns[stage] += d;
	if (d > qs->stage_max_ns[stage])
		qs->stage_max_ns[stage] = d;
	qs->stage_hist[stage][b] += 1;
}

/* Parse the 5-tuple from the IPv4/IPv6 header at l3 (TCP/UDP only; IPv6
 * extension headers are not walked). One read covers an IPv6 header, or an
 * IPv4 header with up to 20 bytes of options, plus the L4 ports and the TCP
 * data offset. */
static __always_inline bool parse_flow(const unsigned char *l3, __u16 proto_be, struct pl_flow_key *k,
				      __u32 *hdr_len)
{
	__u8 b[56];
	__u16 proto = bpf_ntohs(proto_be);
	__u32 l4_off;
	__u8 l4proto;

	if (proto != ETH_P_IP && proto != ETH_P_IPV6)
		return false;
	if (bpf_probe_read_kernel(b, sizeof(b), l3))
		return false;
	if (proto == ETH_P_IP) {
		struct iphdr *ip = (struct iphdr *)b;
		if (bpf_ntohs(ip->frag_off) & IP_OFFSET_MASK)
			return false;
		l4proto = ip->protocol;
		l4_off = (__u32)ip->ihl * 4;
		k->family = 4;
		__builtin_memcpy(k->saddr, &ip->saddr, 4);
		__builtin_memcpy(k->daddr, &ip->daddr, 4);
	} else {
		struct ipv6hdr *ip6 = (struct ipv6hdr *)b;
		l4proto = ip6->nexthdr;
		l4_off = 40;
		k->family = 6;
		__builtin_memcpy(k->saddr, &ip6->saddr, 16);
		__builtin_memcpy(k->daddr, &ip6->daddr, 16);
	}
	if (l4proto != IPPROTO_TCP_ && l4proto != IPPROTO_UDP_)
		return false;
	if (l4_off < 20 || l4_off > 40)
		return false;
	/* Bounded for the verifier: b[l4_off .. l4_off + 12] lies inside b. */
	l4_off &= 63;
	if (l4_off > 40)
		return false;
	k->proto = l4proto;
	k->sport = ((__u16)b[l4_off] << 8) | b[l4_off + 1];
	k->dport = ((__u16)b[l4_off + 2] << 8) | b[l4_off + 3];
	*hdr_len = l4_off + (l4proto == IPPROTO_TCP_ ? (__u32)(b[l4_off + 12] >> 4) * 4 : 8);
	return true;
}

/* parse_flow through typed loads (bpf_core_cast): each field one load that
 * the JIT guards with an exception-table entry (a fault reads 0), where the
 * probe read is a helper call and a copy. For the tp_btf hooks, on kernels
 * that have the cast (the raw_tp fallback keeps the probe read). */
static __always_inline bool parse_flow_cast(const unsigned char *l3, __u16 proto_be, struct pl_flow_key *k,
					    __u32 *hdr_len)
{
	__u16 proto = bpf_ntohs(proto_be);
	__u32 l4_off;
	__u8 l4proto;

	if (proto == ETH_P_IP) {
		const struct iphdr *ip = bpf_core_cast(l3, struct iphdr);
		if (bpf_ntohs(ip->frag_off) & IP_OFFSET_MASK)
			return false;
		l4proto = ip->protocol;
		l4_off = (__u32)ip->ihl * 4;
		k->family = 4;
		__u32 a = ip->saddr;
		__builtin_memcpy(k->saddr, &a, 4);
		a = ip->daddr;
		__builtin_memcpy(k->daddr, &a, 4);
	} else if (proto == ETH_P_IPV6) {
		const struct ipv6hdr *ip6 = bpf_core_cast(l3, struct ipv6hdr);
		l4proto = ip6->nexthdr;
		l4_off = 40;
		k->family = 6;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			__u32 a = ip6->saddr.in6_u.u6_addr32[i];
			__builtin_memcpy(k->saddr + 4 * i, &a, 4);
			a = ip6->daddr.in6_u.u6_addr32[i];
			__builtin_memcpy(k->daddr + 4 * i, &a, 4);
		}
	} else {
		return false;
	}
	if (l4proto != IPPROTO_TCP_ && l4proto != IPPROTO_UDP_)
		return false;
	/* The probe read's limits (IPv4 options up to 20 bytes): both flavours
	 * see the same flows. */
	if (l4_off < 20 || l4_off > 40)
		return false;
	k->proto = l4proto;
	if (l4proto == IPPROTO_TCP_) {
		const struct tcphdr *th = bpf_core_cast(l3 + l4_off, struct tcphdr);
		k->sport = bpf_ntohs(th->source);
		k->dport = bpf_ntohs(th->dest);
		*hdr_len = l4_off + (__u32)th->doff * 4;
	} else {
		const struct udphdr *uh = bpf_core_cast(l3 + l4_off, struct udphdr);
		k->sport = bpf_ntohs(uh->source);
		k->dport = bpf_ntohs(uh->dest);
		*hdr_len = l4_off + 8;
	}
	return true;
}

static __always_inline bool flow_key_eq(const struct pl_flow_key *a, const struct pl_flow_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4];
}

static __always_inline void flow_flush(const struct pl_flow_key *k, const struct pl_flow_stats *p)
{
	struct pl_flow_stats *fs = bpf_map_lookup_elem(&flows, k);
	if (fs) {
		/* This CPU's own copy of the entry: plain adds suffice. */
		fs->packets += p->packets;
		fs->bytes += p->bytes;
		fs->payload_bytes += p->payload_bytes;
		/* A flow can be pending in two slots (its queue changed): the older
		 * one's flush must not move its last time and queue back. */
		if (p->last_ns >= fs->last_ns) {
			fs->last_ns = p->last_ns;
			fs->queue = p->queue;
		}
		return;
	}
	if (bpf_map_update_elem(&flows, k, p, BPF_NOEXIST)) {
		/* Another path created it meanwhile on this CPU: add instead. */
		fs = bpf_map_lookup_elem(&flows, k);
		if (fs) {
			fs->packets += p->packets;
			fs->bytes += p->bytes;
			fs->payload_bytes += p->payload_bytes;
		}
	}
}

/* now: the packet's time, or 0 when the caller did not read the clock (the
 * clock read is a large part of a hand-up's cost): a flow's last time then
 * comes from its timed packets (1 in stage_every), its first from the clock. */
static __always_inline void account_flow(struct pl_flow_key *k, __u32 len, __u32 l3_len, __u32 hdr_len,
					 __u32 queue, __u64 now)
{
	__u32 payload = l3_len > hdr_len ? l3_len - hdr_len : 0;
	struct pl_cpu_ctx *c = cpu_ctx_get();
	if (!c)
		return;
	__u32 slot = (k->dir == PL_TX ? PL_FLOW_SLOTS_PER_DIR : 0) + (queue & (PL_FLOW_SLOTS_PER_DIR - 1));
	struct pl_flow_pending *p = &c->pend[slot & (PL_FLOW_SLOTS - 1)];
	if (p->stats.packets && flow_key_eq(&p->key, k)) {
		p->stats.packets += 1;
		p->stats.bytes += len;
		p->stats.payload_bytes += payload;
		if (now)
			p->stats.last_ns = now;
		p->stats.queue = queue;
		return;
	}
	if (p->stats.packets)
		flow_flush(&p->key, &p->stats);
	if (!now)
		now = bpf_ktime_get_ns();
	p->key = *k;
	p->stats.packets = 1;
	p->stats.bytes = len;
	p->stats.payload_bytes = payload;
	p->stats.first_ns = now;
	p->stats.last_ns = now;
	p->stats.queue = queue;
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

/* Whether v can be a kernel pointer: on x86-64 (4- or 5-level paging) and
 * arm64 kernel addresses have an all-ones top byte. A field that holds
 * something else (UDP's dev_scratch in skb->dev) is then never read through:
 * the JIT would recover from the fault, but at the cost of hundreds of ns. */
static __always_inline bool kernel_address(__u64 v)
{
#if defined(__TARGET_ARCH_x86) || defined(__TARGET_ARCH_arm64)
	return (as_number(v) >> 56) == 0xff;
#else
	return v != 0;
#endif
}

/* Slots are chosen by the head buffer's address. */
static __always_inline __u32 state_slot(__u64 head)
{
	/* Drop the alignment bits, then a multiplicative hash. */
	return (__u32)(((head >> 6) * 0x9E3779B97F4A7C15ULL) >> 40) & (STATE_SLOTS - 1);
}

/* The state of this packet (skb and head buffer), or NULL if not tracked. */
static __always_inline struct pl_skb_state *state_of(__u64 skb, __u64 head)
{
	skb = as_number(skb);
	head = as_number(head);
	__u32 slot = state_slot(head);
	struct pl_skb_state *st = bpf_map_lookup_elem(&skb_states, &slot);
	return (st && st->skb == skb && st->head == head) ? st : NULL;
}

static __always_inline void store_state(__u64 key, struct pl_skb_state *st)
{
	key = as_number(key);
	st->head = as_number(st->head);
	__u32 slot = state_slot(st->head);
	struct pl_skb_state *cur = bpf_map_lookup_elem(&skb_states, &slot);
	if (!cur)
		return;
	if (cur->skb && !(cur->skb == key && cur->head == st->head))
		count(PLC_STATE_EVICT);
	st->skb = key;
	*cur = *st;
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
	__builtin_memcpy(e->ts, st->ts, sizeof(e->ts));
	e->free_ns = now;
	e->skb_addr = skb;
	e->data_addr = st->data_addr;
	e->len = st->len;
	e->cpu = bpf_get_smp_processor_id();
	e->queue = st->queue;
	e->dir = st->dir;
	e->dropped = dropped;
	e->drop_reason = reason;
	e->flow = st->flow;
	/* Wake the reader only once a good part of the ring waits. A wakeup is
	 * an irq_work (a self-IPI; under virtualisation usually a VM exit)
	 * charged to this free, once per record while the reader keeps up; the
	 * reader drains the ring at every interval anyway. */
	__u64 flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= RING_WAKE_BYTES ? BPF_RB_FORCE_WAKEUP
											 : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(e, flags);
	count(PLC_SAMPLED);
}

static __always_inline void count_drop(__u8 dir, __u32 queue, __u32 reason)
{
	struct pl_queue_stats *qs = qstats(dir, queue);
	if (qs)
		qs->drops += 1;
	__u32 r = reason < MAX_DROP_REASONS ? reason : MAX_DROP_REASONS - 1;
	__u64 *c = bpf_map_lookup_elem(&drop_reasons, &r);
	if (c)
		*c += 1;
}

/* The end of a tracked packet's life (drops are counted by the caller, for
 * tracked and untracked packets alike). */
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

/* NAPI accounting for a poll of our device (filtering is flavour-specific). */
static __always_inline int napi_poll_account(__u64 key, int work, int budget)
{
	__u32 queue = 0;
	struct pl_cpu_ctx *c = cpu_ctx_get();
	__u32 *known = bpf_map_lookup_elem(&napi_queue, &key);
	if (c && c->frames) {
		queue = c->rx_queue;
		/* Written only when a NAPI instance's queue is new or moved. */
		if (!known || *known != queue)
			bpf_map_update_elem(&napi_queue, &key, &queue, BPF_ANY);
	} else if (known) {
		queue = *known;
	}
	if (c)
		c->frames = 0;

	struct pl_queue_stats *qs = qstats(PL_RX, queue);
	if (!qs)
		return 0;
	qs->napi_polls += 1;
	if (work > 0)
		qs->napi_work += work;
	if (work >= budget && budget > 0)
		qs->napi_budget_exhausted += 1;
	__u32 b = work > 0 ? log2_u64(work) + 1 : 0; /* bucket 0: empty polls */
	if (b >= NAPI_BUCKETS)
		b = NAPI_BUCKETS - 1;
	qs->napi_work_hist[b] += 1;
	return 0;
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

/* napi_gro_receive returned: GRO_MERGED_FREE means the frame's data was merged
 * into another skb and the frame itself freed with no free tracepoint. */
static __always_inline int on_gro_exit(int ret)
{
	if (ret != GRO_MERGED_FREE)
		return 0;
	struct pl_cpu_ctx *c = cpu_ctx_get();
	if (!c || !c->last_rx_skb)
		return 0;
	struct pl_skb_state *st = state_of(c->last_rx_skb, c->last_rx_head);
	if (st)
		drop_state(st);
	c->last_rx_skb = 0;
	return 0;
}

/* ---- L3-miss attribution: buffer pages, CPU context, the sample program --- */

static __always_inline void set_ctx(__u8 kind, __u8 dir, __u32 queue, const struct pl_flow_key *k, __u64 now)
{
	struct pl_cpu_ctx *c = cpu_ctx_get();
	if (!c)
		return;
	c->cur_kind = kind;
	c->cur_dir = dir;
	c->cur_queue = queue;
	c->cur_since = now;
	c->cur_gen = (__u8)join_generation;
	c->cur_has_flow = k != NULL;
	if (k)
		c->cur_flow = *k;
}

/* Is the CPU's recorded network work still what it is doing? A context set
 * without a time (cur_since 0) is a GRO hand-up's, and the poll's end clears
 * it (end_napi_ctx). The first sample to see one dates it, so one whose poll
 * end is never seen (the napi_poll hook not attached, tun's napi_gro_frags
 * from write(), which runs no poll) still goes stale after ctx_window_ns. */
static __always_inline bool ctx_current(struct pl_cpu_ctx *c, __u64 now)
{
	if (c->cur_kind == PL_CTX_NONE || c->cur_gen != (__u8)join_generation)
		return false;
	if (!c->cur_since) {
		if (c->cur_kind != PL_CTX_RX_NAPI)
			return false;
		c->cur_since = now;
		return true;
	}
	return now - c->cur_since < ctx_window_ns;
}

static __always_inline void count_n(__u32 idx, __u32 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		*c += n;
}

static __always_inline __u32 buf_set_of(__u64 page)
{
	return (__u32)(((page >> 12) * 0x9E3779B97F4A7C15ULL) >> 40) & (BUF_SETS - 1);
}

/* One page of a live packet buffer. A page that comes back for the same queue
 * and flow (page_pool recycling, a socket's page frag) only gets its hand-up
 * time renewed: one 8-byte store. Anything else rewrites a way with the tag
 * cleared first and set last, so a sample that reads the tag before and
 * after copying the info (lookup_page) never charges a mix of two owners.
 * x86 keeps stores and loads in program order (TSO), and PEBS addresses only
 * exist there; the barriers stop the compiler reordering. */
/* A way's tag: the page address, and in the low 12 bits (free: pages are
 * 4 KiB-aligned) a generation bumped on every rewrite, so a reader that sees
 * the same tag before and after copying the owner knows no rewrite ran in
 * between, even when the page came back to the same way for a new owner. */
#define BUF_GEN_MASK 4095ULL

/* Is the page in the sampled subset (see join_page_mask)? */
static __always_inline bool in_join_subset(__u32 set)
{
	return !(set & join_page_mask);
}

static __always_inline void remember_page(__u64 page, __u32 set, const struct pl_buf_info *b)
{
	struct pl_buf_bucket *bk = bpf_map_lookup_elem(&buf_pages, &set);
	if (!bk)
		return;
	struct pl_buf_slot *e;
	if ((bk->way[0].page & ~BUF_GEN_MASK) == page) {
		e = &bk->way[0];
	} else if ((bk->way[1].page & ~BUF_GEN_MASK) == page) {
		e = &bk->way[1];
	} else {
		/* An empty way has hand-up time 0: it is always the older one. Ways
		 * are never emptied, so fills of empty ways count the ways in use. */
		e = bk->way[0].info.handup_ns <= bk->way[1].info.handup_ns ? &bk->way[0] : &bk->way[1];
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

static __always_inline bool read_way(const struct pl_buf_slot *e, __u64 page, struct pl_buf_info *out)
{
	__u64 tag = e->page;
	if ((tag & ~BUF_GEN_MASK) != page)
		return false;
	barrier();
	*out = e->info;
	barrier();
	return e->page == tag;
}

enum pl_lookup { PL_NOT_FOUND = 0, PL_FOUND = 1, PL_NOT_IN_SUBSET = 2 };

/* The owner of the buffer page holding addr, copied out: PL_FOUND; else the
 * page is not a live packet buffer (or its way changed owner while being
 * read), or it lies outside the sampled page subset, where nothing is known. */
static __always_inline enum pl_lookup lookup_page(__u64 addr, struct pl_buf_info *out)
{
	__u64 page = addr & ~4095ULL;
	__u32 set = buf_set_of(page);
	if (!in_join_subset(set))
		return PL_NOT_IN_SUBSET;
	struct pl_buf_bucket *bk = bpf_map_lookup_elem(&buf_pages, &set);
	if (!bk)
		return PL_NOT_FOUND;
	return read_way(&bk->way[0], page, out) || read_way(&bk->way[1], page, out) ? PL_FOUND : PL_NOT_FOUND;
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

static __always_inline void charge(struct pl_miss_totals *t, __u8 dir, __u32 queue, const struct pl_flow_key *flow,
				   bool by_addr)
{
	if (queue >= MAX_QUEUES) {
		queue = MAX_QUEUES - 1;
		t->c[PLM_QUEUE_CLAMPED] += 1;
	}
	__u32 idx = (__u32)dir * MAX_QUEUES + queue;
	struct pl_miss_count *q = bpf_map_lookup_elem(&miss_queues, &idx);
	if (q) {
		if (by_addr)
			q->addr_join += 1;
		else
			q->cpu_ctx += 1;
	}
	if (!flow) {
		t->c[PLM_NO_FLOW] += 1;
		return;
	}
	struct pl_miss_count *f = bpf_map_lookup_elem(&miss_flows, flow);
	if (f) {
		if (by_addr)
			f->addr_join += 1;
		else
			f->cpu_ctx += 1;
		return;
	}
	struct pl_miss_count init = { .addr_join = by_addr, .cpu_ctx = !by_addr };
	bpf_map_update_elem(&miss_flows, flow, &init, BPF_NOEXIST);
}

/* One L3-miss sample (PEBS MEM_LOAD_RETIRED.L3_MISS on Intel; a software
 * event stands in where there is no PMU). Strongest evidence first: the data
 * address on a live packet buffer; else the CPU's current network work. */
SEC("perf_event")
int l3miss_sample(struct bpf_perf_event_data *ctx)
{
	__u32 zero = 0;
	struct pl_miss_totals *t = bpf_map_lookup_elem(&miss_totals, &zero);
	if (!t)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 addr = ctx->addr;
	bool from_frag = false;
	if (copy_standin) {
		/* A clock sample inside a socket copy: a byte of the buffers being
		 * copied (uniform over their bytes), what PEBS would report had the
		 * copy's load missed. Elsewhere: no address. */
		addr = 0;
		struct pl_cpu_ctx *c = cpu_ctx_get();
		if (c && c->cur_kind == PL_CTX_RX_COPY && now < c->copy_until && c->copy_total) {
			__u32 r = bpf_get_prandom_u32() % c->copy_total;
#pragma unroll
			for (int i = 0; i < PL_COPY_SEGS; i++) {
				if (i >= c->copy_nseg)
					break;
				if (r < c->copy_len[i]) {
					addr = c->copy_addr[i] + r;
					from_frag = i >= c->copy_nlinear;
					break;
				}
				r -= c->copy_len[i];
			}
		}
	}
	t->c[PLM_SAMPLES] += 1;
	if (addr) {
		__u64 region = addr >> 21;
		__u64 *r = bpf_map_lookup_elem(&miss_regions, &region);
		if (r) {
			*r += 1;
		} else {
			__u64 one = 1;
			bpf_map_update_elem(&miss_regions, &region, &one, BPF_NOEXIST);
		}
		struct pl_buf_info owner, *b = &owner;
		enum pl_lookup found = lookup_page(addr, &owner);
		if (found == PL_FOUND) {
			t->c[PLM_ON_PACKET] += 1;
			if (copy_standin)
				t->c[from_frag ? PLM_COPY_FRAG_JOINED : PLM_COPY_LINEAR_JOINED] += 1;
			if (b->handup_ns < join_window_start) {
				/* Kept in an earlier window: the page may have been handed up
				 * again since, unseen, so its owner is the last one seen and
				 * its age unknown. */
				t->c[PLM_BEFORE_WINDOW] += 1;
			} else {
				__u32 bucket = now > b->handup_ns ? log2_u64(now - b->handup_ns) : 0;
				if (bucket >= NBUCKETS)
					bucket = NBUCKETS - 1;
				t->age_hist[bucket] += 1;
			}
			charge(t, b->dir, b->queue, b->has_flow ? &b->flow : NULL, true);
			return 0;
		}
		t->c[found == PL_NOT_IN_SUBSET ? PLM_OUT_OF_SUBSET : PLM_OTHER_ADDR] += 1;
	} else {
		t->c[PLM_NO_ADDR] += 1;
	}
	struct pl_cpu_ctx *c = cpu_ctx_get();
	if (c && ctx_current(c, now)) {
		t->c[PLM_CTX_CHARGED] += 1;
		charge(t, c->cur_dir, c->cur_queue, c->cur_has_flow ? &c->cur_flow : NULL, false);
	} else {
		t->c[PLM_UNCHARGED] += 1;
	}
	return 0;
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
	int BPF_PROG(rx_gro##FL, const struct sk_buff *skb) { return on_rx_handup##FL(skb, true); }   \
	SEC(PFX "napi_gro_frags_entry")                                                               \
	int BPF_PROG(rx_frags##FL, const struct sk_buff *skb) { return on_rx_handup##FL(skb, true); } \
	SEC(PFX "napi_gro_receive_exit")                                                              \
	int BPF_PROG(rx_gro_exit##FL, int ret) { return on_gro_exit(ret); }                           \
	SEC(PFX "netif_receive_skb_entry")                                                            \
	int BPF_PROG(rx_nrs##FL, const struct sk_buff *skb) { return on_rx_handup##FL(skb, false); }  \
	SEC(PFX "netif_receive_skb_list_entry")                                                       \
	int BPF_PROG(rx_list##FL, const struct sk_buff *skb) { return on_rx_handup##FL(skb, false); } \
	SEC(PFX "netif_rx_entry")                                                                     \
	int BPF_PROG(rx_netif_rx##FL, const struct sk_buff *skb) { return on_rx_handup##FL(skb, false); } \
	SEC(PFX "netif_receive_skb")                                                                  \
	int BPF_PROG(rx_stack##FL, struct sk_buff *skb) { return on_rx_stack##FL(skb); }              \
	SEC(PFX "napi_poll")                                                                          \
	int BPF_PROG(napi_poll##FL, struct napi_struct *napi, int work, int budget)                   \
	{ return on_napi_poll##FL(napi, work, budget); }                                              \
	SEC(PFX "skb_copy_datagram_iovec")                                                            \
	int BPF_PROG(rx_copy##FL, const struct sk_buff *skb, int len) { return on_copy##FL(skb, len); } \
	SEC(PFX "consume_skb")                                                                        \
	int BPF_PROG(skb_consume##FL, struct sk_buff *skb, void *loc) { return on_free##FL(skb, false, 0); } \
	SEC(PFX "kfree_skb")                                                                          \
	int BPF_PROG(skb_kfree##FL, struct sk_buff *skb, void *loc, int reason)                       \
	{ return on_free##FL(skb, true, (__u32)reason); }                                             \
	SEC(PFX "net_dev_queue")                                                                      \
	int BPF_PROG(tx_queue##FL, struct sk_buff *skb) { return on_tx_queue##FL(skb); }              \
	SEC(PFX "net_dev_start_xmit")                                                                 \
	int BPF_PROG(tx_xmit##FL, const struct sk_buff *skb, const struct net_device *dev)            \
	{ return on_tx_xmit##FL(skb, dev); }                                                          \
	SEC(PFX "net_dev_xmit")                                                                       \
	int BPF_PROG(tx_done##FL, struct sk_buff *skb, int rc, struct net_device *dev)                \
	{ return on_tx_done##FL(skb, dev); }

PKTLIFE_HOOKS(_btf, "tp_btf/")
PKTLIFE_HOOKS(_raw, "raw_tp/")

/* Anchors the ring-buffer record type in BTF so libbpf-cargo generates its Rust
 * twin (ring buffers carry no value type of their own). */
struct pl_pkt_event pkt_event_type_anchor = {};
