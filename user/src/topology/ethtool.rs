//! The ethtool ioctls ddioscope reads (driver info, rings, channels, the RSS table's size): read
//! only, on a socket of the calling thread's network namespace.
use anyhow::{bail, Result};

use super::IfaceInfo;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GRINGPARAM: u32 = 0x10;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_GRXFHINDIR: u32 = 0x38;

// Kernel UAPI layouts (include/uapi/linux/ethtool.h).
#[repr(C)]
struct DrvInfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

#[repr(C)]
#[derive(Default)]
struct RingParam {
    cmd: u32,
    rx_max_pending: u32,
    rx_mini_max_pending: u32,
    rx_jumbo_max_pending: u32,
    tx_max_pending: u32,
    rx_pending: u32,
    rx_mini_pending: u32,
    rx_jumbo_pending: u32,
    tx_pending: u32,
}

#[repr(C)]
#[derive(Default)]
struct Channels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// `struct ethtool_rxfh_indir` asked with size 0: the kernel answers the table's size.
#[repr(C)]
#[derive(Default)]
struct RxfhIndir {
    cmd: u32,
    size: u32,
}

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// Why an interface name was not found: where it was looked for and what is there.
fn not_found(name: &str, netns: Option<&str>, present: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut there = present
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if present.len() > SHOWN {
        there += &format!(" and {} more", present.len() - SHOWN);
    }
    let there = if present.is_empty() {
        "no interfaces".to_string()
    } else {
        there
    };
    match netns {
        Some(ns) => format!("interface '{name}' not found in network namespace '{ns}', which has {there}; check the name, or the namespace"),
        None => format!("interface '{name}' not found in this network namespace, which has {there}; check the name, or pass --netns NS for one in another namespace"),
    }
}

/// The interfaces of the current thread's network namespace, in index order.
fn names() -> Vec<String> {
    // SAFETY: if_nameindex returns an array ended by a zero entry, or null; freed below.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut p = list;
        while (*p).if_index != 0 && !(*p).if_name.is_null() {
            out.push(
                std::ffi::CStr::from_ptr((*p).if_name)
                    .to_string_lossy()
                    .into_owned(),
            );
            p = p.add(1);
        }
        libc::if_freenameindex(list);
        out
    }
}

struct Sock(libc::c_int);
impl Drop for Sock {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.0) };
    }
}

fn ioctl<T>(sock: &Sock, name: &str, data: &mut T) -> bool {
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: (data as *mut T).cast(),
        _pad: [0; 16],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: req points at a live, correctly laid out ethtool command.
    unsafe { libc::ioctl(sock.0, SIOCETHTOOL as _, &mut req) == 0 }
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Look the interface up in the current thread's namespace, which is `netns` (None: the
/// host's): a name not there is refused naming where it was looked for and what is there.
pub fn query(name: &str, netns: Option<&str>) -> Result<IfaceInfo> {
    let cname = std::ffi::CString::new(name)?;
    // SAFETY: cname is NUL-terminated.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        bail!(not_found(name, netns, &names()));
    }
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    let mut info = IfaceInfo {
        name: name.to_string(),
        ifindex,
        ..Default::default()
    };
    if fd < 0 {
        return Ok(info);
    }
    let sock = Sock(fd);
    // SAFETY: DrvInfo is plain old data; all-zero is valid.
    let mut drv: DrvInfo = unsafe { std::mem::zeroed() };
    drv.cmd = ETHTOOL_GDRVINFO;
    if ioctl(&sock, name, &mut drv) {
        info.driver = Some(cstr(&drv.driver)).filter(|s| !s.is_empty());
        info.bus_info = Some(cstr(&drv.bus_info)).filter(|s| !s.is_empty());
    }
    let mut ring = RingParam {
        cmd: ETHTOOL_GRINGPARAM,
        ..Default::default()
    };
    if ioctl(&sock, name, &mut ring) {
        info.rx_ring = Some(ring.rx_pending).filter(|&v| v > 0);
        info.tx_ring = Some(ring.tx_pending).filter(|&v| v > 0);
        info.rx_ring_max = Some(ring.rx_max_pending).filter(|&v| v > 0);
        info.tx_ring_max = Some(ring.tx_max_pending).filter(|&v| v > 0);
    }
    // SAFETY: an ifreq is plain old data; SIOCGIFHWADDR fills ifr_hwaddr (a sockaddr whose
    // family is the ARPHRD link type).
    let mut hw: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in hw
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    // SAFETY: a valid socket and a NUL-terminated ifreq of ours.
    if unsafe { libc::ioctl(sock.0, libc::SIOCGIFHWADDR, &mut hw) } == 0 {
        // SAFETY: SIOCGIFHWADDR wrote the ifru_hwaddr member.
        info.link_type = Some(unsafe { hw.ifr_ifru.ifru_hwaddr.sa_family });
    }
    // SAFETY: an ifreq is plain old data; SIOCGIFMTU fills ifru_mtu.
    let mut mreq: libc::ifreq = unsafe { std::mem::zeroed() };
    mreq.ifr_name = hw.ifr_name;
    // SAFETY: a valid socket and a NUL-terminated ifreq of ours.
    if unsafe { libc::ioctl(sock.0, libc::SIOCGIFMTU, &mut mreq) } == 0 {
        // SAFETY: SIOCGIFMTU wrote the ifru_mtu member.
        info.mtu = u32::try_from(unsafe { mreq.ifr_ifru.ifru_mtu }).ok();
    }
    let mut indir = RxfhIndir {
        cmd: ETHTOOL_GRXFHINDIR,
        size: 0,
    };
    if ioctl(&sock, name, &mut indir) {
        info.rss_table = Some(indir.size).filter(|&n| n > 0);
    }
    let mut ch = Channels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    if ioctl(&sock, name, &mut ch) {
        info.rx_queues = ch.rx_count + ch.combined_count;
        info.tx_queues = ch.tx_count + ch.combined_count;
    }
    Ok(info)
}

/// The entries of the device's RSS indirection table (`ethtool -x`), asked in the calling
/// thread's namespace: Ok(0) or an error of kind Unsupported when the driver has none
/// (`ethtool -X` then fails the same way).
pub fn rss_table_size(name: &str) -> std::io::Result<u32> {
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let sock = Sock(fd);
    let mut ind = RxfhIndir {
        cmd: ETHTOOL_GRXFHINDIR,
        size: 0,
    };
    if ioctl(&sock, name, &mut ind) {
        Ok(ind.size)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// More named statistics than any driver keeps (mlx5 has a few thousand at 64 channels).
const MAX_STATS: u32 = 1 << 16;

/// A socket for the driver's statistics (`ethtool -S`), made in the namespace the calling
/// thread is in and keeping it: the device can be asked from any thread afterwards.
pub struct DriverStats {
    sock: Sock,
    name: String,
    /// The statistics' names, asked once: a driver's set changes only with its channel count,
    /// and a changed count is noticed by the values' length.
    names: Vec<String>,
    /// The values `read` got last, until `last_or_read` takes them or `forget_last` drops them.
    last: Option<Vec<u64>>,
}

impl DriverStats {
    /// None: no socket could be made, or the driver names no statistics.
    pub fn open(name: &str) -> Option<DriverStats> {
        // SAFETY: plain socket creation.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return None;
        }
        let mut s = DriverStats {
            sock: Sock(fd),
            name: name.to_string(),
            names: Vec::new(),
            last: None,
        };
        s.names = s.read_names()?;
        (!s.names.is_empty()).then_some(s)
    }

    fn count(&self) -> Option<u32> {
        // struct ethtool_sset_info: cmd, reserved, sset_mask (u64), then one u32 per set asked.
        #[repr(C)]
        struct SsetInfo {
            cmd: u32,
            reserved: u32,
            mask: u64,
            data: [u32; 1],
        }
        let mut info = SsetInfo {
            cmd: ETHTOOL_GSSET_INFO,
            reserved: 0,
            mask: 1 << ETH_SS_STATS,
            data: [0],
        };
        (ioctl(&self.sock, &self.name, &mut info) && info.mask & (1 << ETH_SS_STATS) != 0)
            .then_some(info.data[0])
            .filter(|&n| n > 0 && n <= MAX_STATS)
    }

    fn read_names(&self) -> Option<Vec<String>> {
        let n = self.count()? as usize;
        // struct ethtool_gstrings: cmd, string_set, len, then len names of 32 bytes.
        let mut buf = vec![0u8; 12 + n * ETH_GSTRING_LEN];
        buf[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
        buf[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
        buf[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
        if !ioctl_buf(&self.sock, &self.name, &mut buf) {
            return None;
        }
        let got = (u32::from_ne_bytes(buf[8..12].try_into().ok()?) as usize).min(n);
        Some(
            buf[12..12 + got * ETH_GSTRING_LEN]
                .chunks(ETH_GSTRING_LEN)
                .map(cstr)
                .collect(),
        )
    }

    /// The statistics' names, as the driver listed them.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Every named statistic's value now; None: the device could not be asked.
    pub fn read(&mut self) -> Option<Vec<(&str, u64)>> {
        let n = self.names.len();
        // struct ethtool_stats: cmd, n_stats, then n_stats u64 (8-byte aligned at offset 8).
        let mut buf = vec![0u64; 1 + n];
        let head = (u64::from(ETHTOOL_GSTATS)) | (u64::from(n as u32) << 32);
        buf[0] = if cfg!(target_endian = "little") {
            head
        } else {
            head.rotate_left(32)
        };
        // SAFETY: a u64 buffer seen as bytes, of its own length.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), buf.len() * 8) };
        if !ioctl_buf(&self.sock, &self.name, bytes) {
            return None;
        }
        let got = u32::from_ne_bytes(bytes[4..8].try_into().ok()?) as usize;
        if got != n {
            // The driver's set changed (a new channel count): names again, values next time.
            self.names = self.read_names().unwrap_or_default();
            return None;
        }
        self.last = Some(buf[1..].to_vec());
        Some(
            self.names
                .iter()
                .map(String::as_str)
                .zip(buf[1..].iter().copied())
                .collect(),
        )
    }

    /// The last `read`'s values if not yet taken or forgotten, else a new read: two users of
    /// one interval's statistics share one read, which on a NIC with a thousand statistics
    /// is the dearer part of the interval.
    pub fn last_or_read(&mut self) -> Option<Vec<(&str, u64)>> {
        match self.last.take() {
            Some(v) => Some(self.names.iter().map(String::as_str).zip(v).collect()),
            None => self.read(),
        }
    }

    /// The last `read` is no longer the one wanted: the next `last_or_read` reads anew.
    pub fn forget_last(&mut self) {
        self.last = None;
    }
}

fn ioctl_buf(sock: &Sock, name: &str, buf: &mut [u8]) -> bool {
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: buf.as_mut_ptr().cast(),
        _pad: [0; 16],
    };
    req.name[..name.len().min(libc::IFNAMSIZ - 1)]
        .copy_from_slice(&name.as_bytes()[..name.len().min(libc::IFNAMSIZ - 1)]);
    // SAFETY: req points at a live buffer laid out as the ethtool command in its first word.
    unsafe { libc::ioctl(sock.0, SIOCETHTOOL as _, &mut req) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interface_says_where_it_was_looked_for() {
        let present = vec!["lo".to_string(), "ddrcv".to_string()];
        let e = not_found("ddsnd", Some("ddio-ux-rcv"), &present);
        assert_eq!(e, "interface 'ddsnd' not found in network namespace 'ddio-ux-rcv', which has lo, ddrcv; check the name, or the namespace");
        assert!(!e.contains("pass --netns"));
        let e = not_found("ddrcv", None, &["lo".to_string(), "eth0".to_string()]);
        assert!(
            e.contains("this network namespace, which has lo, eth0") && e.contains("pass --netns"),
            "{e}"
        );
        let many: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
        assert!(not_found("x", None, &many).contains("v7 and 2 more"));
        // This host's own namespace has at least loopback.
        assert!(names().iter().any(|n| n == "lo"));
    }
}
