//! `ddioscope doctor --bundle FILE.tar.gz`: everything needed to reproduce a real host's view in
//! a bug report, and the loader that replays such a bundle as a test fixture. A bundle holds
//! doctor's JSON, the PMU sysfs tree (type, format/*, cpumask, events/* of the uncore and core
//! PMUs, and the IIO boxes' dieN root-bus files), the CPU's identification and cache topology,
//! `ethtool -i/-g/-l/-S` of the interface, a 10-s recording with counters (packet addresses
//! zeroed) and the `perf stat` capture scripts/capture-counters.sh makes, with a manifest of
//! what was collected and what was not, and why.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The directory every member of a bundle sits under.
pub const TOP: &str = "ddioscope-bundle";
/// How long the bundled recording and perf capture run.
pub const RECORD_SECONDS: u32 = 10;

/// The files of a PMU directory a bundle keeps: what ddioscope reads to build its config
/// words and to place the NIC on an IIO stack.
fn pmu_file_kept(rel: &Path) -> bool {
    let mut c = rel.components().map(|c| c.as_os_str().to_string_lossy());
    match (c.next().as_deref(), c.next(), c.next()) {
        (Some("type" | "cpumask"), None, _) => true,
        (Some(d), None, _) => d
            .strip_prefix("die")
            .is_some_and(|n| n.parse::<u32>().is_ok()),
        (Some("format" | "events"), Some(_), None) => true,
        _ => false,
    }
}

/// The PMUs a bundle keeps: every uncore box and the core PMU(s), no software or tracepoint ones.
pub fn pmu_kept(name: &str) -> bool {
    name.starts_with("uncore_") || matches!(name, "cpu" | "cpu_core" | "cpu_atom")
}

/// The per-CPU topology and cache files kept (relative to a cpuN directory).
const CPU_FILES: &[&str] = &[
    "topology/physical_package_id",
    "topology/die_id",
    "topology/core_id",
];
const CACHE_FILES: &[&str] = &[
    "level",
    "type",
    "size",
    "ways_of_associativity",
    "coherency_line_size",
    "number_of_sets",
    "shared_cpu_list",
];

/// What went into a bundle and what did not.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Manifest {
    pub ddioscope_version: String,
    pub iface: String,
    pub netns: Option<String>,
    /// (item, file or files in the bundle) of what was collected.
    pub collected: Vec<(String, String)>,
    /// (item, why not) of what was not.
    pub missing: Vec<(String, String)>,
}

impl Manifest {
    fn got(&mut self, what: &str, file: impl Into<String>) {
        self.collected.push((what.into(), file.into()));
    }
    fn miss(&mut self, what: &str, why: impl Into<String>) {
        self.missing.push((what.into(), why.into()));
    }

    /// What `doctor --bundle` prints.
    pub fn lines(&self) -> Vec<String> {
        let mut l: Vec<String> = self
            .collected
            .iter()
            .map(|(w, f)| format!("collected {w}: {f}"))
            .collect();
        l.extend(
            self.missing
                .iter()
                .map(|(w, why)| format!("not collected {w}: {why}")),
        );
        l
    }
}

/// Copies the kept files of every kept PMU under `sys_root` into `dest` (same layout); the
/// number of files copied.
pub fn collect_pmus(sys_root: &Path, dest: &Path) -> Result<usize> {
    let rel = Path::new("bus/event_source/devices");
    let Ok(rd) = std::fs::read_dir(sys_root.join(rel)) else {
        return Ok(0);
    };
    let mut n = 0;
    let mut names: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| pmu_kept(n))
        .collect();
    names.sort();
    for name in names {
        let src = sys_root.join(rel).join(&name);
        let mut stack = vec![PathBuf::new()];
        while let Some(sub) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(src.join(&sub)) else {
                continue;
            };
            for e in rd.flatten() {
                let r = sub.join(e.file_name());
                // format/ and events/ are real directories; the PMU's other links (device,
                // subsystem, power) lead out of the tree and are not followed.
                let ft = e.file_type()?;
                if ft.is_dir() && sub.as_os_str().is_empty() {
                    let d = r.to_string_lossy();
                    if d == "format" || d == "events" {
                        stack.push(r);
                    }
                    continue;
                }
                if !ft.is_file() || !pmu_file_kept(&r) {
                    continue;
                }
                // Some event files cannot be read (perf's write-only ones): left out.
                let Ok(text) = std::fs::read(src.join(&r)) else {
                    continue;
                };
                let out = dest.join(rel).join(&name).join(&r);
                write_file(&out, &text)?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Copies the CPU topology and cache files under `sys_root` into `dest` (same layout); the
/// number of CPUs.
pub fn collect_cpu_topology(sys_root: &Path, dest: &Path) -> Result<usize> {
    let rel = Path::new("devices/system/cpu");
    let base = sys_root.join(rel);
    for f in ["online", "possible", "present"] {
        if let Ok(t) = std::fs::read(base.join(f)) {
            write_file(&dest.join(rel).join(f), &t)?;
        }
    }
    let Ok(rd) = std::fs::read_dir(&base) else {
        return Ok(0);
    };
    let mut cpus = 0;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name
            .strip_prefix("cpu")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        cpus += 1;
        for f in CPU_FILES {
            if let Ok(t) = std::fs::read(base.join(&name).join(f)) {
                write_file(&dest.join(rel).join(&name).join(f), &t)?;
            }
        }
        let Ok(idx) = std::fs::read_dir(base.join(&name).join("cache")) else {
            continue;
        };
        for i in idx.flatten() {
            let iname = i.file_name().to_string_lossy().into_owned();
            if !iname.starts_with("index") {
                continue;
            }
            for f in CACHE_FILES {
                if let Ok(t) = std::fs::read(i.path().join(f)) {
                    write_file(
                        &dest
                            .join(rel)
                            .join(&name)
                            .join("cache")
                            .join(&iname)
                            .join(f),
                        &t,
                    )?;
                }
            }
        }
    }
    Ok(cpus)
}

/// The first processor's stanza of /proc/cpuinfo: vendor, family, model, stepping, name,
/// microcode and flags (the others repeat it).
pub fn first_cpuinfo_stanza(cpuinfo: &str) -> String {
    let mut out: String = cpuinfo
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    if out.is_empty() {
        out.push('\n');
    }
    out
}

fn write_file(path: &Path, data: &[u8]) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))
}

/// A command's first line of error output, or its exit status, in words.
fn failed_words(o: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    err.lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| format!("exited with {}", o.status))
}

/// Runs a command, inside the named network namespace when there is one.
fn in_netns(
    netns: Option<&str>,
    prog: &str,
    args: &[&str],
) -> std::io::Result<std::process::Output> {
    match netns {
        Some(ns) => Command::new("ip")
            .args(["netns", "exec", ns, prog])
            .args(args)
            .output(),
        None => Command::new(prog).args(args).output(),
    }
}

fn which(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// Zeroes what a report does not show of a recording: the sampled packets' kernel buffer and
/// skb addresses (flows and queues stay, as a report shows them).
pub fn scrub_recording(path: &Path) -> Result<()> {
    let conn =
        rusqlite::Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
    conn.execute_batch("UPDATE samples SET skb_addr = 0, data_addr = 0; VACUUM;")
        .with_context(|| format!("scrubbing {}", path.display()))?;
    Ok(())
}

/// What `doctor --bundle` is asked for.
pub struct BundleArgs<'a> {
    pub out: &'a Path,
    pub iface: &'a str,
    pub netns: Option<&'a str>,
    /// doctor's report, as `doctor --json` prints it.
    pub doctor_json: String,
}

/// Makes the bundle; its manifest (also inside it).
pub fn make(a: &BundleArgs) -> Result<Manifest> {
    if std::fs::symlink_metadata(a.out).is_ok() {
        bail!(
            "{} already exists; remove it or give another name",
            a.out.display()
        );
    }
    crate::outfile::check(a.out, false)?;
    let name = a.out.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !name.ends_with(".tar.gz") && !name.ends_with(".tgz") {
        bail!(
            "{}: a bundle is a .tar.gz file; give a name ending in .tar.gz",
            a.out.display()
        );
    }
    let stage = std::env::temp_dir().join(format!("ddioscope-bundle.{}", std::process::id()));
    if stage.exists() {
        std::fs::remove_dir_all(&stage).ok();
    }
    let top = stage.join(TOP);
    std::fs::create_dir_all(&top).with_context(|| format!("creating {}", top.display()))?;
    let r = collect(a, &top).and_then(|m| {
        write_tar(&stage, a.out)?;
        Ok(m)
    });
    std::fs::remove_dir_all(&stage).ok();
    r
}

fn collect(a: &BundleArgs, top: &Path) -> Result<Manifest> {
    let mut m = Manifest {
        ddioscope_version: env!("CARGO_PKG_VERSION").into(),
        iface: a.iface.into(),
        netns: a.netns.map(str::to_string),
        ..Default::default()
    };
    write_file(&top.join("doctor.json"), a.doctor_json.as_bytes())?;
    m.got("doctor's report", "doctor.json");

    let sys = Path::new("/sys");
    let n = collect_pmus(sys, &top.join("sysfs"))?;
    if n > 0 {
        m.got(
            "PMU sysfs tree (uncore and core PMUs: type, cpumask, format/*, events/*, IIO dieN)",
            format!("sysfs/bus/event_source/devices ({n} files)"),
        );
    } else {
        m.miss(
            "PMU sysfs tree",
            "this host registers no uncore or core PMU with perf",
        );
    }
    let cpus = collect_cpu_topology(sys, &top.join("sysfs"))?;
    m.got(
        "CPU topology and caches",
        format!("sysfs/devices/system/cpu ({cpus} CPUs)"),
    );
    match std::fs::read_to_string("/proc/cpuinfo") {
        Ok(t) => {
            write_file(
                &top.join("cpuinfo.txt"),
                first_cpuinfo_stanza(&t).as_bytes(),
            )?;
            m.got(
                "CPU identification",
                "cpuinfo.txt (the first processor's stanza)",
            );
        }
        Err(e) => m.miss("CPU identification", format!("/proc/cpuinfo: {}", e.kind())),
    }

    if which("ethtool") {
        for flag in ["-i", "-g", "-l", "-S"] {
            let file = format!("ethtool{flag}.txt");
            match in_netns(a.netns, "ethtool", &[flag, a.iface]) {
                Ok(o) if o.status.success() => {
                    write_file(&top.join(&file), &o.stdout)?;
                    m.got(&format!("ethtool {flag}"), file);
                }
                Ok(o) => m.miss(&format!("ethtool {flag}"), failed_words(&o)),
                Err(e) => m.miss(&format!("ethtool {flag}"), e.kind().to_string()),
            }
        }
    } else {
        m.miss("ethtool -i/-g/-l/-S", "no ethtool on this host's PATH");
    }

    let rec = top.join("recording.ddio");
    let exe = std::env::current_exe().context("finding this program to record with")?;
    let secs = format!("{RECORD_SECONDS}s");
    let mut args = vec!["record", "-i", a.iface, "-d", &secs, "-o"];
    let rec_s = rec.to_string_lossy().into_owned();
    args.push(&rec_s);
    if let Some(ns) = a.netns {
        args.extend(["--netns", ns]);
    }
    let o = Command::new(&exe)
        .args(&args)
        .output()
        .context("starting the recording")?;
    if o.status.success() && rec.is_file() {
        scrub_recording(&rec)?;
        m.got(
            &format!("{RECORD_SECONDS}-s recording with counters (packet addresses zeroed)"),
            "recording.ddio",
        );
    } else {
        m.miss("recording", failed_words(&o));
    }

    perf_capture(top, &mut m)?;

    let json = serde_json::to_string_pretty(&m)? + "\n";
    write_file(&top.join("manifest.json"), json.as_bytes())?;
    Ok(m)
}

/// The `perf stat` capture scripts/capture-counters.sh makes, for as long as the recording ran
/// (after it: both at once would share, and multiplex, the same uncore counters).
fn perf_capture(top: &Path, m: &mut Manifest) -> Result<()> {
    use crate::counters::{platform, sysfs, EventSet};
    let what = "perf stat capture (scripts/capture-counters.sh)";
    let det = platform::detect_host();
    let Some(p) = det.platform() else {
        m.miss(
            what,
            format!("capture-counters.sh refuses this CPU: {}", det.describe()),
        );
        return Ok(());
    };
    if !which("perf") {
        m.miss(what, "perf not found (install linux-tools for this kernel)");
        return Ok(());
    }
    let inv = sysfs::discover(Path::new("/sys")).ok();
    let events = crate::counters::perf_stat_events(p, EventSet::Essential, inv.as_ref()).join(",");
    let out = top.join("perf-stat.csv");
    let mut f =
        std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
    // The platform line lets the importer resolve raw encodings without guessing.
    writeln!(f, "# ddioscope-platform: {}", p.as_str())?;
    drop(f);
    let secs = RECORD_SECONDS.to_string();
    let o = Command::new("perf")
        .args([
            "stat",
            "-a",
            "-I",
            "1000",
            "-x,",
            "--per-socket",
            "--append",
            "-o",
        ])
        .arg(&out)
        .args(["-e", &events, "--", "sleep", &secs])
        .output();
    match o {
        Ok(o) if o.status.success() => m.got(what, "perf-stat.csv"),
        Ok(o) => {
            std::fs::remove_file(&out).ok();
            m.miss(what, failed_words(&o));
        }
        Err(e) => {
            std::fs::remove_file(&out).ok();
            m.miss(what, e.kind().to_string());
        }
    }
    Ok(())
}

/// Writes `stage` (holding TOP/) as a gzip'd tar at `out`, through a temporary file renamed
/// over it once whole.
fn write_tar(stage: &Path, out: &Path) -> Result<()> {
    let (tmp, f) = crate::outfile::create_temp(out)?;
    let r = (|| -> Result<()> {
        let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
        let mut t = tar::Builder::new(gz);
        t.follow_symlinks(false);
        t.append_dir_all(TOP, stage.join(TOP))?;
        t.into_inner()?.finish()?.sync_all()?;
        Ok(())
    })();
    match r {
        Ok(()) => std::fs::rename(&tmp, out).map_err(|e| {
            std::fs::remove_file(&tmp).ok();
            anyhow::anyhow!(
                "cannot write {}: {}",
                out.display(),
                crate::outfile::io_words(&e, crate::outfile::parent_dir(out))
            )
        }),
        Err(e) => {
            std::fs::remove_file(&tmp).ok();
            Err(e.context(format!("writing {}", out.display())))
        }
    }
}

/// A bundle unpacked for replay: where its parts are.
#[derive(Debug)]
pub struct Replay {
    pub root: PathBuf,
    pub manifest: Manifest,
    /// The sysfs root to give `counters::sysfs::discover` and `read_topology`.
    pub sysfs: PathBuf,
    pub recording: Option<PathBuf>,
    pub perf_stat: Option<PathBuf>,
    pub cpuinfo: Option<String>,
    pub ethtool_stats: Option<String>,
}

/// Unpacks `bundle` into `dir` (which must be empty or absent) and names its parts. Members
/// outside TOP/ or with `..` are refused: a bundle comes from another host.
pub fn replay(bundle: &Path, dir: &Path) -> Result<Replay> {
    let f = std::fs::File::open(bundle).with_context(|| format!("opening {}", bundle.display()))?;
    let mut t = tar::Archive::new(flate2::read::GzDecoder::new(f));
    std::fs::create_dir_all(dir)?;
    for e in t
        .entries()
        .with_context(|| format!("{}: not a bundle", bundle.display()))?
    {
        let mut e = e.with_context(|| format!("{}: damaged", bundle.display()))?;
        let p = e.path()?.into_owned();
        if !p.starts_with(TOP)
            || p.components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            bail!(
                "{}: member {} is outside {TOP}/",
                bundle.display(),
                p.display()
            );
        }
        e.unpack_in(dir)?;
    }
    let root = dir.join(TOP);
    let manifest: Manifest = serde_json::from_str(
        &std::fs::read_to_string(root.join("manifest.json"))
            .with_context(|| format!("{}: no manifest.json", bundle.display()))?,
    )
    .with_context(|| format!("{}: manifest.json", bundle.display()))?;
    let some = |p: PathBuf| p.is_file().then_some(p);
    Ok(Replay {
        sysfs: root.join("sysfs"),
        recording: some(root.join("recording.ddio")),
        perf_stat: some(root.join("perf-stat.csv")),
        cpuinfo: std::fs::read_to_string(root.join("cpuinfo.txt")).ok(),
        ethtool_stats: std::fs::read_to_string(root.join("ethtool-S.txt")).ok(),
        manifest,
        root,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "ddioscope-bundle-test.{tag}.{}",
            std::process::id()
        ));
        std::fs::remove_dir_all(&d).ok();
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A fixture host's PMU tree (ICX), bundled and replayed, gives the same inventory; the
    /// software PMU and the CPU files outside the kept set are left out.
    #[test]
    fn a_pmu_tree_round_trips_through_a_bundle() {
        let host = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/sysfs/icx"
        ));
        let d = tmpdir("pmu");
        let stage = d.join("stage");
        let top = stage.join(TOP);
        let n = collect_pmus(host, &top.join("sysfs")).unwrap();
        assert!(n > 20, "{n}");
        collect_cpu_topology(host, &top.join("sysfs")).unwrap();
        let m = Manifest::default();
        write_file(
            &top.join("manifest.json"),
            serde_json::to_string(&m).unwrap().as_bytes(),
        )
        .unwrap();
        let out = d.join("b.tar.gz");
        write_tar(&stage, &out).unwrap();
        let r = replay(&out, &d.join("replay")).unwrap();
        let want = crate::counters::sysfs::discover(host).unwrap();
        let got = crate::counters::sysfs::discover(&r.sysfs).unwrap();
        let names = |i: &crate::counters::sysfs::Inventory| {
            i.pmus
                .iter()
                .map(|p| (p.name.clone(), p.type_, p.cpumask.clone(), p.stacks.len()))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&got), names(&want));
        assert!(!r.sysfs.join("bus/event_source/devices/software").exists());
        assert_eq!(
            crate::counters::sysfs::read_topology(&r.sysfs)
                .unwrap()
                .sockets(),
            crate::counters::sysfs::read_topology(host)
                .unwrap()
                .sockets()
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn scrubbing_zeroes_every_sampled_address() {
        let d = tmpdir("scrub");
        let p = d.join("r.ddio");
        {
            let c = rusqlite::Connection::open(&p).unwrap();
            c.execute_batch(crate::recording::SCHEMA).unwrap();
            c.execute_batch(
                "INSERT INTO samples VALUES (0,'rx',0,1,1514,-131941395333120,-131941395329024,1,2,3,4,5,0,0,'tcp','10.0.0.1',1,'10.0.0.2',2);
                 INSERT INTO samples VALUES (1,'rx',1,0,66,-131941395300000,-131941395200000,1,2,3,4,5,0,0,NULL,NULL,NULL,NULL,NULL);",
            )
            .unwrap();
        }
        scrub_recording(&p).unwrap();
        let c = rusqlite::Connection::open(&p).unwrap();
        let (n, nonzero, flows): (i64, i64, i64) = c
            .query_row(
                "SELECT COUNT(*), SUM(skb_addr != 0 OR data_addr != 0), COUNT(src) FROM samples",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        // The addresses go; the rows and their flows (which a report shows) stay.
        assert_eq!((n, nonzero, flows), (2, 0, 1));
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn only_the_kept_pmu_files() {
        for (p, kept) in [
            ("type", true),
            ("cpumask", true),
            ("die0", true),
            ("format/umask", true),
            ("events/clockticks", true),
            ("uevent", false),
            ("perf_event_mux_interval_ms", false),
            ("power/runtime_status", false),
            ("format/a/b", false),
            ("dieX", false),
        ] {
            assert_eq!(pmu_file_kept(Path::new(p)), kept, "{p}");
        }
        assert!(
            pmu_kept("uncore_iio_3")
                && pmu_kept("cpu")
                && !pmu_kept("software")
                && !pmu_kept("msr")
        );
    }

    #[test]
    fn a_member_outside_the_bundle_is_refused() {
        let d = tmpdir("evil");
        let out = d.join("evil.tar.gz");
        let f = std::fs::File::create(&out).unwrap();
        let mut t = tar::Builder::new(flate2::write::GzEncoder::new(
            f,
            flate2::Compression::default(),
        ));
        let data = b"x";
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        h.set_cksum();
        t.append_data(&mut h, "elsewhere/file", &data[..]).unwrap();
        t.into_inner().unwrap().finish().unwrap();
        let e = replay(&out, &d.join("r")).unwrap_err();
        assert!(
            format!("{e:#}").contains("outside ddioscope-bundle/"),
            "{e:#}"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    /// Every bundle in tests/fixtures/bundles (real hosts' and this project's own) replays: its
    /// PMU tree is what its doctor saw, its recording opens and summarises, its `ethtool -S`
    /// parses into ring-drop counters where the driver has them.
    #[test]
    fn every_fixture_bundle_replays() {
        let dir = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/bundles"
        ));
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if !p.to_string_lossy().ends_with(".tar.gz") {
                continue;
            }
            n += 1;
            let d = tmpdir(&format!("fixture{n}"));
            let r = replay(&p, &d).unwrap();
            let doctor: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(r.root.join("doctor.json")).unwrap())
                    .unwrap();
            let seen: Vec<String> = doctor["pmus"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|v| v.as_str())
                .filter(|n| pmu_kept(n))
                .map(str::to_string)
                .collect();
            let got: Vec<String> = crate::surfaces::doctor::list_pmus(&r.sysfs)
                .into_iter()
                .filter(|n| pmu_kept(n))
                .collect();
            assert_eq!(got, seen, "{}", p.display());
            crate::counters::sysfs::discover(&r.sysfs).unwrap();
            let rec = r.recording.as_ref().expect("a recording");
            let rec = crate::recording::Recording::open(rec).unwrap();
            let totals = rec.queue_totals().unwrap();
            assert!(totals.iter().any(|q| q.packets > 0), "{}", p.display());
            if let Some(s) = &r.ethtool_stats {
                let stats = crate::probe::kstats::parse_ethtool_s_text(s);
                assert!(!stats.is_empty(), "{}", p.display());
            }
            std::fs::remove_dir_all(&d).ok();
        }
        assert!(n >= 1, "no bundles in {}", dir.display());
    }
}
