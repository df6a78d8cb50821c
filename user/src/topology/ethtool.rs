//! The ethtool ioctls ddioscope reads (driver info, rings, channels): read
//! only, on a socket of the calling thread's network namespace.
use anyhow::{bail, Result};

use super::IfaceInfo;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GRINGPARAM: u32 = 0x10;
const ETHTOOL_GCHANNELS: u32 = 0x3c;

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

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

struct Sock(libc::c_int);
impl Drop for Sock {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.0) };
    }
}

fn ioctl<T>(sock: &Sock, name: &str, data: &mut T) -> bool {
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], data: (data as *mut T).cast(), _pad: [0; 16] };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: req points at a live, correctly laid out ethtool command.
    unsafe { libc::ioctl(sock.0, SIOCETHTOOL as _, &mut req) == 0 }
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Look the interface up in the current thread's namespace.
pub fn query(name: &str) -> Result<IfaceInfo> {
    let cname = std::ffi::CString::new(name)?;
    // SAFETY: cname is NUL-terminated.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        bail!("interface '{name}' not found in this network namespace (check the name, or pass --netns)");
    }
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    let mut info = IfaceInfo { name: name.to_string(), ifindex, ..Default::default() };
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
    let mut ring = RingParam { cmd: ETHTOOL_GRINGPARAM, ..Default::default() };
    if ioctl(&sock, name, &mut ring) {
        info.rx_ring = Some(ring.rx_pending).filter(|&v| v > 0);
        info.tx_ring = Some(ring.tx_pending).filter(|&v| v > 0);
        info.rx_ring_max = Some(ring.rx_max_pending).filter(|&v| v > 0);
        info.tx_ring_max = Some(ring.tx_max_pending).filter(|&v| v > 0);
    }
    // SAFETY: an ifreq is plain old data; SIOCGIFHWADDR fills ifr_hwaddr (a sockaddr whose
    // family is the ARPHRD link type).
    let mut hw: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in hw.ifr_name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
        *d = s as libc::c_char;
    }
    // SAFETY: a valid socket and a NUL-terminated ifreq of ours.
    if unsafe { libc::ioctl(sock.0, libc::SIOCGIFHWADDR, &mut hw) } == 0 {
        // SAFETY: SIOCGIFHWADDR wrote the ifru_hwaddr member.
        info.link_type = Some(unsafe { hw.ifr_ifru.ifru_hwaddr.sa_family });
    }
    let mut ch = Channels { cmd: ETHTOOL_GCHANNELS, ..Default::default() };
    if ioctl(&sock, name, &mut ch) {
        info.rx_queues = ch.rx_count + ch.combined_count;
        info.tx_queues = ch.tx_count + ch.combined_count;
    }
    Ok(info)
}
