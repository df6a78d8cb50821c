//! Scratch: attach tier 0 alone for a duration and print its counts (measurement aid).
use ddioscope::probe::qcount::{QcountConfig, QcountProbe, RxChoice};
fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let (iface, ns, secs, flow_every, rx) = (&a[1], &a[2], a[3].parse::<f64>()?, a[4].parse::<u32>()?, a.get(5).map(String::as_str).unwrap_or("auto"));
    if std::env::var_os("BPFLOG").is_none() { libbpf_rs::set_print(None); }
    let info = ddioscope::topology::resolve_iface_live(iface, Some(ns))?;
    let features = ddioscope::probe::features::Features::detect();
    let cfg = QcountConfig {
        ifindex: info.ifindex,
        netns_inode: info.netns_inode,
        netns_path: Some(std::path::Path::new("/run/netns").join(ns)),
        rx_queue_offset: ddioscope::probe::pktlife::rx_queue_offset_for_driver(info.driver.as_deref()),
        link_hdr_len: 14,
        flow_every,
        rx: match rx { "tcx" => RxChoice::Tcx, "handup" => RxChoice::Handup, _ => RxChoice::Auto },
    };
    let p = QcountProbe::attach(&cfg, &features, Default::default())?;
    println!("{{\"event\":\"attached\",\"rx\":\"{}\",\"prog_ids\":{:?}}}", p.rx_source.as_str(), p.prog_ids());
    std::thread::sleep(std::time::Duration::from_secs_f64(secs));
    for (d, q, c) in p.read_queues()? {
        println!("{d:?} q{q}: {c:?}");
    }
    for f in p.read_flows()? {
        println!("flow {:?} q{} samples {} pkts {} bytes {} est_bytes {}", f.key, f.queue, f.samples, f.packets, f.bytes, f.bytes * flow_every.max(1) as u64);
    }
    Ok(())
}
