// SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause
/* hashcheck (test only): the probes' buffer-page set hash and page-subset test
 * (buf_set_of, in_join_subset in bpf/attrib.bpf.h, the very functions pktlife
 * and l3miss run) on pages userspace hands in, run by BPF_PROG_TEST_RUN so the
 * Rust twin in user/src/attribution/groundtruth.rs is held to the code, not to
 * its text. Loaded by that test; never part of ddioscope itself. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "common.h"
#include "attrib.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* What attrib.bpf.h needs its includer to declare. The probes set the mask
 * before load (read-only there); here it is writable, so one load tries every
 * subset size. */
volatile __u32 join_page_mask = 0;
const volatile __u64 ctx_window_ns = 0;
volatile __u32 join_generation = 0;

#include "attrib.bpf.h"

#define HC_PAGES 128

/* The pages in, their sets and subset tests out: in .bss, which userspace
 * maps and writes before each run and reads after it (a syscall program may
 * not index its context by a variable). */
struct hc_args {
	__u64 page[HC_PAGES];
	__u32 set[HC_PAGES];
	__u32 in_subset[HC_PAGES];
	__u32 sets;
	__u32 pad;
};

struct hc_args hc_io;

SEC("syscall")
int hc_run(void *ctx)
{
	for (int i = 0; i < HC_PAGES; i++) {
		__u32 set = buf_set_of(hc_io.page[i]);
		hc_io.set[i] = set;
		hc_io.in_subset[i] = in_join_subset(set);
	}
	hc_io.sets = BUF_SETS;
	return 0;
}
