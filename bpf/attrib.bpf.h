/* SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause */
/* The buffer-page map and the per-CPU work context: written by the packet
 * probes (pktlife.bpf.c), read by the L3-miss sample program (l3miss.bpf.c).
 * Both objects define the maps from this header; userspace loads pktlife
 * first and hands its maps to l3miss (bpf_map__reuse_fd), so they are one.
 *
 * The including object declares, before including this header:
 *   const volatile __u32 join_page_mask;   (1 page in mask+1 is joined)
 *   const volatile __u64 ctx_window_ns;    (a context older than this is stale)
 *   volatile __u32 join_generation;        (the current window's number)
 * Needs vmlinux.h, bpf_helpers.h and attrib.h first. */
#ifndef __ATTRIB_BPF_H
#define __ATTRIB_BPF_H

#ifndef barrier
#define barrier() asm volatile("" ::: "memory")
#endif

/* Each CPU's context, by CPU number: an array rather than a per-CPU one, so
 * finding it takes no load of the map's per-CPU pointer (a line that, like
 * every line the hooks touch, is out of the cache under load). Mmapable
 * arrays start their values on a page, so a CPU's context starts a line.
 * Sized to the possible CPUs by userspace before load. */
_Static_assert(sizeof(struct pl_cpu_ctx) % 64 == 0, "a CPU's context is whole cache lines");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pl_cpu_ctx);
} cpu_ctx SEC(".maps");

/* Live packet-buffer pages for the address join: a 4-way set-associative
 * table indexed by a hash of the page address, the way with the oldest
 * hand-up giving room (bounded; LRU within each set). An array element is an
 * inlined load, where an LRU hash update takes a lock and a free-list node on
 * every hand-up. Four ways, because pages recycle: a host's few thousand
 * buffer pages come back again and again, so a set that three of them share
 * thrashes for the whole run in a 2-way table, and the page waiting for a
 * slow reader (the oldest hand-up) is the one pushed out each time. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BUF_SETS);
	__type(key, __u32);
	__type(value, struct pl_buf_bucket);
} buf_pages SEC(".maps");

static __always_inline struct pl_cpu_ctx *cpu_ctx_get(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	return bpf_map_lookup_elem(&cpu_ctx, &cpu);
}

static __always_inline __u32 buf_set_of(__u64 page)
{
	return (__u32)(((page >> 12) * 0x9E3779B97F4A7C15ULL) >> 40) & (BUF_SETS - 1);
}

/* Is the page in the sampled subset (see join_page_mask)? A subset chosen by
 * address, not by packet, keeps every entry current: each packet that uses a
 * chosen page renews it. */
static __always_inline bool in_join_subset(__u32 set)
{
	return !(set & join_page_mask);
}

/* A way's tag: the page address, and in the low 12 bits (free: pages are
 * 4 KiB-aligned) a generation bumped on every rewrite, so a reader that sees
 * the same tag before and after copying the owner knows no rewrite ran in
 * between, even when the page came back to the same way for a new owner. */
#define BUF_GEN_MASK 4095ULL

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
#pragma unroll
	for (int i = 0; i < PL_BUF_WAYS; i++)
		if (read_way(&bk->way[i], page, out))
			return PL_FOUND;
	return PL_NOT_FOUND;
}

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
 * in an earlier window is stale whatever its time says. One set without a
 * time (cur_since 0) is a GRO hand-up's, and the poll's end clears it; the
 * first sample to see one dates it, so one whose poll end is never seen (tun's
 * napi_gro_frags from write(), which runs no poll) still goes stale after
 * ctx_window_ns. */
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

#endif /* __ATTRIB_BPF_H */
