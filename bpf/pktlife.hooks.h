/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* pktlife hook bodies: a template that pktlife.bpf.c includes twice, once with
 * RD() as a direct BTF load (tp_btf: the verifier trusts typed pointers, so no
 * helper call per field) and once with RD() as a probe read (raw_tp fallback).
 * H(name) appends the flavour suffix. Not a standalone header. */

static __always_inline bool H(dev_matches)(const struct net_device *dev)
{
	if (!dev)
		return false;
	if (filter_ifindex && RD(dev, ifindex) != filter_ifindex)
		return false;
	if (filter_netns) {
		struct net *net = RD(dev, nd_net.net);
		if (!net || RD(net, ns.inum) != filter_netns)
			return false;
	}
	return true;
}

static __always_inline int H(on_rx_handup)(const struct sk_buff *skb)
{
	if (!H(dev_matches)(RD(skb, dev)))
		return 0;

	__u16 qm = RD(skb, queue_mapping);
	__u32 queue = qm >= rx_queue_offset ? qm - rx_queue_offset : 0;
	__u32 l3_len = RD(skb, len);
	unsigned char *head = RD(skb, head);
	unsigned char *data = RD(skb, data);
	__u16 mac = RD(skb, mac_header);
	/* eth_type_trans already pulled L2; count it back so bytes are frame
	 * bytes, as the interface statistics count them. */
	__u32 l2_len = (mac != (__u16)~0U && data >= head + mac) ? (__u32)(data - (head + mac)) : 0;
	__u32 len = l3_len + (l2_len <= 64 ? l2_len : 0);

	struct pl_queue_stats *qs = qstats(PL_RX, queue);
	if (qs) {
		qs->packets += 1;
		qs->bytes += len;
	}
	struct pl_cpu_ctx *c = cpu_ctx_get();
	if (c) {
		c->rx_queue = queue;
		c->frames += 1;
	}

	/* Full records for 1 in sample_every packets; stage timestamps for those
	 * and for 1 in stage_every packets (the per-skb map is the costly part). */
	bool sampled = c && every_nth(&c->sample_seq, sample_every);
	bool track = sampled || (c && every_nth(&c->stage_seq, stage_every));
	if (!track && !track_flows && !join_buffers)
		return 0;

	struct pl_flow_key k = {};
	__u32 hdr_len = 0;
	/* At hand-up eth_type_trans has pulled L2: data is the L3 header. */
	__u64 now = bpf_ktime_get_ns();
	bool have_flow = parse_flow(data, RD(skb, protocol), &k, &hdr_len);
	if (have_flow) {
		k.dir = PL_RX;
		if (track_flows)
			account_flow(&k, len, l3_len, hdr_len, queue, now);
	}
	if (join_buffers) {
		remember_buffer((__u64)data, l3_len, PL_RX, queue, have_flow ? &k : NULL, now);
		set_ctx(PL_CTX_RX_NAPI, PL_RX, queue, have_flow ? &k : NULL, now);
	}
	if (!track)
		return 0;
	struct pl_skb_state st = {};
	st.ts[0] = now;
	st.dir = PL_RX;
	st.queue = queue;
	st.len = len;
	st.data_addr = (__u64)data;
	if (sampled && have_flow) {
		st.sampled = 1;
		st.flow = k;
	}
	store_state((__u64)skb, &st);
	return 0;
}

static __always_inline int H(on_napi_poll)(const struct napi_struct *napi, int work, int budget)
{
	if (!H(dev_matches)(RD(napi, dev)))
		return 0;
	return napi_poll_account((__u64)napi, work, budget);
}

static __always_inline int H(on_tx_queue)(const struct sk_buff *skb)
{
	if (!H(dev_matches)(RD(skb, dev)))
		return 0;
	/* Sampling decisions are taken here, at the start of a TX life. */
	struct pl_cpu_ctx *c = cpu_ctx_get();
	bool sampled = c && every_nth(&c->sample_seq, sample_every);
	bool track = sampled || (c && every_nth(&c->stage_seq, stage_every));
	if (!track)
		return 0;
	struct pl_skb_state st = {};
	st.ts[0] = bpf_ktime_get_ns();
	st.dir = PL_TX;
	st.sampled = sampled;
	store_state((__u64)skb, &st);
	return 0;
}

static __always_inline int H(on_tx_xmit)(const struct sk_buff *skb, const struct net_device *dev)
{
	if (!H(dev_matches)(dev))
		return 0;
	__u64 key = (__u64)skb;
	__u32 queue = RD(skb, queue_mapping);
	__u32 len = RD(skb, len);
	struct pl_queue_stats *qs = qstats(PL_TX, queue);
	if (qs) {
		qs->packets += 1;
		qs->bytes += len;
	}

	struct pl_skb_state *st = bpf_map_lookup_elem(&skb_states, &key);
	__u64 now = bpf_ktime_get_ns();
	if (st && st->dir == PL_TX) {
		st->ts[1] = now;
		st->queue = queue;
		st->len = len;
		record_stage(qs, TX_QUEUE_TO_XMIT, st->ts[0], now);
	} else {
		st = NULL;
	}
	if (!track_flows && !st && !join_buffers)
		return 0;

	struct pl_flow_key k = {};
	__u32 hdr_len = 0;
	unsigned char *head = RD(skb, head);
	unsigned char *data = RD(skb, data);
	__u16 nh = RD(skb, network_header);
	__u32 l3_len = head + nh >= data ? len - (__u32)(head + nh - data) : len;
	if (parse_flow(head + nh, RD(skb, protocol), &k, &hdr_len)) {
		k.dir = PL_TX;
		if (track_flows)
			account_flow(&k, len, l3_len, hdr_len, queue, now);
		if (st && st->sampled)
			st->flow = k;
		if (join_buffers) {
			remember_buffer((__u64)data, len, PL_TX, queue, &k, now);
			set_ctx(PL_CTX_TX, PL_TX, queue, &k, now);
		}
	}
	if (st)
		st->data_addr = (__u64)data;
	return 0;
}

/* Stage hooks that see every skb on the host: a cheap device check first, so
 * other devices' packets cost no map lookup. */
static __always_inline int H(on_rx_stack)(const struct sk_buff *skb)
{
	if (!H(dev_matches)(RD(skb, dev)))
		return 0;
	return rx_stack_stage(skb);
}

static __always_inline int H(on_tx_done)(const struct sk_buff *skb, const struct net_device *dev)
{
	if (!H(dev_matches)(dev))
		return 0;
	return tx_done_stage(skb);
}

/* The socket copy: with a miss sampler attached, the CPU is now working for
 * this skb's flow (skb_iif names the device it arrived on; skb->dev may be
 * reused as scratch by the socket layer by now). */
static __always_inline int H(on_copy)(const struct sk_buff *skb)
{
	if (join_buffers && RD(skb, skb_iif) == filter_ifindex) {
		struct pl_flow_key k = {};
		__u32 hdr_len = 0;
		unsigned char *head = RD(skb, head);
		__u16 nh = RD(skb, network_header);
		__u16 qm = RD(skb, queue_mapping);
		__u32 queue = qm >= rx_queue_offset ? qm - rx_queue_offset : 0;
		bool have_flow = parse_flow(head + nh, RD(skb, protocol), &k, &hdr_len);
		k.dir = PL_RX;
		set_ctx(PL_CTX_RX_COPY, PL_RX, queue, have_flow ? &k : NULL, bpf_ktime_get_ns());
	}
	return copy_stage(skb);
}
