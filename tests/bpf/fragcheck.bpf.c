// SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause
/* fragcheck (test only): is the page -> address conversion of bpf/fragaddr.h
 * right? At RX hand-up (the hook pktlife maps buffers at), for TCP segments to
 * one port, read the bytes at each frag's computed kernel virtual address and
 * send them out with the segment's sequence number and the frag's place in
 * the payload; the system test compares them with the bytes the sender sent.
 * The same read one page further on is a control: it must not match.
 * Loaded by user/examples/fragcheck.rs; never part of ddioscope itself. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "fragaddr.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define FC_FRAGS 4
#define FC_BYTES 32
#define FC_SYN 0xffffffff  /* record of a SYN: seq is the initial sequence number */

const volatile __u16 fc_port = 0;              /* TCP destination port */
const volatile __u64 fc_page_offset = 0;
const volatile __u64 fc_page_offset_addr = 0;
const volatile __u64 fc_vmemmap = 0;
const volatile __u64 fc_vmemmap_addr = 0;
const volatile __u64 fc_max_pfn = 0;
const volatile __u32 fc_max_records = 4096;

__u64 fc_page_offset_cache = 0;
__u64 fc_vmemmap_cache = 0;
__u32 fc_emitted = 0;

/* Segments seen (with and without frags), frags the layout could not place. */
__u64 fc_segments = 0;
__u64 fc_segments_with_frags = 0;
__u64 fc_unplaced = 0;

struct fc_record {
	__u32 seq;        /* TCP sequence number of the segment's first payload byte */
	__u32 pos;        /* payload offset of this frag's first byte */
	__u32 frag;       /* frag index, or FC_SYN */
	__u32 len;        /* frag length */
	__u64 virt;       /* computed address of the frag's first byte */
	__s32 read_err;   /* bpf_probe_read_kernel at virt */
	__s32 ctl_err;    /* the same one page further on */
	__u8 bytes[FC_BYTES];
	__u8 ctl[FC_BYTES];
};

/* A kernel pointer read back from map memory is a plain number (as pktlife's as_number()). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} fc_scratch SEC(".maps");

static __always_inline __u64 as_number(__u64 v)
{
	__u32 zero = 0;
	__u64 *s = bpf_map_lookup_elem(&fc_scratch, &zero);
	if (!s)
		return 0;
	*(volatile __u64 *)s = v;
	return *(volatile __u64 *)s;
}

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} fc_events SEC(".maps");

SEC("tp_btf/napi_gro_receive_entry")
int BPF_PROG(fc_handup, const struct sk_buff *skb)
{
	unsigned char *data = skb->data;
	unsigned char *head = skb->head;
	__u32 end = skb->end;
	__u32 len = skb->len, dlen = skb->data_len;
	__u8 h[60] = {};
	if (skb->protocol != bpf_htons(0x0800) || bpf_probe_read_kernel(h, sizeof(h), data))
		return 0;
	struct iphdr *ip = (struct iphdr *)h;
	if (ip->protocol != 6 || ip->ihl != 5)
		return 0;
	struct tcphdr *th = (struct tcphdr *)(h + 20);
	if (bpf_ntohs(th->dest) != fc_port)
		return 0;
	if (th->syn && !th->ack) {
		/* The connection's initial sequence number: the payload starts at isn + 1. */
		struct fc_record *r = bpf_ringbuf_reserve(&fc_events, sizeof(*r), 0);
		if (r) {
			__builtin_memset(r, 0, sizeof(*r));
			r->seq = bpf_ntohl(th->seq);
			r->frag = FC_SYN;
			bpf_ringbuf_submit(r, 0);
		}
		return 0;
	}
	__u32 hdrs = 20 + (__u32)th->doff * 4;
	__u32 linear = len - dlen;
	__u32 pos = linear > hdrs ? linear - hdrs : 0;
	__u32 seq = bpf_ntohl(th->seq);
	__sync_fetch_and_add(&fc_segments, 1);
	if (!dlen)
		return 0;
	__sync_fetch_and_add(&fc_segments_with_frags, 1);

	const unsigned char *shinfo = head + end;
	__u8 nr = 0;
	struct pl_frag f[FC_FRAGS] = {};
	if (bpf_probe_read_kernel(&nr, 1, shinfo + bpf_core_field_offset(struct skb_shared_info, nr_frags)) ||
	    pl_read_frags(shinfo, f, FC_FRAGS))
		return 0;
	__u64 po = pl_base(fc_page_offset, fc_page_offset_addr, &fc_page_offset_cache);
	__u64 vm = pl_base(fc_vmemmap, fc_vmemmap_addr, &fc_vmemmap_cache);
	if (!pl_in_direct_map(as_number((__u64)head), po, fc_max_pfn)) {
		__sync_fetch_and_add(&fc_unplaced, nr);
		return 0;
	}
#pragma unroll
	for (int i = 0; i < FC_FRAGS; i++) {
		if (i >= nr)
			break;
		__u64 virt = pl_page_virt(f[i].page, po, vm, fc_max_pfn);
		if (!virt) {
			__sync_fetch_and_add(&fc_unplaced, 1);
			pos += f[i].len;
			continue;
		}
		virt += f[i].offset;
		/* A cap on the records, not exact across CPUs (no atomic fetch on every BPF target). */
		if (fc_emitted < fc_max_records) {
			fc_emitted += 1;
			struct fc_record *r = bpf_ringbuf_reserve(&fc_events, sizeof(*r), 0);
			if (r) {
				r->seq = seq;
				r->pos = pos;
				r->frag = i;
				r->len = f[i].len;
				r->virt = virt;
				r->read_err = bpf_probe_read_kernel(r->bytes, FC_BYTES, (const void *)virt);
				r->ctl_err = bpf_probe_read_kernel(r->ctl, FC_BYTES, (const void *)(virt + 4096));
				bpf_ringbuf_submit(r, 0);
			}
		}
		pos += f[i].len;
	}
	return 0;
}

/* Anchors the record type in BTF for the generated Rust type. */
struct fc_record fc_record_anchor = {};
