/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* The 5-tuple of a packet, parsed from a copy of its L3 and L4 headers. Every
 * hook gets the copy its own way (a probe read from an skb's buffer, a load
 * from a tc program's packet) and parses it here, so all of them see the same
 * flows. Needs vmlinux.h, bpf_endian.h and common.h first. */
#ifndef __DDIO_FLOW_BPF_H
#define __DDIO_FLOW_BPF_H

#define ETH_P_IP_ 0x0800
#define ETH_P_IPV6_ 0x86DD
#define IP_OFFSET_MASK_ 0x1FFF
#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17

/* Bytes copied for a parse: an IPv6 header, or an IPv4 header with up to 20
 * bytes of options, plus the L4 ports and the TCP data offset. */
#define FLOW_HDR_BYTES 56

/* The fewest L3 bytes a flow can be parsed from: an option-less IPv4 header
 * and a UDP header (a datagram of a few bytes, such as a keepalive, is no
 * longer than that and its payload). */
#define FLOW_MIN_BYTES 28

/* proto: the L3 protocol (host order, ETH_P_*); b: FLOW_HDR_BYTES from the L3
 * header on, of which the first got hold the packet. Fills k (not its dir)
 * and the L3+L4 header length; false for anything but the first fragment of
 * TCP/UDP over IPv4/IPv6 (IPv6 extension headers are not walked), or when the
 * ports (and TCP's data offset) lie past got. */
static __always_inline bool parse_flow(const __u8 *b, __u32 got, __u16 proto, struct pl_flow_key *k, __u32 *hdr_len)
{
	__u32 l4_off;
	__u8 l4proto;

	if (proto == ETH_P_IP_) {
		const struct iphdr *ip = (const struct iphdr *)b;
		if (bpf_ntohs(ip->frag_off) & IP_OFFSET_MASK_)
			return false;
		l4proto = ip->protocol;
		l4_off = (__u32)ip->ihl * 4;
		k->family = 4;
		__builtin_memcpy(k->saddr, &ip->saddr, 4);
		__builtin_memcpy(k->daddr, &ip->daddr, 4);
	} else if (proto == ETH_P_IPV6_) {
		const struct ipv6hdr *ip6 = (const struct ipv6hdr *)b;
		l4proto = ip6->nexthdr;
		l4_off = 40;
		k->family = 6;
		__builtin_memcpy(k->saddr, &ip6->saddr, 16);
		__builtin_memcpy(k->daddr, &ip6->daddr, 16);
	} else {
		return false;
	}
	if (l4proto != IPPROTO_TCP_ && l4proto != IPPROTO_UDP_)
		return false;
	if (l4_off < 20 || l4_off > 40)
		return false;
	/* Bounded for the verifier: b[l4_off .. l4_off + 12] lies inside b. */
	l4_off &= 63;
	if (l4_off > 40)
		return false;
	if (l4_off + (l4proto == IPPROTO_TCP_ ? 13 : 4) > got)
		return false;
	k->proto = l4proto;
	k->sport = ((__u16)b[l4_off] << 8) | b[l4_off + 1];
	k->dport = ((__u16)b[l4_off + 2] << 8) | b[l4_off + 3];
	*hdr_len = l4_off + (l4proto == IPPROTO_TCP_ ? (__u32)(b[l4_off + 12] >> 4) * 4 : 8);
	return true;
}

/* The flow of the headers at a kernel address l3 (an skb's buffer). */
static __always_inline bool parse_flow_at(const void *l3, __u16 proto_be, struct pl_flow_key *k, __u32 *hdr_len)
{
	__u8 b[FLOW_HDR_BYTES];
	__u16 proto = bpf_ntohs(proto_be);
	if (proto != ETH_P_IP_ && proto != ETH_P_IPV6_)
		return false;
	if (bpf_probe_read_kernel(b, sizeof(b), l3))
		return false;
	return parse_flow(b, sizeof(b), proto, k, hdr_len);
}

static __always_inline bool flow_key_eq(const struct pl_flow_key *a, const struct pl_flow_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4];
}

#endif /* __DDIO_FLOW_BPF_H */
