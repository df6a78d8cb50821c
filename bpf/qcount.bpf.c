// SPDX-License-Identifier: LGPL-2.1-only OR BSD-2-Clause
/* qcount: tier 0 of the recorder, always on, built to cost a packet at most
 * one program per direction.
 *
 * On a host whose kernel entries go through retpolines, an attached program
 * costs a packet about as much for being called as for what it does, so the
 * count of programs a packet passes is the cost. This object counts:
 *   RX: a tcx ingress program on the device itself, which runs for this
 *       device's frames only and after GRO (one run per merged skb; the skb
 *       carries its segment count), else the driver hand-up tracepoints;
 *   TX: net_dev_start_xmit (the queue is only chosen just before it);
 *   NAPI polls: napi_poll, once per poll, not per packet;
 *   drops: kfree_skb, which fires for drops only.
 * Flows are estimated from skbs sampled in proportion to their size (see
 * struct qc_flow_stats), each estimate with its variance. Everything else (stage latencies, packet records, the
 * buffer-page map) is pktlife's, attached only inside sampled windows. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "qcount.h"
#include "bits.bpf.h"
#include "flow.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by userspace before load. */
const volatile __u32 filter_ifindex = 0;
const volatile __u32 filter_netns = 0;     /* netns inode; 0: any namespace */
/* skb->queue_mapping - this = RX queue (NIC drivers store queue + 1, veth the
 * peer's TX queue unchanged). */
const volatile __u8 rx_queue_offset = 1;
/* Bytes of link-layer header per frame (14 on Ethernet, 0 on L3 devices). */
const volatile __u32 link_hdr_len = 14;
/* Flows: an RX skb of d bytes is sampled with probability min(1, d / flow_bytes),
 * a TX skb with min(1, d / flow_bytes_tx); 1: every skb (exact); 0: no flows. A
 * direction whose program runs only in windows samples more densely there. */
const volatile __u32 flow_bytes = 65536;
const volatile __u32 flow_bytes_tx = 65536;
/* Where this load's flow-sampling sequences start (random, set by userspace). */
const volatile __u64 draw_seed = 0;
/* Per direction, in 1/65536: the window-only direction's threshold times the part
 * of its duty's window its programs were last on (a busy device's windows are cut
 * to a packet budget; the programs run through their attach too), so a cut window
 * samples as many skbs a second as an uncut one; 0: as loaded. Written by
 * userspace between windows. */
volatile __u32 flow_cut[2] = {};

static __always_inline __u32 flow_threshold(__u32 loaded, int dir)
{
	__u32 cut = flow_cut[dir & 1];
	if (!cut || loaded <= 1)
		return loaded;
	__u64 t = ((__u64)loaded * cut) >> 16;
	return t > 1 ? (__u32)t : 1;
}

/* Per CPU, then per direction and queue: entry cpu * 2 * MAX_QUEUES + dir *
 * MAX_QUEUES + queue. An array by CPU number rather than a per-CPU array, for
 * the same reason as qc_cpu; sized to the possible CPUs by userspace. */
_Static_assert(sizeof(struct qc_queue_stats) % 64 == 0, "a queue's counts are whole cache lines");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * MAX_QUEUES);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct qc_queue_stats);
} qc_queues SEC(".maps");

/* The flow tables: two plain hashes, not LRU (an LRU table lets a flow go
 * silently, and the flow comes back at its new count alone). Programs add to
 * the one flow_gen names; userspace flips flow_gen, waits until no program can
 * still be in the other, drains it (every entry read, then deleted) and adds
 * it to its own sums (user/src/probe/flowdrain.rs). So a table holds only the
 * flows active since its last drain, and a sum that finds it full goes to its
 * queue's overflow bucket, counted, not lost. */
struct qc_flow_table {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, QC_FLOW_ENTRIES);
	__type(key, struct pl_flow_key);
	__type(value, struct qc_flow_stats);
};
struct qc_flow_table qc_flows0 SEC(".maps");
struct qc_flow_table qc_flows1 SEC(".maps");

/* Which flow table the programs add to (its low bit); written by userspace. */
volatile __u32 flow_gen = 0;

/* Each CPU's recent flows, per direction: entry (cpu * 2 + dir) * QC_FLOW_SLOTS
 * + the flow's hash. An array, whose lookup the verifier inlines, by CPU
 * number as qc_cpu is, and mmapable so userspace reads the slots in place;
 * sized to the possible CPUs by userspace. A direction's programs never
 * interrupt one another on a CPU (TX runs with softirqs off, RX in them), so
 * a slot has one writer at a time. */
_Static_assert(sizeof(struct qc_flow_slot) % 64 == 0, "a flow slot is whole cache lines");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * QC_FLOW_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct qc_flow_slot);
} qc_flow_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QC_NR);
	__type(key, __u32);
	__type(value, __u64);
} qc_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	/* Each reason twice: every drop of the device's, then (from MAX_DROP_REASONS on)
	 * those of RX packets its stack had not yet taken in. */
	__uint(max_entries, 2 * MAX_DROP_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} qc_drop_reasons SEC(".maps");

/* Each CPU's scratch, by CPU number: an array rather than a per-CPU one, so
 * finding it takes no load of the map's per-CPU pointer (a line that, like
 * every line the programs touch, is out of the cache under load). Mmapable
 * arrays start their values on a page, so each CPU's lines are its own.
 * Sized to the possible CPUs by userspace before load. */
_Static_assert(sizeof(struct qc_cpu) % 64 == 0, "a CPU's scratch is whole cache lines");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct qc_cpu);
} qc_cpu SEC(".maps");

/* NAPI id -> RX queue, learned from the frames each NAPI instance delivered
 * (or written by userspace from the kernel's queue table), so a poll is
 * charged to its queue even when RPS moved its frames' stack work (and the
 * counting program) to another CPU, or no RX program runs. An array, whose
 * lookup the verifier inlines: a poll pays a load, not a hash walk. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QC_NAPI_SLOTS);
	__type(key, __u32);
	__type(value, struct qc_napi_slot);
} qc_napi_queue SEC(".maps");

static __always_inline struct qc_napi_slot *napi_slot(__u32 napi_id)
{
	__u32 idx = napi_id & (QC_NAPI_SLOTS - 1);
	return bpf_map_lookup_elem(&qc_napi_queue, &idx);
}

static __always_inline void qc_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&qc_counters, &idx);
	if (c)
		*c += 1;
}

static __always_inline struct qc_cpu *qc_cpu_get(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	return bpf_map_lookup_elem(&qc_cpu, &cpu);
}

/* The recorded namespace's struct net once seen (netns.hooks.h): in the CPU's
 * scratch line, which the hooks touch anyway; the last other one in its
 * second line, which only another namespace's events read. */
static __always_inline __u64 *net_seen_at(void)
{
	struct qc_cpu *c = qc_cpu_get();
	if (!c)
		return NULL;
	/* Keeps the offset after the test (the verifier refuses arithmetic
	 * on a pointer that may be NULL). */
	barrier_var(c);
	return &c->net_seen;
}

static __always_inline __u64 *net_other_at(void)
{
	struct qc_cpu *c = qc_cpu_get();
	if (!c)
		return NULL;
	barrier_var(c);
	return &c->net_other;
}

static __always_inline struct qc_queue_stats *qc_queue(__u8 dir, __u32 queue)
{
	if (queue >= MAX_QUEUES) {
		qc_count(QC_QUEUE_CLAMPED);
		queue = MAX_QUEUES - 1;
	}
	__u32 idx = bpf_get_smp_processor_id() * (2 * MAX_QUEUES) + (__u32)dir * MAX_QUEUES + queue;
	return bpf_map_lookup_elem(&qc_queues, &idx);
}

/* Is this skb, d bytes long, one of the flow samples? The draw comes from a
 * per-CPU splitmix64 sequence, not bpf_get_prandom_u32: the helper cost about
 * 60 ns per skb on a 2-vCPU VM (half of the UDP counting program), and the
 * estimate needs draws that are uniform and blind to the packet, not secret.
 * Each load starts its sequences at a random draw_seed: from one fixed start,
 * every recording of a steady flow would draw the same samples and share one
 * error, which recording after recording would then repeat, not average out. */
static __always_inline bool flow_sampled(struct qc_cpu *c, __u32 d, __u32 fb)
{
	if (!fb)
		return false;
	if (d >= fb)
		return true;
	if (!c)
		return false;
	if (!c->draw)
		c->draw = (draw_seed ^ (((__u64)bpf_get_smp_processor_id() + 1) << 40)) | 1;
	__u64 x = c->draw + 0x9E3779B97F4A7C15ULL;
	c->draw = x;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	x ^= x >> 31;
	return (x >> 32) * fb < ((__u64)d << 32);
}

/* Sums no flow entry could take: into the queue's overflow bucket (no
 * QC_QUEUE_CLAMPED count: the skbs were counted when they came). */
static __always_inline void flow_overflow(__u8 dir, const struct qc_flow_stats *d)
{
	__u32 queue = d->queue < MAX_QUEUES ? d->queue : MAX_QUEUES - 1;
	__u32 idx = bpf_get_smp_processor_id() * (2 * MAX_QUEUES) + (__u32)(dir & 1) * MAX_QUEUES + queue;
	struct qc_queue_stats *qs = bpf_map_lookup_elem(&qc_queues, &idx);
	if (!qs)
		return;
	qs->flow_overflow_x256 += d->packets_x256;
	qs->flow_overflow_bytes += d->bytes;
}

/* Adds a flow's sums to its entry in one flow table (this CPU's copy); false
 * when the table has no room for a new entry. */
static __always_inline bool flow_table_add_in(void *table, const struct pl_flow_key *k, const struct qc_flow_stats *d)
{
	struct qc_flow_stats *f = bpf_map_lookup_elem(table, k);
	if (!f) {
		long err = bpf_map_update_elem(table, k, d, BPF_NOEXIST);
		if (!err) {
			qc_count(QC_FLOW_INSERTS);
			return true;
		}
		/* -EEXIST: another CPU entered the flow since the lookup; its
		 * entry takes this CPU's sums too. Anything else: no room. */
		if (err != -17)
			return false;
		f = bpf_map_lookup_elem(table, k);
		if (!f)
			return false;
	}
	/* This CPU's own copy of the entry: plain adds suffice. Another CPU's
	 * update created it and zeroed this copy, so its first is ours to set. */
	f->samples += d->samples;
	f->packets_x256 += d->packets_x256;
	f->bytes += d->bytes;
	f->payload_x256 += d->payload_x256;
	f->bytes_var += d->bytes_var;
	if (!f->first_ns)
		f->first_ns = d->first_ns;
	if (d->last_ns >= f->last_ns) {
		f->last_ns = d->last_ns;
		f->queue = d->queue;
	}
	return true;
}

/* Adds a flow's sums to the current flow table, else to the overflow bucket.
 * Called only while the slot being emptied has an odd seq: userspace, after
 * flipping flow_gen, waits for every slot odd then to move on before it
 * drains the table flow_gen named before (see read_flows). */
static __always_inline void flow_table_add(const struct pl_flow_key *k, const struct qc_flow_stats *d)
{
	bool ok = (flow_gen & 1) ? flow_table_add_in(&qc_flows1, k, d) : flow_table_add_in(&qc_flows0, k, d);
	if (!ok)
		flow_overflow(k->dir, d);
}

/* Which of a CPU's slots a flow takes: a multiplicative hash of its key. */
static __always_inline __u32 flow_slot_of(const struct pl_flow_key *k)
{
	const __u64 *x = (const __u64 *)k;
	__u64 h = (x[0] ^ (x[1] * 31) ^ x[2] ^ (x[3] * 31) ^ x[4]) * 0x9E3779B97F4A7C15ULL;
	return (__u32)(h >> 32) & (QC_FLOW_SLOTS - 1);
}

/* A sampled skb of d bytes (as the sampling decision saw it): segs wire
 * frames, wire frame bytes, payload L4 bytes, each divided by the skb's
 * sampling probability. */
static __always_inline void flow_add(struct pl_flow_key *k, __u32 queue, __u32 d, __u32 fb, __u32 segs, __u64 wire,
				     __u64 payload)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pkts = (__u64)segs << 8, pay = payload << 8, bytes = wire, var = 0;
	if (d && d < fb) {
		pkts = pkts * fb / d;
		pay = pay * fb / d;
		bytes = wire * fb / d;
		/* wire^2 (1 - p) / p^2 with p = d / fb */
		var = bytes * bytes - bytes * wire;
	}
	k->qslot = queue < 255 ? queue : 255;
	__u32 idx = (bpf_get_smp_processor_id() * 2 + (k->dir & 1)) * QC_FLOW_SLOTS + flow_slot_of(k);
	struct qc_flow_slot *s = bpf_map_lookup_elem(&qc_flow_cache, &idx);
	if (s && s->stats.samples && flow_key_eq(&s->key, k)) {
		s->stats.samples += 1;
		s->stats.packets_x256 += pkts;
		s->stats.bytes += bytes;
		s->stats.payload_x256 += pay;
		s->stats.bytes_var += var;
		s->stats.last_ns = now;
		s->stats.queue = queue;
		return;
	}
	struct qc_flow_stats init = {
		.samples = 1, .packets_x256 = pkts, .bytes = bytes, .payload_x256 = pay,
		.bytes_var = var, .first_ns = now, .last_ns = now, .queue = queue,
	};
	if (!s) {
		/* Not for a CPU the cache is sized to: counted, never in a table
		 * (a table is only written inside a slot's odd seq). */
		flow_overflow(k->dir, &init);
		return;
	}
	/* The slot changes flows: seq odd around it, so a reader that saw the
	 * slot (or the table) mid-change reads again, and a drain waits for it.
	 * A locked add on x86 is also a full barrier, which orders the stores
	 * between the two, and the seq's store before the flow_gen load. */
	__sync_fetch_and_add(&s->seq, 1);
	if (s->stats.samples)
		flow_table_add(&s->key, &s->stats);
	s->key = *k;
	s->stats = init;
	__sync_fetch_and_add(&s->seq, 1);
}

/* Which RX queue a NAPI instance serves: written when a frame names a new one. */
static __always_inline void learn_napi(struct qc_cpu *c, __u32 napi_id, __u32 queue)
{
	if (!c)
		return;
	/* One CPU can alternate between queues packet by packet: the slot is
	 * looked at only for an instance this CPU has not written lately (the
	 * slot is shared by every CPU, and under load a read of it misses the
	 * cache), and written only when it names another instance or queue. */
	if (napi_id && (c->napi_id != napi_id || c->queue != queue)) {
		__u32 i = napi_id & (QC_NAPI_KNOWN - 1);
		if (c->known[i].napi_id != napi_id || c->known[i].queue != queue) {
			struct qc_napi_slot *s = napi_slot(napi_id);
			if (s && (s->napi_id != napi_id || s->queue != queue)) {
				s->napi_id = napi_id;
				s->queue = queue;
			}
			c->known[i].napi_id = napi_id;
			c->known[i].queue = queue;
		}
	}
	c->napi_id = napi_id;
	c->queue = queue;
	c->seen = 1;
}

static __always_inline void add_queue(struct qc_queue_stats *qs, __u32 segs, __u64 wire)
{
	if (!qs)
		return;
	qs->packets += segs;
	qs->bytes += wire;
	qs->skbs += 1;
}

/* ---- RX on tcx: this device's frames only, after GRO --------------------- */

/* tcx runs with the link-layer header pushed: skb->len is the frame. A GRO
 * skb holds gso_segs frames whose headers it carries once. Continues the
 * chain (TCX_NEXT) and runs first (attached before any other program), so it
 * sees every frame the stack takes and changes none. */
SEC("tcx/ingress")
int qc_rx_tc(struct __sk_buff *skb)
{
	qc_count(QC_RUNS);
	__u32 qm = skb->queue_mapping;
	__u32 queue = qm >= rx_queue_offset ? qm - rx_queue_offset : 0;
	__u32 segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	__u32 len = skb->len;
	struct qc_cpu *c = qc_cpu_get();
	learn_napi(c, skb->napi_id, queue);
	__u32 thr = flow_threshold(flow_bytes, PL_RX);
	bool sample = flow_sampled(c, len, thr);
	__u64 wire = len;
	struct pl_flow_key k = {};
	__u32 hdr = 0;
	bool have_flow = false;
	if ((segs > 1 || sample) && len > link_hdr_len) {
		/* Constant sizes for the verifier: all of FLOW_HDR_BYTES, or the 40
		 * bytes that hold an option-less IPv4 header and its ports and TCP
		 * data offset (a bare ACK is 40 to 52 bytes of L3), or for a datagram
		 * shorter than that, FLOW_MIN_BYTES. Read straight from the linear
		 * data where they lie in it: a GRO skb's linear part is often its
		 * headers alone (66 bytes for TCP with timestamps), and the helper's
		 * read past it walks into the first frag's page, which costs a TCP
		 * GRO skb hundreds of ns. */
		__u8 b[FLOW_HDR_BYTES] = {};
		const __u8 *pkt = (const __u8 *)(long)skb->data;
		const __u8 *end = (const __u8 *)(long)skb->data_end;
		__u32 n = len - link_hdr_len;
		__u32 got = 0;
		if (pkt + link_hdr_len + FLOW_HDR_BYTES <= end) {
			__builtin_memcpy(b, pkt + link_hdr_len, FLOW_HDR_BYTES);
			got = FLOW_HDR_BYTES;
		} else if (pkt + link_hdr_len + 40 <= end) {
			__builtin_memcpy(b, pkt + link_hdr_len, 40);
			got = 40;
		}
		/* Past the linear data only when the headers need more than it
		 * gave: 40 bytes hold what an option-less IPv4 header (0x45) is
		 * parsed from, not an IPv6 header's ports or IPv4 options. */
		if (got < FLOW_HDR_BYTES && !(got == 40 && b[0] == 0x45)) {
			int err = n >= FLOW_HDR_BYTES ? bpf_skb_load_bytes(skb, link_hdr_len, b, FLOW_HDR_BYTES)
				  : n >= 40	       ? bpf_skb_load_bytes(skb, link_hdr_len, b, 40)
				  : n >= FLOW_MIN_BYTES ? bpf_skb_load_bytes(skb, link_hdr_len, b, FLOW_MIN_BYTES)
							: -1;
			got = err ? 0 : n >= FLOW_HDR_BYTES ? FLOW_HDR_BYTES : n >= 40 ? 40 : FLOW_MIN_BYTES;
		}
		have_flow = parse_flow(b, got, bpf_ntohs(skb->protocol), &k, &hdr);
	}
	if (segs > 1 && have_flow)
		wire += (__u64)(segs - 1) * (link_hdr_len + hdr);
	struct qc_queue_stats *qs = qc_queue(PL_RX, queue);
	add_queue(qs, segs, wire);
	if (sample) {
		if (have_flow) {
			k.dir = PL_RX;
			__u32 l3 = len - link_hdr_len;
			flow_add(&k, queue, len, thr, segs, wire, l3 > hdr ? l3 - hdr : 0);
		} else if (qs) {
			qs->flow_unparsed += segs;
		}
	}
	return TCX_NEXT;
}

/* ---- tracepoint hooks, as tp_btf (typed loads) and raw_tp (probe reads) -- */

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#define H(name) CAT(name, _btf)
#define RD(p, f) ((p)->f)
#include "qcount.hooks.h"
#undef H
#undef RD

#define H(name) CAT(name, _raw)
#define RD(p, f) BPF_CORE_READ(p, f)
#include "qcount.hooks.h"
#undef H
#undef RD

#define QCOUNT_HOOKS(FL, PFX)                                                                         \
	SEC(PFX "napi_gro_receive_entry")                                                             \
	int BPF_PROG(qc_rx_gro##FL, const struct sk_buff *skb) { qc_count(QC_RUNS); return qc_rx_handup##FL(skb); }      \
	SEC(PFX "napi_gro_frags_entry")                                                               \
	int BPF_PROG(qc_rx_frags##FL, const struct sk_buff *skb) { qc_count(QC_RUNS); return qc_rx_handup##FL(skb); }    \
	SEC(PFX "netif_receive_skb_entry")                                                            \
	int BPF_PROG(qc_rx_nrs##FL, const struct sk_buff *skb) { qc_count(QC_RUNS); return qc_rx_handup##FL(skb); }      \
	SEC(PFX "netif_receive_skb_list_entry")                                                       \
	int BPF_PROG(qc_rx_list##FL, const struct sk_buff *skb) { qc_count(QC_RUNS); return qc_rx_handup##FL(skb); }     \
	SEC(PFX "netif_rx_entry")                                                                     \
	int BPF_PROG(qc_rx_nrx##FL, const struct sk_buff *skb) { qc_count(QC_RUNS); return qc_rx_handup##FL(skb); }      \
	SEC(PFX "net_dev_start_xmit")                                                                 \
	int BPF_PROG(qc_tx##FL, const struct sk_buff *skb, const struct net_device *dev)              \
	{ qc_count(QC_RUNS); return qc_tx_xmit##FL(skb, dev); }                                                          \
	SEC(PFX "napi_poll")                                                                          \
	int BPF_PROG(qc_napi##FL, struct napi_struct *napi, int work, int budget)                     \
	{ qc_count(QC_RUNS); return qc_napi_poll##FL(napi, work, budget); }                                              \
	SEC(PFX "kfree_skb")                                                                          \
	int BPF_PROG(qc_drop##FL, struct sk_buff *skb, void *loc, int reason)                         \
	{ qc_count(QC_RUNS); return qc_kfree##FL(skb, (__u32)reason); }

QCOUNT_HOOKS(_btf, "tp_btf/")
QCOUNT_HOOKS(_raw, "raw_tp/")

/* Anchors the enums userspace needs in BTF, so libbpf-cargo generates them. */
enum qc_counter qc_counter_anchor = QC_QUEUE_CLAMPED;
enum ddio_limits ddio_limits_anchor = DDIO_MAX_QUEUES;
enum qc_rx_source qc_rx_source_anchor = QC_RX_TCX;
enum qc_napi_slots qc_napi_slots_anchor = QC_NAPI_SLOTS;
enum qc_flow_cache_slots qc_flow_cache_slots_anchor = QC_FLOW_SLOTS;
enum qc_flow_table_entries qc_flow_table_entries_anchor = QC_FLOW_ENTRIES;
