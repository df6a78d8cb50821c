// SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause
/* l3miss: the L3-miss sample program. A perf_event program on one sampling
 * event per CPU (PEBS MEM_LOAD_RETIRED.L3_MISS on Intel; a software event
 * stands in where there is no PMU) charges each sample to a queue and flow:
 * by its data address when that lies on a live packet buffer (the buffer-page
 * map pktlife keeps), else by what network work the CPU was doing (the CPU
 * context pktlife keeps). Its maps cpu_ctx and buf_pages are pktlife's, handed
 * over before load (user/src/probe/l3miss.rs). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "common.h"
#include "attrib.h"
#include "l3miss.h"
#include "bits.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by userspace before load, as for pktlife (the two must agree). */
const volatile __u32 join_page_mask = 0;
const volatile __u64 ctx_window_ns = 200000;
/* --miss-sampling software-copy: a cpu-clock sample taken while the CPU copies
 * an skb to a socket reader takes a byte of that skb's buffers as its data
 * address, where PEBS would report the copy's load. A stand-in that exercises
 * the join, not a measured miss. */
const volatile __u8 copy_standin = 0;
/* The current window's number and when its join began (CLOCK_MONOTONIC):
 * plain globals, userspace sets them at each window. */
volatile __u32 join_generation = 0;
volatile __u64 join_window_start = 0;

#include "attrib.bpf.h"

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

/* Anchors the enum userspace reads the totals by in BTF. */
enum pl_miss_counter pl_miss_counter_anchor = PLM_SAMPLES;
