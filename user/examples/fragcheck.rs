//! Test-only loader of tests/bpf/fragcheck.bpf.c (see tests/system/test_fragaddr.py).
//!
//!     fragcheck PORT SECONDS
//!
//! Resolves this host's page-to-address layout exactly as `ddioscope record`
//! does, loads the fragcheck program with it, prints `{"event":"ready",…}`
//! once attached, then one JSON line per frag record (the bytes read at the
//! frag's computed address, and one page further on), and a final
//! `{"event":"done",…}` after SECONDS or on SIGINT/SIGTERM. Exit 1 with one
//! line on stderr if anything cannot be set up.
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::RingBufferBuilder;

mod skel {
    #![allow(
        clippy::all,
        dead_code,
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        unused
    )]
    include!(concat!(env!("OUT_DIR"), "/fragcheck.skel.rs"));
}
use skel::types::fc_record;
use skel::FragcheckSkelBuilder;

// SAFETY: generated from the C struct: plain integers and byte arrays.
unsafe impl plain::Plain for fc_record {}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(port), Some(secs)) = (args.get(1), args.get(2)) else {
        bail!("usage: fragcheck PORT SECONDS");
    };
    let port: u16 = port.parse().context("PORT must be a TCP port number")?;
    let secs: f64 = secs.parse().context("SECONDS must be a number")?;
    let layout = ddioscope::probe::memlayout::resolve_live().map_err(anyhow::Error::msg)?;

    let mut storage = MaybeUninit::uninit();
    let mut open = FragcheckSkelBuilder::default()
        .open(&mut storage)
        .context("opening the fragcheck object")?;
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("fragcheck has no read-only config")?;
    ro.fc_port = port;
    ro.fc_page_offset = layout.page_offset;
    ro.fc_page_offset_addr = layout.page_offset_base_addr;
    ro.fc_vmemmap = layout.vmemmap;
    ro.fc_vmemmap_addr = layout.vmemmap_base_addr;
    ro.fc_max_pfn = layout.max_pfn;
    let mut skel = open.load().context("loading fragcheck")?;
    skel.attach().context("attaching fragcheck")?;

    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop))?;

    let mut records = 0u64;
    let mut builder = RingBufferBuilder::new();
    builder.add(&skel.maps.fc_events, |data: &[u8]| {
        let mut r = fc_record::default();
        if plain::copy_from_bytes(&mut r, data).is_ok() {
            records += 1;
            println!(
                "{}",
                serde_json::json!({"event": "frag", "seq": r.seq, "pos": r.pos, "frag": r.frag, "len": r.len,
                    "virt": format!("{:#x}", r.virt), "read_err": r.read_err, "ctl_err": r.ctl_err,
                    "bytes": hex(&r.bytes), "ctl": hex(&r.ctl)})
            );
        }
        0
    })?;
    let ring = builder.build()?;
    println!(
        "{}",
        serde_json::json!({"event": "ready", "port": port, "layout": layout.source,
            "page_offset": format!("{:#x}", layout.page_offset), "vmemmap": format!("{:#x}", layout.vmemmap),
            "max_pfn": layout.max_pfn})
    );
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        match ring.poll(Duration::from_millis(100)) {
            Ok(()) => {}
            Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => {}
            Err(e) => bail!("reading the ring buffer: {e}"),
        }
    }
    let _ = ring.consume();
    drop(ring);
    let bss = skel
        .maps
        .bss_data
        .as_deref()
        .context("fragcheck has no .bss")?;
    println!(
        "{}",
        serde_json::json!({"event": "done", "records": records, "segments": bss.fc_segments,
            "segments_with_frags": bss.fc_segments_with_frags, "unplaced": bss.fc_unplaced})
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("fragcheck: {e:#}");
        std::process::exit(1);
    }
}
