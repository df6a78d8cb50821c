//! A veth's peer: the device at the other end and the namespace it lives in. What a veth
//! transmits on its queue N arrives on its peer's RX queue N, so where the peer counts its
//! RX queues, those counts are this device's TX counts.
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::netlink::{attr, attrs, uint, Netlink};

const RTM_GETLINK: u16 = 18;
const RTM_GETNSID: u16 = 90;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINK: u16 = 5;
const IFLA_LINK_NETNSID: u16 = 37;
const NETNSA_NSID: u16 = 1;
const NETNSA_FD: u16 = 3;
const IFINFOMSG: usize = 16;
const RTGENMSG: usize = 4;

/// The peer of a veth device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The namespace file to enter for it (None: the device's own namespace).
    pub netns: Option<PathBuf>,
    pub ifindex: u32,
    pub name: String,
}

fn getlink_body(ifindex: u32) -> [u8; IFINFOMSG] {
    let mut m = [0u8; IFINFOMSG];
    m[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    m
}

/// From an RTM_NEWLINK answer: the peer's index, and the id (in the asking namespace) of the
/// namespace it lives in, if another.
fn link_of(body: &[u8]) -> Option<(u32, Option<i32>, Option<String>)> {
    let a = attrs(body.get(IFINFOMSG..)?);
    let get = |k: u16| a.iter().find(|(t, _)| *t == k).map(|(_, v)| *v);
    let link = get(IFLA_LINK).and_then(uint)? as u32;
    let nsid = get(IFLA_LINK_NETNSID)
        .and_then(|v| v.get(..4))
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    let name = get(IFLA_IFNAME)
        .map(|v| String::from_utf8_lossy(v.split(|&b| b == 0).next().unwrap_or(v)).into_owned());
    Some((link, nsid, name))
}

/// The id the asking namespace gives the namespace of `file` (None: none given).
fn nsid_of(nl: &mut Netlink, file: &Path) -> Option<i32> {
    let f = std::fs::File::open(file).ok()?;
    let mut body = vec![0u8; RTGENMSG];
    body.extend(attr(NETNSA_FD, &(f.as_raw_fd() as u32).to_ne_bytes()));
    let msgs = nl.request(RTM_GETNSID, 0, &body).ok()?;
    let a = attrs(msgs.first()?.get(RTGENMSG..)?);
    let (_, v) = a.into_iter().find(|(k, _)| *k == NETNSA_NSID)?;
    let b = v.get(..4)?;
    Some(i32::from_ne_bytes([b[0], b[1], b[2], b[3]])).filter(|&id| id >= 0)
}

/// The peer of veth `ifindex` in the namespace `netns` (None: this process's), looked for
/// among the named namespaces and this process's own; None when it is in neither, or the
/// device is not a veth the kernel names a peer for.
pub fn peer(netns: Option<&Path>, ifindex: u32) -> Option<Peer> {
    let mut nl = Netlink::open(libc::NETLINK_ROUTE, netns).ok()?;
    let msgs = nl.request(RTM_GETLINK, 0, &getlink_body(ifindex)).ok()?;
    let (peer_ifindex, nsid, _) = link_of(msgs.first()?)?;
    let Some(nsid) = nsid else {
        let msgs = nl
            .request(RTM_GETLINK, 0, &getlink_body(peer_ifindex))
            .ok()?;
        let name = super::presence::link_name_of(msgs.first()?)?;
        return Some(Peer {
            netns: netns.map(Path::to_path_buf),
            ifindex: peer_ifindex,
            name,
        });
    };
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(super::NETNS_RUN_DIR)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    candidates.sort();
    candidates.push(PathBuf::from("/proc/self/ns/net"));
    let found = candidates
        .into_iter()
        .find(|c| nsid_of(&mut nl, c) == Some(nsid))?;
    let mut there = Netlink::open(libc::NETLINK_ROUTE, Some(&found)).ok()?;
    let msgs = there
        .request(RTM_GETLINK, 0, &getlink_body(peer_ifindex))
        .ok()?;
    let name = super::presence::link_name_of(msgs.first()?)?;
    Some(Peer {
        netns: Some(found),
        ifindex: peer_ifindex,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_answer_names_the_peer_and_its_namespace() {
        let mut body = vec![0u8; IFINFOMSG];
        body.extend(attr(IFLA_IFNAME, b"ddrcv\0"));
        body.extend(attr(IFLA_LINK, &2u32.to_ne_bytes()));
        assert_eq!(link_of(&body), Some((2, None, Some("ddrcv".into()))));
        body.extend(attr(IFLA_LINK_NETNSID, &0i32.to_ne_bytes()));
        assert_eq!(link_of(&body).map(|l| l.1), Some(Some(0)));
        assert_eq!(link_of(&body[..IFINFOMSG]), None);
    }
}
