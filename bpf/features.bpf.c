// SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause
/* features: one do-nothing program per attach type, loaded one at a time by
 * user/src/probe/features.rs to learn what this kernel accepts by trying. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(feat_tp_btf, struct sk_buff *skb) { return 0; }

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(feat_raw_tp) { return 0; }

SEC("fentry/netif_receive_skb")
int BPF_PROG(feat_fentry, struct sk_buff *skb) { return 0; }

/* The buffer-page walk is a global function taking a pointer to its state
 * (pktlife.bpf.c: pl_remember_range); kernels whose verifier refuses pointer
 * arguments to global functions cannot load the probes at all. */
struct feat_walk {
	__u64 n;
};

__noinline int feat_global_ptr(struct feat_walk *w)
{
	if (!w)
		return 0;
	return w->n > 1;
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(feat_global_func)
{
	struct feat_walk w = { .n = 1 };
	return feat_global_ptr(&w);
}
