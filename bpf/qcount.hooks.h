/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* qcount's tracepoint hook bodies: a template qcount.bpf.c includes twice,
 * with RD() a typed BTF load (tp_btf) and a probe read (raw_tp); H(name)
 * appends the flavour suffix. Not a standalone header. */

#include "netns.hooks.h"

static __always_inline bool H(qc_dev_matches)(const struct net_device *dev)
{
	if (!dev || RD(dev, ifindex) != filter_ifindex)
		return false;
	return H(net_is_ours)(RD(dev, nd_net.net));
}

/* A kernel address as a plain number: the verifier keeps typing a pointer
 * loaded from a BTF object and forbids arithmetic on it; a value read back
 * from map memory is a number. */
static __always_inline __u64 H(qc_as_number)(__u64 v)
{
	struct qc_cpu *c = qc_cpu_get();
	if (!c)
		return 0;
	*(volatile __u64 *)&c->scratch = v;
	return *(volatile __u64 *)&c->scratch;
}

/* Whether v can be a kernel pointer (x86-64 and arm64 kernel addresses have
 * an all-ones top byte): a field that holds something else (UDP's dev_scratch
 * in skb->dev) is never read through. */
static __always_inline bool H(qc_kernel_address)(__u64 v)
{
#if defined(__TARGET_ARCH_x86) || defined(__TARGET_ARCH_arm64)
	return (H(qc_as_number)(v) >> 56) == 0xff;
#else
	return v != 0;
#endif
}

/* The skb's segment count (a GSO/LRO super-packet counts as its segments). */
static __always_inline __u32 H(qc_segs)(const struct sk_buff *skb)
{
	if (!RD(skb, data_len))
		return 1;
	const unsigned char *head = RD(skb, head);
	const struct skb_shared_info *si = (const void *)(head + RD(skb, end));
	__u16 segs = BPF_CORE_READ(si, gso_segs);
	return segs > 1 ? segs : 1;
}

/* The driver handed an skb up (the fallback where tcx cannot attach): every
 * device's frames pass here, before GRO. */
static __always_inline int H(qc_rx_handup)(const struct sk_buff *skb)
{
	if (!H(qc_dev_matches)(RD(skb, dev)))
		return 0;
	__u16 qm = RD(skb, queue_mapping);
	__u32 queue = qm >= rx_queue_offset ? qm - rx_queue_offset : 0;
	__u32 l3_len = RD(skb, len);
	unsigned char *head = RD(skb, head);
	unsigned char *data = RD(skb, data);
	__u16 mac = RD(skb, mac_header);
	/* eth_type_trans already pulled L2 (except on the frags path, where the
	 * frame is still whole): count it back so bytes are frame bytes. */
	__u32 l2 = (mac != (__u16)~0U && data >= head + mac) ? (__u32)(data - (head + mac)) : 0;
	if (l2 > 64)
		l2 = 0;
	__u32 segs = H(qc_segs)(skb);
	struct qc_cpu *c = qc_cpu_get();
	if (c) {
		c->queue = queue;
		c->seen = 1;
	}
	__u32 thr = flow_threshold(flow_bytes, PL_RX);
	bool sample = flow_sampled(c, l3_len + l2, thr);
	__u64 wire = l3_len + l2;
	struct pl_flow_key k = {};
	__u32 hdr = 0;
	bool have_flow = (segs > 1 || sample) && l2 && l3_len - RD(skb, data_len) >= 20 &&
			 parse_flow_at(data, RD(skb, protocol), &k, &hdr);
	if (segs > 1 && have_flow)
		wire += (__u64)(segs - 1) * (l2 + hdr);
	struct qc_queue_stats *qs = qc_queue(PL_RX, queue);
	add_queue(qs, segs, wire);
	if (sample) {
		if (have_flow) {
			k.dir = PL_RX;
			flow_add(&k, queue, l3_len + l2, thr, segs, wire, l3_len > hdr ? l3_len - hdr : 0);
		} else if (qs) {
			qs->flow_unparsed += segs;
		}
	}
	return 0;
}

static __always_inline int H(qc_tx_xmit)(const struct sk_buff *skb, const struct net_device *dev)
{
	if (!H(qc_dev_matches)(dev))
		return 0;
	__u32 queue = RD(skb, queue_mapping);
	__u32 len = RD(skb, len);
	__u32 segs = H(qc_segs)(skb);
	__u32 thr = flow_threshold(flow_bytes_tx, PL_TX);
	bool sample = flow_sampled(qc_cpu_get(), len, thr);
	__u64 wire = len;
	struct pl_flow_key k = {};
	__u32 hdr = 0;
	unsigned char *head = RD(skb, head);
	unsigned char *data = RD(skb, data);
	__u16 nh = RD(skb, network_header);
	__u32 l2 = head + nh >= data ? (__u32)(head + nh - data) : 0;
	bool have_flow = (segs > 1 || sample) && parse_flow_at(head + nh, RD(skb, protocol), &k, &hdr);
	/* Each extra segment of a GSO packet repeats the headers on the wire. */
	if (segs > 1 && have_flow && l2 <= 64)
		wire += (__u64)(segs - 1) * (l2 + hdr);
	struct qc_queue_stats *qs = qc_queue(PL_TX, queue);
	add_queue(qs, segs, wire);
	if (sample) {
		if (have_flow) {
			k.dir = PL_TX;
			__u32 l3 = len > l2 ? len - l2 : len;
			flow_add(&k, queue, len, thr, segs, wire, l3 > hdr ? l3 - hdr : 0);
		} else if (qs) {
			qs->flow_unparsed += segs;
		}
	}
	return 0;
}

/* A poll of our device: charged to the queue its NAPI instance serves, known
 * from the frames it delivered (by NAPI id), else from the frames this CPU
 * handed up since its last poll. Polls of other devices return at once. */
static __always_inline int H(qc_napi_poll)(const struct napi_struct *napi, int work, int budget)
{
	if (!H(qc_dev_matches)(RD(napi, dev)))
		return 0;
	__u32 id = RD(napi, napi_id);
	struct qc_cpu *c = qc_cpu_get();
	/* The NAPI instance this CPU last saw, or one it wrote to the map lately:
	 * its queue without a look at the map's shared slot (the map's slot for
	 * the rest). */
	struct qc_napi_slot *known = c && id ? &c->known[id & (QC_NAPI_KNOWN - 1)] : NULL;
	bool have = known && known->napi_id == id;
	struct qc_napi_slot *s = id && !(c && c->napi_id == id) && !have ? napi_slot(id) : NULL;
	__u32 queue = 0;
	if (c && id && c->napi_id == id) {
		queue = c->queue;
	} else if (have) {
		queue = known->queue;
		c->napi_id = id;
		c->queue = queue;
	} else if (s && s->napi_id == id) {
		queue = s->queue;
		if (c) {
			c->napi_id = id;
			c->queue = queue;
		}
		if (known) {
			known->napi_id = id;
			known->queue = queue;
		}
	} else if (c && c->seen) {
		queue = c->queue;
		if (s) {
			s->napi_id = id;
			s->queue = queue;
		}
	} else {
		qc_count(QC_NAPI_UNMAPPED);
	}
	if (c)
		c->seen = 0;
	struct qc_queue_stats *qs = qc_queue(PL_RX, queue);
	if (!qs)
		return 0;
	qs->napi_polls += 1;
	if (work > 0)
		qs->napi_work += work;
	if (work >= budget && budget > 0)
		qs->napi_budget_exhausted += 1;
	qs->napi_work_hist[napi_bucket(work)] += 1;
	return 0;
}

/* An skb leaving by its socket's namespace (by now skb->dev may be socket-layer
 * scratch, and interface indexes are per namespace). */
static __always_inline bool H(qc_socket_is_ours)(const struct sk_buff *skb)
{
	if (!filter_netns)
		return true;
	const struct sock *sk = RD(skb, sk);
	return sk && H(net_is_ours)(RD(sk, __sk_common.skc_net.net));
}

/* Whether a dropped skb came in on, or goes out of, our device: skb_iif is
 * not enough alone (every testbed's veth is ifindex 2 in its namespace), so
 * the namespace is confirmed through skb->dev while it still is the input
 * device, else the socket. A drop neither can place is not ours. */
static __always_inline bool H(qc_dropped_here)(const struct sk_buff *skb)
{
	const struct net_device *dev = RD(skb, dev);
	bool dev_usable = dev && H(qc_kernel_address)((__u64)dev);
	__u32 iif = RD(skb, skb_iif);
	if (iif != filter_ifindex)
		return dev_usable && H(qc_dev_matches)(dev);
	if (!filter_netns)
		return true;
	if (dev_usable && RD(dev, ifindex) == iif)
		return H(net_is_ours)(RD(dev, nd_net.net));
	return H(qc_socket_is_ours)(skb);
}

/* kfree_skb: drops only (consumption has its own tracepoint, or says so in
 * the reason on kernels that report it here). */
static __always_inline int H(qc_kfree)(const struct sk_buff *skb, __u32 reason)
{
	if (bpf_core_enum_value_exists(enum skb_drop_reason, SKB_CONSUMED) &&
	    reason == bpf_core_enum_value(enum skb_drop_reason, SKB_CONSUMED))
		return 0;
	if (!H(qc_dropped_here)(skb))
		return 0;
	/* skb_iif is set at stack entry; before it (GRO) an RX frame is known by
	 * its pulled L2 header, which a TX frame at the driver still carries. */
	unsigned char *head = RD(skb, head);
	unsigned char *data = RD(skb, data);
	__u16 mac = RD(skb, mac_header);
	__u16 qm = RD(skb, queue_mapping);
	bool in_stack = RD(skb, skb_iif) == filter_ifindex;
	bool rx = in_stack || (mac != (__u16)~0U && data > head + mac);
	struct qc_queue_stats *qs = rx ? qc_queue(PL_RX, qm >= rx_queue_offset ? qm - rx_queue_offset : 0)
				       : qc_queue(PL_TX, qm);
	if (qs)
		qs->drops += 1;
	__u32 r = reason < MAX_DROP_REASONS ? reason : MAX_DROP_REASONS - 1;
	__u64 *n = bpf_map_lookup_elem(&qc_drop_reasons, &r);
	if (n)
		*n += 1;
	/* An RX packet dropped before the stack set its skb_iif: by the driver or on the
	 * way to the CPU's backlog, where a full ring or backlog drops it (veth with no
	 * qdisc says NOT_SPECIFIED there), not by a protocol that did not want it (a
	 * multicast frame nobody joined says NOT_SPECIFIED too, in the stack). */
	if (rx && !in_stack) {
		r += MAX_DROP_REASONS;
		n = bpf_map_lookup_elem(&qc_drop_reasons, &r);
		if (n)
			*n += 1;
	}
	return 0;
}
