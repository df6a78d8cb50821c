/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* pktlife hook bodies: a template that pktlife.bpf.c includes twice, once with
 * RD() as a direct BTF load (tp_btf: the verifier trusts typed pointers, so no
 * helper call per field) and once with RD() as a probe read (raw_tp fallback).
 * H(name) appends the flavour suffix. Not a standalone header. */

#include "netns.hooks.h"

static __always_inline bool H(dev_matches)(const struct net_device *dev)
{
	if (!dev)
		return false;
	if (filter_ifindex && RD(dev, ifindex) != filter_ifindex)
		return false;
	return !filter_netns || H(net_is_ours)(RD(dev, nd_net.net));
}

/* An skb that came in on an interface with our index (skb_iif), by now past
 * the point where skb->dev is reliable: only its socket can place it in a
 * namespace, and interface indexes are per namespace. */
static __always_inline bool H(socket_is_ours)(const struct sk_buff *skb)
{
	if (!filter_netns)
		return true;
	const struct sock *sk = RD(skb, sk);
	return sk && H(net_is_ours)(RD(sk, __sk_common.skc_net.net));
}

/* The tracked state of this skb, if it really is the packet that was tracked.
 * The address alone is not enough: an skb freed where no tracepoint sees it
 * (coalesced into another, stolen by GRO) leaves its state behind, and the
 * slab soon hands the same address to a new packet; the head buffer tells
 * them apart (states are keyed by both). */
static __always_inline struct pl_skb_state *H(tracked)(const struct sk_buff *skb)
{
	__u64 head = (__u64)RD(skb, head);
	/* The heads that were never timed (life_draw) need no table lookup: most
	 * packets leave here on arithmetic, before touching a random slot. */
	if (!life_timed(life_draw(head)))
		return NULL;
	return state_of((__u64)skb, head);
}

/* The skb's shared info (at head + end, end being an offset on 64-bit): the
 * wire frames in it (a GSO/LRO super-packet counts as its segments) and its
 * number of frags. One read (two typed loads where the cast exists), and
 * only for an skb with paged data. */
static __always_inline void H(shinfo)(const struct sk_buff *skb, struct pl_shinfo *sh)
{
	unsigned char *head = RD(skb, head);
	__u32 end = RD(skb, end);
	__u8 b[8] = {};
	sh->at = head + end;
	sh->segs = 1;
	sh->nr_frags = 0;
	if (!RD(skb, data_len))
		return;
	if (PL_CAST && bpf_ksym_exists(bpf_rdonly_cast)) {
		const struct skb_shared_info *si = bpf_core_cast(sh->at, struct skb_shared_info);
		__u16 segs = si->gso_segs;
		sh->nr_frags = si->nr_frags;
		if (segs > 1)
			sh->segs = segs;
		return;
	}
	if (bpf_probe_read_kernel(b, sizeof(b), sh->at))
		return;
	__u32 o_nr = bpf_core_field_offset(struct skb_shared_info, nr_frags);
	__u32 o_segs = bpf_core_field_offset(struct skb_shared_info, gso_segs);
	if (o_nr < sizeof(b))
		sh->nr_frags = b[o_nr];
	if (o_segs + 1 < sizeof(b)) {
		__u16 segs = (__u16)b[o_segs] | ((__u16)b[o_segs + 1] << 8);
		if (segs > 1)
			sh->segs = segs;
	}
}

/* The flow of the headers at l3 (flow.bpf.h: one parser for every hook). */
static __always_inline bool H(flow_of)(const unsigned char *l3, __u16 proto_be, struct pl_flow_key *k, __u32 *hdr_len)
{
	return parse_flow_at(l3, proto_be, k, hdr_len);
}

/* in_napi: the hook runs inside a NAPI poll (the GRO entry points); defer: a
 * timed frame's state waits for napi_gro_receive's exit (on_gro_exit), which
 * knows whether GRO merged it away; hook_counter: the hook's count of timed
 * frames. A packet starts its life here: timed 1 in
 * stage_every, recorded 1 in sample_every, its buffer pages kept for the join
 * while a miss sampler runs. */
static __always_inline int H(on_rx_handup)(const struct sk_buff *skb, bool in_napi, bool defer, __u32 hook_counter)
{
	if (!H(dev_matches)(RD(skb, dev)))
		return 0;

	__u16 qm = RD(skb, queue_mapping);
	__u32 queue = qm >= rx_queue_offset ? qm - rx_queue_offset : 0;
	unsigned char *head = RD(skb, head);
	__u32 draw = life_draw((__u64)head);
	bool sampled = one_in(draw, sample_every);
	bool track = life_timed(draw);
	/* An untimed frame is done, unless the buffer join keeps its pages: it
	 * touches no map (under load each is a cache miss). */
	if (!track && !join_buffers)
		return 0;

	__u32 l3_len = RD(skb, len);
	__u32 linear = l3_len - RD(skb, data_len);
	unsigned char *data = RD(skb, data);
	__u16 mac = RD(skb, mac_header);
	/* eth_type_trans already pulled L2 (except on the frags path, where the
	 * frame is still whole): count it back so the length is the frame's. */
	__u32 l2_len = (mac != (__u16)~0U && data >= head + mac) ? (__u32)(data - (head + mac)) : 0;
	if (l2_len > 64)
		l2_len = 0;
	__u32 len = l3_len + l2_len;

	struct pl_flow_key k = {};
	__u32 hdr_len = 0;
	/* The clock only for packets that need a time: stage state, and a hand-up
	 * outside NAPI for its CPU context (a GRO hand-up's is bounded by its
	 * poll's end, ctx_current). The buffer join reads it itself when it keeps
	 * a page. */
	__u64 now = track || (join_buffers && !in_napi) ? bpf_ktime_get_ns() : 0;
	/* data is the L3 header once L2 is pulled; on the frags path the headers
	 * are not in the linear area yet, so no flow. */
	bool have_flow = (sampled || join_buffers) && linear >= 20 && l2_len &&
			 H(flow_of)(data, RD(skb, protocol), &k, &hdr_len);
	if (have_flow)
		k.dir = PL_RX;
	if (join_buffers) {
		struct pl_shinfo sh;
		H(shinfo)(skb, &sh);
		now = remember_buffer(PL_CAST, (__u64)data, linear, (__u64)head, sh.at, sh.nr_frags, PL_RX, queue,
				      have_flow ? &k : NULL, now);
		set_ctx(PL_CTX_RX_NAPI, PL_RX, queue, have_flow ? &k : NULL, in_napi ? 0 : now);
	}
	if (!track)
		return 0;
	count(hook_counter);
	/* The frame sizes the queue's descriptors held, counted at hand-up (GRO
	 * may merge the frame away after). */
	__u32 segs = 1;
	if (RD(skb, data_len)) {
		struct pl_shinfo sh;
		H(shinfo)(skb, &sh);
		segs = sh.segs;
	}
	struct pl_queue_stats *qs = qstats(PL_RX, queue);
	if (qs)
		size_count(qs, len, segs);
	if (defer) {
		/* GRO decides whether this frame lives on (on_gro_exit). */
		struct pl_cpu_ctx *c = cpu_ctx_get();
		if (!c)
			return 0;
		c->pending.skb = (__u64)skb;
		c->pending.head = (__u64)head;
		c->pending.ts = now;
		c->pending.data_addr = (__u64)data;
		c->pending.len = len;
		c->pending.queue = queue;
		c->pending.gen = join_generation;
		c->pending.sampled = sampled && have_flow;
		if (c->pending.sampled)
			c->pending_flow = k;
		return 0;
	}
	struct pl_skb_state st = {};
	st.ts[0] = now;
	st.head = (__u64)head;
	st.dir = PL_RX;
	st.queue = queue;
	st.len = len;
	st.data_addr = (__u64)data;
	st.sampled = sampled && have_flow;
	store_rx_life((__u64)skb, &st, &k);
	return 0;
}

/* A NAPI poll ended on this CPU, ours or another device's (a driver may poll
 * under another netdev): the hand-up's CPU context is over. Attached only
 * with the join. */
static __always_inline int H(on_napi_poll)(const struct napi_struct *napi)
{
	end_napi_ctx();
	return 0;
}

static __always_inline int H(on_rx_stack)(const struct sk_buff *skb)
{
	/* Cheap device check first: other devices' packets cost no lookup. */
	if (!H(dev_matches)(RD(skb, dev)))
		return 0;
	return rx_stack_stage(H(tracked)(skb));
}

/* --miss-sampling software-copy: the buffers of the skb this CPU is about to
 * copy to a socket reader (linear data, then the first frags at their
 * direct-map addresses), for the stand-in sample to draw a byte from. */
static __always_inline void H(copy_buffers)(const struct sk_buff *skb, int copied)
{
	struct pl_cpu_ctx *c = cpu_ctx_get();
	if (!c)
		return;
	/* The sample program interrupts this CPU, possibly mid-update: retire the
	 * previous copy first and publish this one last, so a sample sees either
	 * no copy or a whole one. */
	c->copy_until = 0;
	barrier();
	__u32 len = RD(skb, len), dlen = RD(skb, data_len);
	__u32 n = 0, total = 0;
	__u64 data = as_number((__u64)RD(skb, data));
	if (len > dlen) {
		c->copy_addr[0] = data;
		c->copy_len[0] = len - dlen;
		total = len - dlen;
		n = 1;
	}
	struct pl_shinfo sh;
	H(shinfo)(skb, &sh);
	struct pl_frag f[PL_COPY_SEGS - 1] = {};
	__u64 po, vm;
	if (sh.nr_frags && mem_layout_for((__u64)RD(skb, head), &po, &vm) &&
	    !pl_read_frags(sh.at, f, PL_COPY_SEGS - 1)) {
#pragma unroll
		for (int i = 0; i < PL_COPY_SEGS - 1; i++) {
			if (i >= sh.nr_frags)
				break;
			__u64 virt = pl_page_virt(f[i].page, po, vm, mem_max_pfn);
			if (!virt || !f[i].len || n >= PL_COPY_SEGS)
				continue;
			c->copy_addr[n] = virt + f[i].offset;
			c->copy_len[n] = f[i].len;
			total += f[i].len;
			n++;
		}
	}
	c->copy_nlinear = len > dlen;
	c->copy_nseg = n;
	c->copy_total = total;
	barrier();
	c->copy_until = bpf_ktime_get_ns() + COPY_BASE_NS + (copied > 0 ? (__u64)copied : 0) * COPY_NS_PER_BYTE;
}

/* The socket copy. With a miss sampler attached, the CPU now works for this
 * skb's flow: ours if tracked, else if it arrived on our device (skb_iif; by
 * now skb->dev may be socket-layer scratch) and its socket is in our netns. */
static __always_inline int H(on_copy)(const struct sk_buff *skb, int copied)
{
	struct pl_skb_state *st = H(tracked)(skb);
	if (join_buffers) {
		bool ours = st && st->dir == PL_RX;
		__u32 queue = ours ? st->queue : 0;
		if (!ours && RD(skb, skb_iif) == filter_ifindex) {
			ours = H(socket_is_ours)(skb);
			__u16 qm = RD(skb, queue_mapping);
			queue = qm >= rx_queue_offset ? qm - rx_queue_offset : 0;
		}
		if (ours) {
			if (copy_standin)
				H(copy_buffers)(skb, copied);
			struct pl_flow_key k = {};
			__u32 hdr_len = 0;
			unsigned char *head = RD(skb, head);
			__u16 nh = RD(skb, network_header);
			bool have_flow = H(flow_of)(head + nh, RD(skb, protocol), &k, &hdr_len);
			k.dir = PL_RX;
			set_ctx(PL_CTX_RX_COPY, PL_RX, queue, have_flow ? &k : NULL, bpf_ktime_get_ns());
		} else if (copy_standin) {
			/* Someone else's copy: the previous copy's buffers are not being read now. */
			struct pl_cpu_ctx *c = cpu_ctx_get();
			if (c)
				c->copy_until = 0;
		}
	}
	return copy_stage(st);
}

/* consume_skb / kfree_skb: every free on the host passes here while the
 * hooks run; only a tracked packet's ends a life (tier 0 counts drops). */
static __always_inline int H(on_free)(const struct sk_buff *skb, bool dropped, __u32 reason)
{
	/* Kernels that report consumption through kfree_skb say so in the reason. */
	if (dropped && bpf_core_enum_value_exists(enum skb_drop_reason, SKB_CONSUMED) &&
	    reason == bpf_core_enum_value(enum skb_drop_reason, SKB_CONSUMED))
		dropped = false;
	struct pl_skb_state *st = H(tracked)(skb);
	if (!st)
		return 0;
	return free_stage(st, (__u64)skb, dropped, reason);
}

static __always_inline int H(on_tx_queue)(const struct sk_buff *skb)
{
	if (!H(dev_matches)(RD(skb, dev)))
		return 0;
	/* Sampling decisions are taken here, at the start of a TX life. */
	unsigned char *head = RD(skb, head);
	__u32 draw = life_draw((__u64)head);
	bool sampled = one_in(draw, sample_every);
	bool track = life_timed(draw);
	if (!track)
		return 0;
	struct pl_queue_stats *qs = qstats(PL_TX, RD(skb, queue_mapping));
	if (qs)
		qs->handups += 1;
	struct pl_skb_state st = {};
	st.ts[0] = bpf_ktime_get_ns();
	st.head = (__u64)head;
	st.dir = PL_TX;
	/* The TX queue is picked before net_dev_queue fires. */
	st.queue = RD(skb, queue_mapping);
	st.sampled = sampled;
	store_state((__u64)skb, &st);
	return 0;
}

static __always_inline int H(on_tx_xmit)(const struct sk_buff *skb, const struct net_device *dev)
{
	if (!H(dev_matches)(dev))
		return 0;
	__u32 queue = RD(skb, queue_mapping);
	struct pl_skb_state *st = H(tracked)(skb);
	if (st && st->dir != PL_TX)
		st = NULL;
	if (!st && !join_buffers)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (st) {
		st->ts[1] = now;
		st->queue = queue;
		st->len = RD(skb, len);
		record_stage(qstats(PL_TX, queue), TX_QUEUE_TO_XMIT, st->ts[0], now);
	}
	unsigned char *head = RD(skb, head);
	unsigned char *data = RD(skb, data);
	if (st)
		st->data_addr = (__u64)data;
	if (!(join_buffers || (st && st->sampled)))
		return 0;
	struct pl_flow_key k = {};
	__u32 hdr_len = 0;
	__u16 nh = RD(skb, network_header);
	if (!H(flow_of)(head + nh, RD(skb, protocol), &k, &hdr_len))
		return 0;
	k.dir = PL_TX;
	if (st && st->sampled)
		store_flow(st, &k);
	if (join_buffers) {
		struct pl_shinfo sh;
		H(shinfo)(skb, &sh);
		remember_buffer(PL_CAST, (__u64)data, RD(skb, len) - RD(skb, data_len), (__u64)head, sh.at, sh.nr_frags,
				PL_TX, queue, &k, now);
		set_ctx(PL_CTX_TX, PL_TX, queue, &k, now);
	}
	return 0;
}

static __always_inline int H(on_tx_done)(const struct sk_buff *skb, const struct net_device *dev)
{
	if (!H(dev_matches)(dev))
		return 0;
	return tx_done_stage(H(tracked)(skb));
}
