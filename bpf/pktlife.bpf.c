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
const volatile __u8 track_flows = 1;
/* How the driver stores the RX queue in skb->queue_mapping: NIC drivers call
 * skb_record_rx_queue (queue + 1); veth hands the peer's TX queue index
 * through unchanged (offset 0). */
const volatile __u8 rx_queue_offset = 1;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct pl_queue_stats);
} queue_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);               /* struct sk_buff * */
	__type(value, struct pl_skb_state);
} skb_states SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
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

/* The RX queue of the last frame handed up on this CPU: a NAPI poll runs on one
 * CPU without preemption, so at napi_poll it names the polled queue. */
struct pl_cpu_ctx {
	__u32 rx_queue;
	__u32 frames;
	__u64 sample_seq;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pl_cpu_ctx);
} cpu_ctx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
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

static __always_inline bool dev_matches(const struct net_device *dev)
{
	if (!dev)
		return false;
	if (filter_ifindex && BPF_CORE_READ(dev, ifindex) != filter_ifindex)
		return false;
	if (filter_netns && BPF_CORE_READ(dev, nd_net.net, ns.inum) != filter_netns)
		return false;
	return true;
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

/* Parse the 5-tuple from an IPv4/IPv6 header at l3 (TCP/UDP only; IPv6
 * extension headers are not walked). */
static __always_inline bool parse_flow(const void *l3, __u16 proto_be, struct pl_flow_key *k,
				      __u32 *hdr_len)
{
	__u16 proto = bpf_ntohs(proto_be);
	__u32 l4_off;
	__u8 l4proto;

	if (proto == ETH_P_IP) {
		struct iphdr ip;
		if (bpf_probe_read_kernel(&ip, sizeof(ip), l3))
			return false;
		if (bpf_ntohs(ip.frag_off) & IP_OFFSET_MASK)
			return false;
		l4proto = ip.protocol;
		l4_off = (__u32)ip.ihl * 4;
		k->family = 4;
		__builtin_memcpy(k->saddr, &ip.saddr, 4);
		__builtin_memcpy(k->daddr, &ip.daddr, 4);
	} else if (proto == ETH_P_IPV6) {
		struct ipv6hdr ip6;
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), l3))
			return false;
		l4proto = ip6.nexthdr;
		l4_off = sizeof(ip6);
		k->family = 6;
		__builtin_memcpy(k->saddr, &ip6.saddr, 16);
		__builtin_memcpy(k->daddr, &ip6.daddr, 16);
	} else {
		return false;
	}
	if (l4proto != IPPROTO_TCP_ && l4proto != IPPROTO_UDP_)
		return false;
	/* Ports, and for TCP the data offset (byte 12 of the header). */
	__u8 l4[13];
	if (bpf_probe_read_kernel(l4, sizeof(l4), l3 + l4_off))
		return false;
	__u16 ports[2];
	__builtin_memcpy(ports, l4, sizeof(ports));
	*hdr_len = l4_off + (l4proto == IPPROTO_TCP_ ? (__u32)(l4[12] >> 4) * 4 : 8);
	k->proto = l4proto;
	k->sport = bpf_ntohs(ports[0]);
	k->dport = bpf_ntohs(ports[1]);
	return true;
}

static __always_inline void account_flow(struct pl_flow_key *k, __u32 len, __u32 l3_len, __u32 hdr_len,
					 __u32 queue, __u64 now)
{
	__u32 payload = l3_len > hdr_len ? l3_len - hdr_len : 0;
	struct pl_flow_stats *fs = bpf_map_lookup_elem(&flows, k);
	if (fs) {
		__sync_fetch_and_add(&fs->packets, 1);
		__sync_fetch_and_add(&fs->bytes, len);
		__sync_fetch_and_add(&fs->payload_bytes, payload);
		fs->last_ns = now;
		fs->queue = queue;
		return;
	}
	struct pl_flow_stats init = {
		.packets = 1, .bytes = len, .payload_bytes = payload, .first_ns = now, .last_ns = now, .queue = queue,
	};
	bpf_map_update_elem(&flows, k, &init, BPF_NOEXIST);
}

static __always_inline bool take_sample(void)
{
	if (!sample_every)
		return false;
	__u32 zero = 0;
	struct pl_cpu_ctx *c = bpf_map_lookup_elem(&cpu_ctx, &zero);
	if (!c)
		return false;
	c->sample_seq++;
	return (c->sample_seq % sample_every) == 0;
}

static __always_inline void store_state(__u64 key, struct pl_skb_state *st)
{
	/* A full LRU silently evicts the oldest in-flight packet; count it. */
	if (bpf_map_update_elem(&skb_states, &key, st, BPF_ANY))
		count(PLC_STATE_EVICT);
}

/* ---- RX ---------------------------------------------------------------- */

static __always_inline int on_rx_handup(const struct sk_buff *skb)
{
	const struct net_device *dev = BPF_CORE_READ(skb, dev);
	if (!dev_matches(dev))
		return 0;

	__u64 now = bpf_ktime_get_ns();
	__u16 qm = BPF_CORE_READ(skb, queue_mapping);
	__u32 queue = qm >= rx_queue_offset ? qm - rx_queue_offset : 0;
	__u32 l3_len = BPF_CORE_READ(skb, len);
	unsigned char *head = BPF_CORE_READ(skb, head);
	unsigned char *data = BPF_CORE_READ(skb, data);
	__u16 mac = BPF_CORE_READ(skb, mac_header);
	/* eth_type_trans already pulled L2; count it back so bytes are frame
	 * bytes, as the interface statistics count them. */
	__u32 l2_len = (mac != (__u16)~0U && data >= head + mac) ? (__u32)(data - (head + mac)) : 0;
	__u32 len = l3_len + (l2_len <= 64 ? l2_len : 0);

	struct pl_queue_stats *qs = qstats(PL_RX, queue);
	if (qs) {
		qs->packets += 1;
		qs->bytes += len;
	}

	__u32 zero = 0;
	struct pl_cpu_ctx *c = bpf_map_lookup_elem(&cpu_ctx, &zero);
	if (c) {
		c->rx_queue = queue;
		c->frames += 1;
	}

	struct pl_skb_state st = {};
	st.ts[0] = now;
	st.dir = PL_RX;
	st.queue = queue;
	st.len = len;
	st.data_addr = (__u64)data;

	if (track_flows || sample_every) {
		struct pl_flow_key k = {};
		__u32 hdr_len = 0;
		/* At hand-up eth_type_trans has pulled L2: data is the L3 header. */
		if (parse_flow(data, BPF_CORE_READ(skb, protocol), &k, &hdr_len)) {
			k.dir = PL_RX;
			if (track_flows)
				account_flow(&k, len, l3_len, hdr_len, queue, now);
			if (take_sample()) {
				st.sampled = 1;
				st.flow = k;
			}
		}
	}
	store_state((__u64)skb, &st);
	return 0;
}

static __always_inline int on_rx_stack(const struct sk_buff *skb)
{
	__u64 key = (__u64)skb;
	struct pl_skb_state *st = bpf_map_lookup_elem(&skb_states, &key);
	if (!st || st->dir != PL_RX || st->ts[1])
		return 0;
	__u64 now = bpf_ktime_get_ns();
	st->ts[1] = now;
	record_stage(qstats(PL_RX, st->queue), RX_DRIVER_TO_STACK, st->ts[0], now);
	return 0;
}

static __always_inline int on_copy(const struct sk_buff *skb)
{
	__u64 key = (__u64)skb;
	struct pl_skb_state *st = bpf_map_lookup_elem(&skb_states, &key);
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
	bpf_ringbuf_submit(e, 0);
	count(PLC_SAMPLED);
}

static __always_inline int on_free(const struct sk_buff *skb, bool dropped, __u32 reason)
{
	__u64 key = (__u64)skb;
	struct pl_skb_state *st = bpf_map_lookup_elem(&skb_states, &key);
	if (!st)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct pl_queue_stats *qs = qstats(st->dir, st->queue);
	if (qs) {
		qs->frees += 1;
		if (dropped)
			qs->drops += 1;
	}
	if (st->dir == PL_RX) {
		record_stage(qs, RX_COPY_TO_FREE, st->ts[2], now);
		record_stage(qs, RX_DRIVER_TO_FREE, st->ts[0], now);
	} else {
		record_stage(qs, TX_XMIT_TO_FREE, st->ts[1], now);
		record_stage(qs, TX_QUEUE_TO_FREE, st->ts[0], now);
	}
	if (dropped) {
		__u32 r = reason < MAX_DROP_REASONS ? reason : MAX_DROP_REASONS - 1;
		__u64 *c = bpf_map_lookup_elem(&drop_reasons, &r);
		if (c)
			*c += 1;
	}
	if (st->sampled)
		emit_sample(st, key, now, dropped, reason);
	bpf_map_delete_elem(&skb_states, &key);
	return 0;
}

static __always_inline int on_napi_poll(const struct napi_struct *napi, int work, int budget)
{
	if (!dev_matches(BPF_CORE_READ(napi, dev)))
		return 0;
	__u64 key = (__u64)napi;
	__u32 zero = 0, queue = 0;
	struct pl_cpu_ctx *c = bpf_map_lookup_elem(&cpu_ctx, &zero);
	if (c && c->frames) {
		queue = c->rx_queue;
		bpf_map_update_elem(&napi_queue, &key, &queue, BPF_ANY);
	} else {
		__u32 *q = bpf_map_lookup_elem(&napi_queue, &key);
		if (q)
			queue = *q;
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

/* ---- TX ---------------------------------------------------------------- */

static __always_inline int on_tx_queue(const struct sk_buff *skb)
{
	if (!dev_matches(BPF_CORE_READ(skb, dev)))
		return 0;
	struct pl_skb_state st = {};
	st.ts[0] = bpf_ktime_get_ns();
	st.dir = PL_TX;
	store_state((__u64)skb, &st);
	return 0;
}

static __always_inline int on_tx_xmit(const struct sk_buff *skb, const struct net_device *dev)
{
	if (!dev_matches(dev))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 key = (__u64)skb;
	__u32 queue = BPF_CORE_READ(skb, queue_mapping);
	__u32 len = BPF_CORE_READ(skb, len);
	struct pl_queue_stats *qs = qstats(PL_TX, queue);
	if (qs) {
		qs->packets += 1;
		qs->bytes += len;
	}

	struct pl_skb_state fresh = {};
	struct pl_skb_state *st = bpf_map_lookup_elem(&skb_states, &key);
	if (!st || st->dir != PL_TX) {
		/* Not seen at enqueue (e.g. sent by a path that skips dev_queue_xmit). */
		fresh.dir = PL_TX;
		st = &fresh;
	}
	st->ts[1] = now;
	st->queue = queue;
	st->len = len;
	record_stage(qs, TX_QUEUE_TO_XMIT, st->ts[0], now);

	if (track_flows || sample_every) {
		struct pl_flow_key k = {};
		__u32 hdr_len = 0;
		unsigned char *head = BPF_CORE_READ(skb, head);
		unsigned char *data = BPF_CORE_READ(skb, data);
		__u16 nh = BPF_CORE_READ(skb, network_header);
		st->data_addr = (__u64)data;
		__u32 l3_len = head + nh >= data ? len - (__u32)(head + nh - data) : len;
		if (parse_flow(head + nh, BPF_CORE_READ(skb, protocol), &k, &hdr_len)) {
			k.dir = PL_TX;
			if (track_flows)
				account_flow(&k, len, l3_len, hdr_len, queue, now);
			if (take_sample()) {
				st->sampled = 1;
				st->flow = k;
			}
		}
	}
	if (st == &fresh)
		store_state(key, &fresh);
	return 0;
}

static __always_inline int on_tx_done(const struct sk_buff *skb, int rc)
{
	__u64 key = (__u64)skb;
	struct pl_skb_state *st = bpf_map_lookup_elem(&skb_states, &key);
	if (!st || st->dir != PL_TX || !st->ts[1])
		return 0;
	__u64 now = bpf_ktime_get_ns();
	st->ts[2] = now;
	record_stage(qstats(PL_TX, st->queue), TX_XMIT_TO_DONE, st->ts[1], now);
	return 0;
}

/* ---- attach points: each hook as tp_btf and as raw_tp ------------------- */

#define HOOK1(name, tp, T1, call)                                   \
	SEC("tp_btf/" #tp) int BPF_PROG(name##_btf, T1 a1) { return call; } \
	SEC("raw_tp/" #tp) int BPF_PROG(name##_raw, T1 a1) { return call; }
#define HOOK2(name, tp, T1, T2, call)                                      \
	SEC("tp_btf/" #tp) int BPF_PROG(name##_btf, T1 a1, T2 a2) { return call; } \
	SEC("raw_tp/" #tp) int BPF_PROG(name##_raw, T1 a1, T2 a2) { return call; }
#define HOOK3(name, tp, T1, T2, T3, call)                                         \
	SEC("tp_btf/" #tp) int BPF_PROG(name##_btf, T1 a1, T2 a2, T3 a3) { return call; } \
	SEC("raw_tp/" #tp) int BPF_PROG(name##_raw, T1 a1, T2 a2, T3 a3) { return call; }

HOOK1(rx_gro, napi_gro_receive_entry, const struct sk_buff *, on_rx_handup(a1))
HOOK1(rx_nrs, netif_receive_skb_entry, const struct sk_buff *, on_rx_handup(a1))
HOOK1(rx_list, netif_receive_skb_list_entry, const struct sk_buff *, on_rx_handup(a1))
HOOK1(rx_netif_rx, netif_rx_entry, const struct sk_buff *, on_rx_handup(a1))
HOOK1(rx_stack, netif_receive_skb, struct sk_buff *, on_rx_stack(a1))
HOOK3(napi_poll, napi_poll, struct napi_struct *, int, int, on_napi_poll(a1, a2, a3))
HOOK2(rx_copy, skb_copy_datagram_iovec, const struct sk_buff *, int, on_copy(a1))
HOOK2(skb_consume, consume_skb, struct sk_buff *, void *, on_free(a1, false, 0))
HOOK3(skb_kfree, kfree_skb, struct sk_buff *, void *, int, on_free(a1, true, (__u32)a3))
HOOK1(tx_queue, net_dev_queue, struct sk_buff *, on_tx_queue(a1))
HOOK2(tx_xmit, net_dev_start_xmit, const struct sk_buff *, const struct net_device *, on_tx_xmit(a1, a2))
HOOK2(tx_done, net_dev_xmit, struct sk_buff *, int, on_tx_done(a1, a2))

/* Anchors the ring-buffer record type in BTF so libbpf-cargo generates its Rust
 * twin (ring buffers carry no value type of their own). */
struct pl_pkt_event pkt_event_type_anchor = {};
