// SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause
/* floor: the measurement floor of `make bench` (user/src/probe/floor.rs).
 *
 * bpf_stats charges each program run the time between two sched_clock reads
 * around it, plus the indirect call into the program: a cost every program
 * pays whatever it does. To tell that floor from what a hook's own code costs,
 * the bench attaches, next to the recorder, an empty program to each hot
 * tracepoint (same attach type, same events), and one that only reads
 * skb->dev->ifindex, the shape of a hook that checks the device and returns.
 *
 * Every program is compiled as tp_btf and as raw_tp, like the pktlife hooks;
 * userspace autoloads one flavour. Names stay within the kernel's 15
 * characters once the flavour suffix is appended. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The recorded device: the dev-read programs compare with it as the hooks'
 * device filter does, so the load cannot be optimised away. */
const volatile __u32 filter_ifindex = 0;

/* tp_btf reads skb->dev->ifindex with direct BTF loads, raw_tp with probe
 * reads: the same split as the pktlife hooks (RD in pktlife.hooks.h). */
#define DEV_IS_OURS_btf(skb) ({ const struct net_device *d_ = (skb)->dev; d_ && d_->ifindex == filter_ifindex; })
#define DEV_IS_OURS_raw(skb) ({ const struct net_device *d_ = BPF_CORE_READ(skb, dev); \
	d_ && BPF_CORE_READ(d_, ifindex) == filter_ifindex; })

#define FLOOR_EMPTY(FL, PFX, TP, NAME)                                                                \
	SEC(PFX #TP)                                                                                  \
	int BPF_PROG(e_##NAME##FL) { return 0; }

#define FLOOR_DEV(FL, PFX, TP, NAME)                                                                  \
	SEC(PFX #TP)                                                                                  \
	int BPF_PROG(d_##NAME##FL, const struct sk_buff *skb) { return DEV_IS_OURS##FL(skb); }

/* The tracepoints of the bench's hot hooks; those with an skb as first
 * argument get the dev-read program too. */
#define FLOOR_HOOKS(FL, PFX)                                                                          \
	FLOOR_EMPTY(FL, PFX, napi_gro_receive_entry, gro)                                             \
	FLOOR_DEV(FL, PFX, napi_gro_receive_entry, gro)                                               \
	FLOOR_EMPTY(FL, PFX, napi_gro_receive_exit, groexit)                                          \
	FLOOR_EMPTY(FL, PFX, netif_receive_skb, stack)                                                \
	FLOOR_DEV(FL, PFX, netif_receive_skb, stack)                                                  \
	FLOOR_EMPTY(FL, PFX, skb_copy_datagram_iovec, copy)                                           \
	FLOOR_DEV(FL, PFX, skb_copy_datagram_iovec, copy)                                             \
	FLOOR_EMPTY(FL, PFX, consume_skb, consume)                                                    \
	FLOOR_DEV(FL, PFX, consume_skb, consume)                                                      \
	FLOOR_EMPTY(FL, PFX, kfree_skb, kfree)                                                        \
	FLOOR_DEV(FL, PFX, kfree_skb, kfree)                                                          \
	FLOOR_EMPTY(FL, PFX, net_dev_queue, txq)                                                      \
	FLOOR_DEV(FL, PFX, net_dev_queue, txq)                                                        \
	FLOOR_EMPTY(FL, PFX, net_dev_start_xmit, xmit)                                                \
	FLOOR_DEV(FL, PFX, net_dev_start_xmit, xmit)                                                  \
	FLOOR_EMPTY(FL, PFX, net_dev_xmit, done)                                                      \
	FLOOR_DEV(FL, PFX, net_dev_xmit, done)                                                        \
	FLOOR_EMPTY(FL, PFX, napi_poll, napi)

/* The recorder's tcx counter's floor: an empty program in the device's tcx
 * chain (attached after the recorder's), continuing the chain. */
SEC("tcx/ingress")
int e_tcx(struct __sk_buff *skb) { return TCX_NEXT; }

FLOOR_HOOKS(_btf, "tp_btf/")
FLOOR_HOOKS(_raw, "raw_tp/")
