/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* Packet-buffer frags -> kernel virtual addresses, for the address join.
 *
 * An skb's frags name their memory by struct page (skb_frag_t.netmem in 6.x,
 * bio_vec.bv_page before), while a PEBS sample carries a virtual address. On
 * x86-64 with SPARSEMEM_VMEMMAP, every struct page of the memory map sits in
 * the vmemmap array and every page of RAM in the direct map, so
 *
 *     pfn  = (page - vmemmap_base) / sizeof(struct page)
 *     virt = page_offset_base + pfn * PAGE_SIZE
 *
 * The two bases come from userspace (user/src/probe/memlayout.rs): the x86-64
 * defaults, or, where the kernel randomises them and /proc/kallsyms lists the
 * variables, the variables' addresses, read here once. Both are checked: a
 * page must fall inside the memory map (pfn < max_pfn) and the skb's own head
 * (kmalloc or page-frag memory, always in the direct map) inside the direct
 * map; a layout that fails either check maps no frag (counted).
 *
 * Shared by pktlife.bpf.c and the test-only tests/bpf/fragcheck.bpf.c, which
 * reads the bytes at the computed addresses and compares them with what the
 * sender sent. Needs vmlinux.h and bpf_core_read.h first. */
#ifndef __FRAGADDR_H
#define __FRAGADDR_H

#define PL_PAGE_SHIFT 12

/* One frag as the kernel lays it out (both skb_frag and bio_vec: the page or
 * netmem, then length, then offset, 16 bytes). pl_frags_layout_ok() checks
 * that against the running kernel's BTF at load time. */
struct pl_frag {
	__u64 page;   /* netmem_ref / struct page *; netmem bit 0 set: net_iov */
	__u32 len;
	__u32 offset;
};

/* Compile-time constants after CO-RE relocation: the verifier prunes the
 * branches of the layouts the running kernel does not have. */
static __always_inline bool pl_frags_layout_ok(void)
{
	if (bpf_core_field_exists(struct skb_frag, netmem))
		return bpf_core_type_size(struct skb_frag) == 16 &&
		       bpf_core_field_offset(struct skb_frag, netmem) == 0 &&
		       bpf_core_field_offset(struct skb_frag, len) == 8 &&
		       bpf_core_field_offset(struct skb_frag, offset) == 12;
	if (bpf_core_field_exists(struct bio_vec, bv_page))
		return bpf_core_type_size(struct bio_vec) == 16 &&
		       bpf_core_field_offset(struct bio_vec, bv_page) == 0 &&
		       bpf_core_field_offset(struct bio_vec, bv_len) == 8 &&
		       bpf_core_field_offset(struct bio_vec, bv_offset) == 12;
	return false;
}

/* Read the first n frags of the shared info at shinfo (skb->head + skb->end)
 * into f; n is a constant at every call site. 0 on failure. */
static __always_inline int pl_read_frags(const unsigned char *shinfo, struct pl_frag *f, __u32 n)
{
	if (!pl_frags_layout_ok())
		return -1;
	return bpf_probe_read_kernel(f, n * sizeof(struct pl_frag),
				     shinfo + bpf_core_field_offset(struct skb_shared_info, frags));
}

/* The same through typed loads (bpf_core_cast) where the kernel's frags are
 * skb_frag {netmem, len, offset} and it has bpf_rdonly_cast: a few loads in
 * place of a 64-byte probe read (README, Overhead: TCP hand-up 289 against
 * 345 ns net on the development VM). n is a constant at every call site (the loop unrolls, so
 * each load has a fixed offset). 0 on success; else the probe read's result. */
static __always_inline int pl_load_frags(const unsigned char *shinfo, struct pl_frag *f, __u32 n, __u32 nr_frags)
{
	if (!pl_frags_layout_ok())
		return -1;
	if (bpf_core_field_exists(struct skb_frag, netmem) && bpf_ksym_exists(bpf_rdonly_cast)) {
		const struct skb_shared_info *si = bpf_core_cast(shinfo, struct skb_shared_info);
#pragma unroll
		for (__u32 i = 0; i < n; i++) {
			if (i >= nr_frags)
				break;
			f[i].page = si->frags[i].netmem;
			f[i].len = si->frags[i].len;
			f[i].offset = si->frags[i].offset;
		}
		return 0;
	}
	return pl_read_frags(shinfo, f, n);
}

/* A base given by value, or by the address of the kernel variable holding it
 * (read once, then cached in *cache). 0: unknown. */
static __always_inline __u64 pl_base(__u64 value, __u64 addr, __u64 *cache)
{
	if (!addr)
		return value;
	__u64 v = *cache;
	if (v)
		return v;
	if (bpf_probe_read_kernel(&v, sizeof(v), (const void *)addr) || !v)
		return 0;
	*cache = v;
	return v;
}

/* Is addr in the direct map of max_pfn pages at page_offset? */
static __always_inline bool pl_in_direct_map(__u64 addr, __u64 page_offset, __u64 max_pfn)
{
	return page_offset && addr >= page_offset && ((addr - page_offset) >> PL_PAGE_SHIFT) < max_pfn;
}

/* The direct-map address of the page (or netmem) page; 0 for a net_iov
 * (device memory, no struct page) or a page outside the memory map. */
static __always_inline __u64 pl_page_virt(__u64 page, __u64 page_offset, __u64 vmemmap, __u64 max_pfn)
{
	__u64 sz = bpf_core_type_size(struct page);
	if ((page & 1) || !sz || !page_offset || !vmemmap || page < vmemmap)
		return 0;
	__u64 d = page - vmemmap;
	__u64 pfn = d / sz;
	if (pfn * sz != d || pfn >= max_pfn)
		return 0;
	return page_offset + (pfn << PL_PAGE_SHIFT);
}

#endif /* __FRAGADDR_H */
