//! Platform detection: /proc/cpuinfo text -> which Xeon generation's uncore event table applies.

use serde::{Deserialize, Serialize};

/// Xeon server generations with DDIO uncore events, named as Intel's perfmon directories name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Platform {
    Skx,
    Clx,
    Icx,
    Spr,
    Emr,
    Gnr,
}

impl Platform {
    pub const ALL: [Platform; 6] = [
        Platform::Skx,
        Platform::Clx,
        Platform::Icx,
        Platform::Spr,
        Platform::Emr,
        Platform::Gnr,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Skx => "SKX",
            Platform::Clx => "CLX",
            Platform::Icx => "ICX",
            Platform::Spr => "SPR",
            Platform::Emr => "EMR",
            Platform::Gnr => "GNR",
        }
    }

    pub fn long_name(self) -> &'static str {
        match self {
            Platform::Skx => "Skylake-SP",
            Platform::Clx => "Cascade Lake-SP",
            Platform::Icx => "Ice Lake-SP",
            Platform::Spr => "Sapphire Rapids",
            Platform::Emr => "Emerald Rapids",
            Platform::Gnr => "Granite Rapids",
        }
    }

    pub fn from_name(s: &str) -> Option<Platform> {
        Platform::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
    }

    /// SKX and CLX select TOR opcodes with CHA filter registers (config1); later parts use the extended umask.
    pub fn uses_cha_opcode_filter(self) -> bool {
        matches!(self, Platform::Skx | Platform::Clx)
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The identity fields of the first processor in /proc/cpuinfo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuId {
    pub vendor: String,
    pub family: u32,
    pub model: u32,
    pub stepping: u32,
    pub model_name: String,
}

impl CpuId {
    /// The key Intel's mapfile.csv regexes are matched against, e.g. `GenuineIntel-6-55-4`.
    pub fn mapfile_key(&self) -> String {
        format!(
            "{}-{}-{:X}-{:X}",
            self.vendor, self.family, self.model, self.stepping
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Detection {
    Supported { platform: Platform, cpu: CpuId },
    Unsupported { reason: String, cpu: Option<CpuId> },
}

impl Detection {
    pub fn platform(&self) -> Option<Platform> {
        match self {
            Detection::Supported { platform, .. } => Some(*platform),
            Detection::Unsupported { .. } => None,
        }
    }

    /// One line for the report, e.g. "SPR (Sapphire Rapids), Intel(R) Xeon(R) Platinum 8480+".
    pub fn describe(&self) -> String {
        match self {
            Detection::Supported { platform, cpu } if !cpu.model_name.is_empty() => {
                format!(
                    "{} ({}), {}",
                    platform,
                    platform.long_name(),
                    cpu.model_name
                )
            }
            Detection::Supported { platform, .. } => {
                format!("{} ({})", platform, platform.long_name())
            }
            Detection::Unsupported { reason, .. } => format!("unsupported: {reason}"),
        }
    }
}

/// Parses the first processor block; cpuinfo repeats it per CPU and mixed-model servers do not exist.
pub fn parse_cpuinfo(text: &str) -> Option<CpuId> {
    let block = text.split("\n\n").find(|b| !b.trim().is_empty())?;
    let mut vendor = None;
    let mut family = None;
    let mut model = None;
    let mut stepping = None;
    let mut model_name = String::new();
    for line in block.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "vendor_id" => vendor = Some(value.to_string()),
            "cpu family" => family = value.parse().ok(),
            "model" => model = value.parse().ok(),
            "stepping" => stepping = value.parse().ok(),
            "model name" => model_name = value.to_string(),
            _ => {}
        }
    }
    Some(CpuId {
        vendor: vendor?,
        family: family?,
        model: model?,
        stepping: stepping.unwrap_or(0),
        model_name,
    })
}

/// Intel's mapfile.csv rules for the server parts we support.
pub fn platform_for(family: u32, model: u32, stepping: u32) -> Option<Platform> {
    if family != 6 {
        return None;
    }
    match model {
        0x55 if stepping <= 4 => Some(Platform::Skx),
        0x55 => Some(Platform::Clx),
        0x6A | 0x6C => Some(Platform::Icx),
        0x8F => Some(Platform::Spr),
        0xCF => Some(Platform::Emr),
        0xAD | 0xAE => Some(Platform::Gnr),
        _ => None,
    }
}

pub fn detect(cpuinfo: &str) -> Detection {
    let Some(cpu) = parse_cpuinfo(cpuinfo) else {
        return Detection::Unsupported {
            reason: "no x86 vendor/family/model in /proc/cpuinfo (not an x86 CPU?): no DDIO uncore events"
                .to_string(),
            cpu: None,
        };
    };
    if cpu.vendor != "GenuineIntel" {
        let who = if cpu.vendor == "AuthenticAMD" {
            if cpu.model_name.contains("EPYC") {
                "AMD EPYC".to_string()
            } else {
                "AMD".to_string()
            }
        } else {
            format!("vendor {}", cpu.vendor)
        };
        return Detection::Unsupported {
            reason: if cpu.model_name.is_empty() || cpu.model_name == who {
                format!("{who}: no DDIO uncore events")
            } else {
                format!("{who}: no DDIO uncore events ({})", cpu.model_name)
            },
            cpu: Some(cpu),
        };
    }
    match platform_for(cpu.family, cpu.model, cpu.stepping) {
        Some(platform) => Detection::Supported { platform, cpu },
        None => Detection::Unsupported {
            reason: format!(
                "Intel family {} model 0x{:X} ({}) not a supported Xeon server part",
                cpu.family, cpu.model, cpu.model_name
            ),
            cpu: Some(cpu),
        },
    }
}

pub fn detect_host() -> Detection {
    match std::fs::read_to_string("/proc/cpuinfo") {
        Ok(text) => detect(&text),
        Err(e) => Detection::Unsupported {
            reason: format!("cannot read /proc/cpuinfo: {e}"),
            cpu: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../tests/fixtures/counters/cpuinfo/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn detects_each_server_platform_from_cpuinfo() {
        for (file, want) in [
            ("skx.txt", Platform::Skx),
            ("clx.txt", Platform::Clx),
            ("cpx.txt", Platform::Clx), // Cooper Lake 0x55 stepping 0xB falls in CLX's mapfile row
            ("icx.txt", Platform::Icx),
            ("icx_d.txt", Platform::Icx),
            ("spr.txt", Platform::Spr),
            ("emr.txt", Platform::Emr),
            ("gnr.txt", Platform::Gnr),
            ("gnr_d.txt", Platform::Gnr),
        ] {
            assert_eq!(detect(&fixture(file)).platform(), Some(want), "{file}");
        }
    }

    #[test]
    fn unsupported_cpus_say_why() {
        let amd = detect(&fixture("amd_epyc.txt"));
        assert_eq!(amd.platform(), None);
        assert!(
            amd.describe().contains("AMD EPYC: no DDIO uncore events"),
            "{}",
            amd.describe()
        );

        let client = detect(&fixture("intel_client.txt"));
        assert!(
            client.describe().contains("Intel family 6 model 0x97")
                && client
                    .describe()
                    .contains("not a supported Xeon server part"),
            "{}",
            client.describe()
        );

        let arm = detect(&fixture("arm64.txt"));
        assert!(
            arm.describe().contains("not an x86 CPU"),
            "{}",
            arm.describe()
        );
        assert!(detect("").describe().starts_with("unsupported"));
    }

    /// Cross-check our rules against the mapfile rows Intel ships (kept in the perfmon fixture).
    #[test]
    fn rules_agree_with_intel_mapfile_rows() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/counters/perfmon_ddio_events.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        for p in Platform::ALL {
            let ids = json["platforms"][p.as_str()]["model_ids"]
                .as_array()
                .unwrap();
            for id in ids {
                // "GenuineIntel-6-55-[01234]" or "GenuineIntel-6-6A"
                let parts: Vec<&str> = id.as_str().unwrap().split('-').collect();
                let family: u32 = parts[1].parse().unwrap();
                let model = u32::from_str_radix(parts[2], 16).unwrap();
                let steppings: Vec<u32> = match parts.get(3) {
                    Some(class) => class
                        .trim_matches(|c| c == '[' || c == ']')
                        .chars()
                        .map(|c| c.to_digit(16).unwrap())
                        .collect(),
                    None => (0..16).collect(),
                };
                for s in steppings {
                    assert_eq!(platform_for(family, model, s), Some(p), "{id} stepping {s}");
                }
            }
        }
    }

    #[test]
    fn mapfile_key_and_names() {
        let cpu = parse_cpuinfo(&fixture("skx.txt")).unwrap();
        assert_eq!(cpu.mapfile_key(), "GenuineIntel-6-55-4");
        assert_eq!(Platform::from_name("emr"), Some(Platform::Emr));
        assert_eq!(serde_json::to_string(&Platform::Gnr).unwrap(), "\"GNR\"");
    }
}
