//! The project's per-platform uncore/core event table (typed data, Intel event names) and the kernel's
//! reference format layouts it is checked against.
//!
//! Encodings are expressed as sysfs format terms (`event`, `umask`, `ch_mask`, `filter_opc0`, ...), never as
//! raw config words: the live path turns terms into config words through the running kernel's `format/`
//! files, and `perf stat` accepts the same terms.

use serde::Serialize;

use super::platform::Platform;
use super::sysfs::PmuFormat;
pub use super::sysfs::Unit;

/// Where an encoding comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Exactly Intel's perfmon record.
    Perfmon,
    /// SKX/CLX event perfmon lacks, built from CHA opcode filters (README: config1 = FILTER1 << 32).
    OpcodeFilter,
    /// Perfmon has the record but its FILTER1 value 0 would clear LOC/REM; we set them as PCM does.
    /// Inferred, not verified on hardware.
    InferredFilter,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventDef {
    /// Intel's event name, e.g. `UNC_CHA_TOR_INSERTS.IO_MISS_ITOM`.
    pub name: String,
    pub unit: Unit,
    /// sysfs format terms.
    pub fields: Vec<(&'static str, u64)>,
    /// Bit mask of the programmable counters the event may use.
    pub counters: u8,
    pub origin: Origin,
    /// Part of the default (small) set that answers the DDIO questions with little multiplexing.
    pub essential: bool,
    /// Events with the same key are read in one perf group where the counters allow, so that e.g. HIT,
    /// MISS and TOTAL of one opcode are counted over the same cycles.
    pub group: String,
    /// Sampled with PEBS + data address by the BPF side (core events only).
    pub pebs: bool,
}

impl EventDef {
    pub fn terms(&self) -> Vec<(&'static str, u64)> {
        self.fields.clone()
    }

    /// `perf stat -e` syntax with the generic PMU name, e.g. `uncore_cha/event=0x35,umask=0xc001fe04/`.
    pub fn perf_term_string(&self) -> String {
        let terms: Vec<String> = self
            .fields
            .iter()
            .map(|(k, v)| {
                if *v <= 1 && k.starts_with("filter_") {
                    format!("{k}={v}")
                } else {
                    format!("{k}={v:#x}")
                }
            })
            .collect();
        format!("{}/{}/", self.unit.pmu_prefix(), terms.join(","))
    }
}

/// Set of events to program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EventSet {
    #[default]
    Essential,
    Full,
}

/// SKX/CLX CHA opcodes (FILTER1 OPC0, 10 bits). Only those the README decodes from perfmon values;
/// ItoMCacheNear, WbMtoI and CLFlush opcodes are not confirmed for SKX, so those events are absent there.
const SKX_OPCODES: [(&str, u64, bool); 3] = [
    ("ITOM", 0x248, true),
    ("RDCUR", 0x21E, true),
    ("RFO", 0x200, false),
];

/// ICX+ IO TOR UMaskExt high 16 bits per opcode; the low byte selects all (FF) / hit (FD) / miss (FE).
/// (opcode, UMaskExt bits, Intel defines HIT/MISS variants, in the essential set).
const ICX_OPCODES: [(&str, u64, bool, bool); 6] = [
    ("ITOM", 0xCC43, true, true),
    ("ITOMCACHENEAR", 0xCD43, true, true),
    ("PCIRDCUR", 0xC8F3, true, true),
    ("RFO", 0xC803, true, false),
    ("WBMTOI", 0xCC23, false, true),
    ("CLFLUSH", 0xC8C3, false, true),
];
const ICX_IO_ALL: u64 = 0xC001;

fn ev(
    name: String,
    unit: Unit,
    fields: Vec<(&'static str, u64)>,
    counters: u8,
    origin: Origin,
    essential: bool,
    group: &str,
) -> EventDef {
    EventDef {
        name,
        unit,
        fields,
        counters,
        origin,
        essential,
        group: group.to_string(),
        pebs: false,
    }
}

/// SKX FILTER1 fields that make an opcode-filtered TOR event count local+remote, near+far memory.
fn skx_filter(opc: Option<u64>) -> Vec<(&'static str, u64)> {
    let mut f = vec![("filter_rem", 1), ("filter_loc", 1)];
    match opc {
        Some(o) => f.push(("filter_opc0", o)),
        None => f.push(("filter_all_op", 1)),
    }
    f.extend([("filter_nm", 1), ("filter_not_nm", 1)]);
    f
}

fn cha_events(p: Platform) -> Vec<EventDef> {
    let mut out = Vec::new();
    let clk = if matches!(p, Platform::Skx | Platform::Clx | Platform::Icx) {
        0x00
    } else {
        0x01
    };
    out.push(ev(
        "UNC_CHA_CLOCKTICKS".into(),
        Unit::Cha,
        vec![("event", clk), ("umask", 0)],
        0xF,
        Origin::Perfmon,
        false,
        "tor:all",
    ));
    if p.uses_cha_opcode_filter() {
        // TOR umask bits: IRQ=0, PRQ(IO)=2, HIT=4, MISS=5.
        for (suffix, umask) in [("", 0x34u64), ("_HIT", 0x14), ("_MISS", 0x24)] {
            let mut f = vec![("event", 0x35), ("umask", umask)];
            f.extend(skx_filter(None));
            out.push(ev(
                format!("UNC_CHA_TOR_INSERTS.IO{suffix}"),
                Unit::Cha,
                f,
                0xF,
                Origin::InferredFilter,
                false,
                "tor:all",
            ));
        }
        for (op, opc, essential) in SKX_OPCODES {
            for (hm, umask) in [("", 0x34u64), ("_HIT", 0x14), ("_MISS", 0x24)] {
                let mut f = vec![("event", 0x35), ("umask", umask)];
                f.extend(skx_filter(Some(opc)));
                let origin = if hm == "_MISS" {
                    Origin::Perfmon
                } else {
                    Origin::OpcodeFilter
                };
                out.push(ev(
                    format!("UNC_CHA_TOR_INSERTS.IO{hm}_{op}"),
                    Unit::Cha,
                    f,
                    0xF,
                    origin,
                    essential,
                    &format!("tor:{op}"),
                ));
            }
        }
        let mut f = vec![("event", 0x36), ("umask", 0x34)];
        f.extend(skx_filter(None));
        out.push(ev(
            "UNC_CHA_TOR_OCCUPANCY.IO".into(),
            Unit::Cha,
            f,
            0x1,
            Origin::InferredFilter,
            false,
            "occ:IO",
        ));
        for (op, opc) in [("ITOM", 0x248), ("RDCUR", 0x21E)] {
            let mut f = vec![("event", 0x36), ("umask", 0x24)];
            f.extend(skx_filter(Some(opc)));
            out.push(ev(
                format!("UNC_CHA_TOR_OCCUPANCY.IO_MISS_{op}"),
                Unit::Cha,
                f,
                0x1,
                Origin::Perfmon,
                false,
                &format!("occ:{op}"),
            ));
        }
    } else {
        let umask = |base: u64, low: u64| ((base << 8 | low) << 8) | 0x04;
        for (suffix, low) in [("", 0xFF), ("_HIT", 0xFD), ("_MISS", 0xFE)] {
            out.push(ev(
                format!("UNC_CHA_TOR_INSERTS.IO{suffix}"),
                Unit::Cha,
                vec![("event", 0x35), ("umask", umask(ICX_IO_ALL, low))],
                0xF,
                Origin::Perfmon,
                false,
                "tor:all",
            ));
        }
        for (op, base, hitmiss, essential) in ICX_OPCODES {
            let variants: &[(&str, u64)] = if hitmiss {
                &[("", 0xFF), ("_HIT", 0xFD), ("_MISS", 0xFE)]
            } else {
                &[("", 0xFF)]
            };
            let group = if hitmiss {
                format!("tor:{op}")
            } else {
                "tor:wb".to_string()
            };
            for (hm, low) in variants {
                out.push(ev(
                    format!("UNC_CHA_TOR_INSERTS.IO{hm}_{op}"),
                    Unit::Cha,
                    vec![("event", 0x35), ("umask", umask(base, *low))],
                    0xF,
                    Origin::Perfmon,
                    essential,
                    &group,
                ));
            }
        }
        for (name, base, low) in [
            ("IO", ICX_IO_ALL, 0xFF),
            ("IO_ITOM", 0xCC43, 0xFF),
            ("IO_MISS_ITOM", 0xCC43, 0xFE),
            ("IO_PCIRDCUR", 0xC8F3, 0xFF),
            ("IO_MISS_PCIRDCUR", 0xC8F3, 0xFE),
        ] {
            out.push(ev(
                format!("UNC_CHA_TOR_OCCUPANCY.{name}"),
                Unit::Cha,
                vec![("event", 0x36), ("umask", umask(base, low))],
                0x1,
                Origin::Perfmon,
                false,
                &format!("occ:{name}"),
            ));
        }
    }
    out
}

fn iio_events(p: Platform) -> Vec<EventDef> {
    let parts = if p.uses_cha_opcode_filter() { 4 } else { 8 };
    let txn_counters = if p == Platform::Gnr { 0x3 } else { 0xF };
    let mut out = vec![ev(
        "UNC_IIO_CLOCKTICKS".into(),
        Unit::Iio,
        vec![("event", 0x01), ("umask", 0)],
        0xF,
        Origin::Perfmon,
        false,
        "iio:clk",
    )];
    for part in 0..parts {
        let group = format!("iio:part{part}");
        for (dir, umask) in [("MEM_WRITE", 0x01u64), ("MEM_READ", 0x04)] {
            let f = vec![
                ("event", 0x83),
                ("umask", umask),
                ("ch_mask", 1u64 << part),
                ("fc_mask", 0x07),
            ];
            out.push(ev(
                format!("UNC_IIO_DATA_REQ_OF_CPU.{dir}.PART{part}"),
                Unit::Iio,
                f,
                0x3,
                Origin::Perfmon,
                true,
                &group,
            ));
        }
        for (dir, umask) in [("MEM_WRITE", 0x01u64), ("MEM_READ", 0x04)] {
            let f = vec![
                ("event", 0x84),
                ("umask", umask),
                ("ch_mask", 1u64 << part),
                ("fc_mask", 0x07),
            ];
            out.push(ev(
                format!("UNC_IIO_TXN_REQ_OF_CPU.{dir}.PART{part}"),
                Unit::Iio,
                f,
                txn_counters,
                Origin::Perfmon,
                false,
                &group,
            ));
        }
    }
    out
}

fn imc_events(p: Platform) -> Vec<EventDef> {
    let (code, rd, wr) = match p {
        Platform::Skx | Platform::Clx => (0x04, 0x03, 0x0C),
        Platform::Icx => (0x04, 0x0F, 0x30),
        Platform::Spr | Platform::Emr | Platform::Gnr => (0x05, 0xCF, 0xF0),
    };
    let cas = |name: &str, code: u64, umask: u64| {
        ev(
            name.into(),
            Unit::Imc,
            vec![("event", code), ("umask", umask)],
            0xF,
            Origin::Perfmon,
            true,
            "imc:cas",
        )
    };
    if p == Platform::Gnr {
        // GNR splits CAS counts per sub-channel scheduler; DRAM traffic is SCH0 + SCH1.
        vec![
            cas("UNC_M_CAS_COUNT_SCH0.RD", 0x05, rd),
            cas("UNC_M_CAS_COUNT_SCH0.WR", 0x05, wr),
            cas("UNC_M_CAS_COUNT_SCH1.RD", 0x06, rd),
            cas("UNC_M_CAS_COUNT_SCH1.WR", 0x06, wr),
        ]
    } else {
        vec![
            cas("UNC_M_CAS_COUNT.RD", code, rd),
            cas("UNC_M_CAS_COUNT.WR", code, wr),
        ]
    }
}

fn core_events() -> Vec<EventDef> {
    let mut l3 = ev(
        "MEM_LOAD_RETIRED.L3_MISS".into(),
        Unit::Core,
        vec![("event", 0xD1), ("umask", 0x20)],
        0xF,
        Origin::Perfmon,
        true,
        "core:mem",
    );
    l3.pebs = true;
    let mut l2 = ev(
        "MEM_LOAD_RETIRED.L2_MISS".into(),
        Unit::Core,
        vec![("event", 0xD1), ("umask", 0x10)],
        0xF,
        Origin::Perfmon,
        false,
        "core:mem",
    );
    l2.pebs = true;
    vec![l3, l2]
}

/// The full event table for a platform.
pub fn events(p: Platform) -> Vec<EventDef> {
    let mut v = cha_events(p);
    v.extend(iio_events(p));
    v.extend(imc_events(p));
    v.extend(core_events());
    v
}

pub fn event_set(p: Platform, set: EventSet) -> Vec<EventDef> {
    events(p)
        .into_iter()
        .filter(|e| set == EventSet::Full || e.essential)
        .collect()
}

pub fn find(p: Platform, name: &str) -> Option<EventDef> {
    events(p)
        .into_iter()
        .find(|e| e.name.eq_ignore_ascii_case(name))
}

/// The format files the kernel (arch/x86/events/intel/uncore_snbep.c, v6.10) exposes per platform. Used only
/// where no sysfs is at hand (checking the table, decoding imported `config=` terms); the live path always
/// reads the running kernel's files.
pub fn reference_format(p: Platform, unit: Unit) -> PmuFormat {
    let skx = p.uses_cha_opcode_filter();
    let spr = matches!(p, Platform::Spr | Platform::Emr | Platform::Gnr);
    let umask = if spr {
        "config:8-15,32-55"
    } else {
        "config:8-15"
    };
    let mut s: Vec<(&str, &str)> = vec![
        ("event", "config:0-7"),
        ("edge", "config:18"),
        ("inv", "config:23"),
    ];
    match unit {
        Unit::Cha if skx => s.extend([
            ("umask", "config:8-15"),
            ("tid_en", "config:19"),
            ("thresh", "config:24-31"),
            ("filter_tid", "config1:0-8"),
            ("filter_state", "config1:17-26"),
            ("filter_rem", "config1:32"),
            ("filter_loc", "config1:33"),
            ("filter_all_op", "config1:35"),
            ("filter_nm", "config1:36"),
            ("filter_not_nm", "config1:37"),
            ("filter_opc0", "config1:41-50"),
            ("filter_opc1", "config1:51-60"),
            ("filter_nc", "config1:62"),
            ("filter_isoc", "config1:63"),
        ]),
        Unit::Cha => s.extend([
            (
                "umask",
                if spr {
                    "config:8-15,32-55"
                } else {
                    "config:8-15,32-57"
                },
            ),
            ("tid_en", if spr { "config:16" } else { "config:19" }),
            ("thresh", "config:24-31"),
            ("filter_tid", "config1:0-9"),
        ]),
        Unit::Iio => s.extend([
            ("umask", "config:8-15"),
            ("thresh", "config:24-35"),
            ("ch_mask", if skx { "config:36-43" } else { "config:36-47" }),
            ("fc_mask", if skx { "config:44-46" } else { "config:48-50" }),
        ]),
        Unit::Imc | Unit::Irp => s.extend([("umask", umask), ("thresh", "config:24-31")]),
        Unit::Core => {
            s.extend([
                ("umask", "config:8-15"),
                ("pc", "config:19"),
                ("cmask", "config:24-31"),
                ("ldlat", "config1:0-15"),
                ("offcore_rsp", "config1:0-63"),
                ("frontend", "config1:0-23"),
            ]);
            if skx {
                s.push(("any", "config:21"));
            }
        }
    }
    // The spec strings above are literals; a parse failure would be a typo caught by the tests.
    PmuFormat::from_specs(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{expected_for, perfmon_records};
    use super::*;

    /// Every encoding in the table, for all six platforms, against Intel's perfmon records (or, for the
    /// SKX/CLX opcode-built events perfmon lacks, against the README's decoded FILTER1 values).
    #[test]
    fn table_matches_intel_perfmon_on_all_platforms() {
        for p in Platform::ALL {
            let records = perfmon_records(p);
            let evs = events(p);
            for e in &evs {
                let got = reference_format(p, e.unit)
                    .encode(&e.terms())
                    .unwrap_or_else(|err| panic!("{p} {}: {err}", e.name));
                assert_eq!(got, expected_for(p, e, &records), "{p} {}", e.name);
                if let Some(rec) = records.get(&e.name) {
                    let counters: u8 = rec["Counter"]
                        .as_str()
                        .unwrap()
                        .split(',')
                        .map(|c| 1u8 << c.trim().parse::<u8>().unwrap())
                        .sum();
                    assert_eq!(e.counters, counters, "{p} {} counter mask", e.name);
                    assert_ne!(
                        e.origin,
                        Origin::OpcodeFilter,
                        "{p} {} has a record; origin must say so",
                        e.name
                    );
                } else {
                    assert_eq!(
                        e.origin,
                        Origin::OpcodeFilter,
                        "{p} {} missing from perfmon",
                        e.name
                    );
                }
            }
            let names: std::collections::BTreeSet<_> = evs.iter().map(|e| &e.name).collect();
            assert_eq!(names.len(), evs.len(), "{p}: duplicate names");
        }
    }

    #[test]
    fn skx_opcode_filters_decode_to_readme_values() {
        let f = reference_format(Platform::Skx, Unit::Cha);
        for (name, filter1, umask) in [
            ("UNC_CHA_TOR_INSERTS.IO_MISS_ITOM", 0x49033u64, 0x24u64),
            ("UNC_CHA_TOR_INSERTS.IO_MISS_RDCUR", 0x43C33, 0x24),
            ("UNC_CHA_TOR_INSERTS.IO_MISS_RFO", 0x40033, 0x24),
            ("UNC_CHA_TOR_INSERTS.IO_HIT_ITOM", 0x49033, 0x14),
            ("UNC_CHA_TOR_INSERTS.IO_ITOM", 0x49033, 0x34),
            ("UNC_CHA_TOR_INSERTS.IO", 0x3B, 0x34),
        ] {
            let e = find(Platform::Skx, name).unwrap();
            let w = f.encode(&e.terms()).unwrap();
            assert_eq!(w.config1, filter1 << 32, "{name}");
            assert_eq!(w.config, 0x35 | umask << 8, "{name}");
            // FILTER1: OPC0 at bits 9-18.
            if filter1 != 0x3B {
                assert_eq!((filter1 >> 9) & 0x3FF, f.get(&w, "filter_opc0").unwrap());
            }
        }
        assert!(find(Platform::Skx, "UNC_CHA_TOR_INSERTS.IO_ITOMCACHENEAR").is_none());
    }

    #[test]
    fn term_strings_and_sets() {
        let e = find(Platform::Emr, "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM").unwrap();
        assert_eq!(
            e.perf_term_string(),
            "uncore_cha/event=0x35,umask=0xcc43fe04/"
        );
        let e = find(Platform::Skx, "UNC_CHA_TOR_INSERTS.IO_HIT_RDCUR").unwrap();
        assert_eq!(e.perf_term_string(), "uncore_cha/event=0x35,umask=0x14,filter_rem=1,filter_loc=1,filter_opc0=0x21e,filter_nm=1,filter_not_nm=1/");
        assert!(event_set(Platform::Icx, EventSet::Essential).len() < events(Platform::Icx).len());
        assert_eq!(
            events(Platform::Gnr)
                .iter()
                .filter(|e| e.unit == Unit::Imc)
                .count(),
            4
        );
        assert!(
            find(Platform::Icx, "MEM_LOAD_RETIRED.L3_MISS")
                .unwrap()
                .pebs
        );
    }
}
