//! The kernel tracepoints the BPF programs hook, named once on the Rust side. The C names
//! them in its `SEC("tp_btf/…")` and `SEC("raw_tp/…")` lines; the tests below hold every
//! table here to the program sections of the built objects, so a hook renamed, added or
//! dropped on one side fails the build's tests rather than a recording.

pub const NAPI_GRO_RECEIVE_ENTRY: &str = "napi_gro_receive_entry";
pub const NAPI_GRO_FRAGS_ENTRY: &str = "napi_gro_frags_entry";
pub const NAPI_GRO_RECEIVE_EXIT: &str = "napi_gro_receive_exit";
pub const NETIF_RECEIVE_SKB_ENTRY: &str = "netif_receive_skb_entry";
pub const NETIF_RECEIVE_SKB_LIST_ENTRY: &str = "netif_receive_skb_list_entry";
pub const NETIF_RX_ENTRY: &str = "netif_rx_entry";
pub const NETIF_RECEIVE_SKB: &str = "netif_receive_skb";
pub const NAPI_POLL: &str = "napi_poll";
pub const SKB_COPY_DATAGRAM_IOVEC: &str = "skb_copy_datagram_iovec";
pub const CONSUME_SKB: &str = "consume_skb";
pub const KFREE_SKB: &str = "kfree_skb";
pub const NET_DEV_QUEUE: &str = "net_dev_queue";
pub const NET_DEV_START_XMIT: &str = "net_dev_start_xmit";
pub const NET_DEV_XMIT: &str = "net_dev_xmit";

/// Where a driver hands a received frame up to the stack: one or two of these per driver.
pub const HANDUP: [&str; 5] = [
    NAPI_GRO_RECEIVE_ENTRY,
    NAPI_GRO_FRAGS_ENTRY,
    NETIF_RECEIVE_SKB_ENTRY,
    NETIF_RECEIVE_SKB_LIST_ENTRY,
    NETIF_RX_ENTRY,
];

/// Every hook of pktlife.bpf.c (each as tp_btf and as raw_tp), in its order.
pub const PKTLIFE: [&str; 14] = [
    NAPI_GRO_RECEIVE_ENTRY,
    NAPI_GRO_FRAGS_ENTRY,
    NAPI_GRO_RECEIVE_EXIT,
    NETIF_RECEIVE_SKB_ENTRY,
    NETIF_RECEIVE_SKB_LIST_ENTRY,
    NETIF_RX_ENTRY,
    NETIF_RECEIVE_SKB,
    NAPI_POLL,
    SKB_COPY_DATAGRAM_IOVEC,
    CONSUME_SKB,
    KFREE_SKB,
    NET_DEV_QUEUE,
    NET_DEV_START_XMIT,
    NET_DEV_XMIT,
];

/// pktlife's hooks that start a packet's life (the hand-ups and the TX enqueue).
pub const PKTLIFE_START: [&str; 6] = [
    NAPI_GRO_RECEIVE_ENTRY,
    NAPI_GRO_FRAGS_ENTRY,
    NETIF_RECEIVE_SKB_ENTRY,
    NETIF_RECEIVE_SKB_LIST_ENTRY,
    NETIF_RX_ENTRY,
    NET_DEV_QUEUE,
];

/// pktlife's hooks that end a life that has reached its socket.
pub const PKTLIFE_END: [&str; 3] = [SKB_COPY_DATAGRAM_IOVEC, CONSUME_SKB, KFREE_SKB];

/// Every tracepoint hook of qcount.bpf.c (tier 0; each as tp_btf and as raw_tp): the
/// hand-ups and the TX start count, the NAPI poll and the drop are always on.
pub const QCOUNT: [&str; 8] = [
    NAPI_GRO_RECEIVE_ENTRY,
    NAPI_GRO_FRAGS_ENTRY,
    NETIF_RECEIVE_SKB_ENTRY,
    NETIF_RECEIVE_SKB_LIST_ENTRY,
    NETIF_RX_ENTRY,
    NET_DEV_START_XMIT,
    NAPI_POLL,
    KFREE_SKB,
];

/// qcount's hooks attached whatever the count sources: NAPI polls and drops.
pub const QCOUNT_ALWAYS: [&str; 2] = [NAPI_POLL, KFREE_SKB];

/// The bench's floor programs (floor.bpf.c): the hot hooks of pktlife.
pub const FLOOR: [&str; 10] = [
    NAPI_GRO_RECEIVE_ENTRY,
    NAPI_GRO_RECEIVE_EXIT,
    NETIF_RECEIVE_SKB,
    SKB_COPY_DATAGRAM_IOVEC,
    CONSUME_SKB,
    KFREE_SKB,
    NET_DEV_QUEUE,
    NET_DEV_START_XMIT,
    NET_DEV_XMIT,
    NAPI_POLL,
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::mem::MaybeUninit;

    use libbpf_rs::skel::{OpenSkel, SkelBuilder};

    use super::*;

    /// Each program's section in an opened object (opening parses the ELF the skeleton
    /// embeds: no kernel, no privilege).
    fn sections(obj: &libbpf_rs::OpenObject) -> Vec<String> {
        obj.progs()
            .map(|p| p.section().to_string_lossy().into_owned())
            .collect()
    }

    /// The tracepoints of `prefix` ("tp_btf" or "raw_tp") among `sections`.
    fn hooked(sections: &[String], prefix: &str) -> BTreeSet<String> {
        sections
            .iter()
            .filter_map(|s| s.split_once('/'))
            .filter(|(p, _)| *p == prefix)
            .map(|(_, tp)| tp.to_string())
            .collect()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        let s: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
        assert_eq!(s.len(), names.len(), "a name twice in {names:?}");
        s
    }

    /// A family's tracepoints: the same set as tp_btf and as raw_tp, and nothing else but
    /// the `others` sections.
    fn check_family(name: &str, sections: &[String], table: &[&str], others: &[&str]) {
        let want = set(table);
        assert_eq!(hooked(sections, "tp_btf"), want, "{name}'s tp_btf sections");
        assert_eq!(hooked(sections, "raw_tp"), want, "{name}'s raw_tp sections");
        let rest: BTreeSet<&str> = sections
            .iter()
            .map(String::as_str)
            .filter(|s| !s.starts_with("tp_btf/") && !s.starts_with("raw_tp/"))
            .collect();
        assert_eq!(
            rest,
            others.iter().copied().collect(),
            "{name}'s other sections"
        );
        // One program per hook and flavour.
        assert_eq!(
            sections.len(),
            2 * table.len() + others.len(),
            "{name}: {sections:?}"
        );
    }

    #[test]
    fn the_tables_name_the_objects_program_sections() {
        let mut storage = MaybeUninit::uninit();
        let open = crate::probe::skel::PktlifeSkelBuilder::default()
            .open(&mut storage)
            .expect("opening the pktlife object");
        check_family("pktlife", &sections(open.open_object()), &PKTLIFE, &[]);

        let mut storage = MaybeUninit::uninit();
        let open = crate::probe::qcount_skel::QcountSkelBuilder::default()
            .open(&mut storage)
            .expect("opening the qcount object");
        check_family(
            "qcount",
            &sections(open.open_object()),
            &QCOUNT,
            &["tcx/ingress"],
        );
    }

    #[test]
    fn the_floor_programs_hook_the_tables_tracepoints() {
        let mut storage = MaybeUninit::uninit();
        let open = crate::probe::floor_skel::FloorSkelBuilder::default()
            .open(&mut storage)
            .expect("opening the floor object");
        let secs = sections(open.open_object());
        // An empty and a device-reading program per hook (napi_poll and the GRO exit have no
        // skb to read): the sets, not the count, are the contract.
        assert_eq!(hooked(&secs, "tp_btf"), set(&FLOOR));
        assert_eq!(hooked(&secs, "raw_tp"), set(&FLOOR));
    }

    #[test]
    fn the_subsets_are_subsets_of_their_family() {
        let pktlife = set(&PKTLIFE);
        let qcount = set(&QCOUNT);
        for (what, names, family) in [
            ("HANDUP in PKTLIFE", &HANDUP[..], &pktlife),
            ("HANDUP in QCOUNT", &HANDUP[..], &qcount),
            ("PKTLIFE_START", &PKTLIFE_START[..], &pktlife),
            ("PKTLIFE_END", &PKTLIFE_END[..], &pktlife),
            ("QCOUNT_ALWAYS", &QCOUNT_ALWAYS[..], &qcount),
            ("FLOOR", &FLOOR[..], &pktlife),
        ] {
            assert!(set(names).is_subset(family), "{what}");
        }
        // The pktlife hook table the features and the loader walk is this one, in order.
        let described: Vec<&str> = crate::probe::features::PKTLIFE_HOOKS
            .iter()
            .map(|h| h.tracepoint)
            .collect();
        assert_eq!(described, PKTLIFE);
    }
}
