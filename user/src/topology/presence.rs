//! Whether the observed interface still exists: its network namespace still named as it was,
//! and its ifindex still the device of that name there. Asked once an interval through a
//! netlink socket opened inside the namespace (a socket keeps the namespace it was made in),
//! so a deleted device or namespace is noticed within an interval, at the cost of one
//! RTM_GETLINK round trip, whose answer also holds the totals the interval's counts are
//! checked against.
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use anyhow::{bail, Result};

use super::netlink::{attrs, Netlink};
use super::IfaceInfo;

/// What became of the interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    Present,
    /// Gone, how, and why in words ("interface ddrcv was removed").
    Gone(Gone, String),
}

/// How an interface went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// Deleted (or its index now names another device).
    Removed,
    /// Moved to another network namespace.
    Moved,
    /// Its network namespace was deleted, or deleted and made anew.
    NetnsDeleted,
}

pub struct DeviceWatch {
    nl: Netlink,
    /// The namespace's link notifications: the one that takes the device away says whether
    /// it went to another namespace (a request afterwards only finds it missing).
    events: Option<Netlink>,
    name: String,
    ifindex: u32,
    netns: Option<(String, PathBuf, u32)>,
    /// The totals in the last check's answer, until taken.
    checked: Option<LinkTotals>,
}

/// RTNLGRP_LINK as a group bitmask.
const RTMGRP_LINK: u32 = 1;
/// Set on the notification of a device leaving for another namespace: the id the new
/// namespace has in the old one.
const IFLA_NEW_NETNSID: u16 = 45;

const RTM_GETLINK: u16 = 18;
const IFLA_IFNAME: u16 = 3;
const IFLA_STATS64: u16 = 23;
const IFINFOMSG: usize = 16;

/// The body of an RTM_GETLINK request for one ifindex (an ifinfomsg: family AF_UNSPEC, pad,
/// type, then the index).
fn getlink_body(ifindex: u32) -> [u8; IFINFOMSG] {
    let mut m = [0u8; IFINFOMSG];
    m[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    m
}

/// Reads [`DeviceWatch::link_totals_settled`] makes at most.
const SETTLE_READS: u32 = 4;

/// An interface's own cumulative totals, [RX, TX] each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkTotals {
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
}

/// The link's totals in an RTM_NEWLINK answer (struct rtnl_link_stats64 opens with
/// rx_packets, tx_packets, rx_bytes, tx_bytes).
fn link_totals(body: &[u8]) -> Option<LinkTotals> {
    let (_, v) = attrs(body.get(IFINFOMSG..)?)
        .into_iter()
        .find(|(k, _)| *k == IFLA_STATS64)?;
    let word = |i: usize| {
        v.get(i * 8..i * 8 + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_ne_bytes)
    };
    Some(LinkTotals {
        packets: [word(0)?, word(1)?],
        bytes: [word(2)?, word(3)?],
    })
}

/// The link's name in an RTM_NEWLINK answer (its body after the netlink header).
pub(crate) fn link_name_of(body: &[u8]) -> Option<String> {
    let (_, v) = attrs(body.get(IFINFOMSG..)?)
        .into_iter()
        .find(|(k, _)| *k == IFLA_IFNAME)?;
    let v = v.split(|&b| b == 0).next().unwrap_or(v);
    Some(String::from_utf8_lossy(v).into_owned())
}

impl DeviceWatch {
    /// Watch `iface` (resolved with `resolve_iface_live`, in its namespace if it has one).
    pub fn open(iface: &IfaceInfo) -> Result<DeviceWatch> {
        let netns = iface.netns.as_ref().map(|n| {
            (
                n.clone(),
                std::path::Path::new(super::NETNS_RUN_DIR).join(n),
                iface.netns_inode,
            )
        });
        let path = netns.as_ref().map(|(_, p, _)| p.as_path());
        let nl = Netlink::open(libc::NETLINK_ROUTE, path)?;
        // Without it a move reads as a removal: worth a watch, not worth failing over.
        let events = Netlink::subscribe(libc::NETLINK_ROUTE, path, RTMGRP_LINK, 256 * 1024).ok();
        Ok(DeviceWatch {
            nl,
            events,
            name: iface.name.clone(),
            ifindex: iface.ifindex,
            netns,
            checked: None,
        })
    }

    /// Whether a queued link notification says our device left for another namespace.
    fn moved(&mut self) -> bool {
        let Some(events) = self.events.as_mut() else {
            return false;
        };
        let ours = |body: &[u8]| {
            body.get(4..8)
                .is_some_and(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) == self.ifindex)
        };
        events.drain().0.iter().any(|body| {
            ours(body)
                && body
                    .get(IFINFOMSG..)
                    .is_some_and(|a| attrs(a).iter().any(|(k, _)| *k == IFLA_NEW_NETNSID))
        })
    }

    /// The interface's own packet totals [RX, TX] now (None: it could not be asked).
    pub fn link_packets(&mut self) -> Option<[u64; 2]> {
        self.link_totals().map(|t| t.packets)
    }

    /// The interface's own packet and byte totals now (None: it could not be asked).
    pub fn link_totals(&mut self) -> Option<LinkTotals> {
        let msgs = self
            .nl
            .request(RTM_GETLINK, 0, &getlink_body(self.ifindex))
            .ok()?;
        msgs.first().and_then(|m| link_totals(m))
    }

    /// The interface's totals once two reads in a row agree, at most [`SETTLE_READS`] reads.
    /// A frame's packet and its bytes are two stores, and on 64-bit hosts a reader on another
    /// CPU can see one and not the other: a read taken as a frame goes out can hold its packet
    /// and not its bytes. Mid-recording the next interval makes that good; the first and the
    /// last read are what the recording's totals are reckoned from, so they wait for the
    /// counters to hold still (on a busy device they will not: the last read is taken).
    pub fn link_totals_settled(&mut self) -> Option<LinkTotals> {
        let mut last = self.link_totals()?;
        for _ in 1..SETTLE_READS {
            let next = self.link_totals()?;
            if next == last {
                break;
            }
            last = next;
        }
        Some(last)
    }

    /// The totals the last check read, once (None: taken already, or that check did not get
    /// an answer): the interval reads its counts right after its check, so the check's answer
    /// serves as the totals just before them without asking the kernel again.
    pub fn take_checked_totals(&mut self) -> Option<LinkTotals> {
        self.checked.take()
    }

    /// Is the interface still there? An error only when the kernel could not be asked.
    pub fn check(&mut self) -> Result<Presence> {
        self.checked = None;
        if let Some((name, path, inode)) = &self.netns {
            match std::fs::metadata(path) {
                Ok(m) if m.ino() as u32 == *inode => {}
                Ok(_) => {
                    return Ok(Presence::Gone(
                        Gone::NetnsDeleted,
                        format!("network namespace '{name}' was deleted and made anew"),
                    ))
                }
                Err(_) => {
                    return Ok(Presence::Gone(
                        Gone::NetnsDeleted,
                        format!("network namespace '{name}' was deleted"),
                    ))
                }
            }
        }
        match self.nl.request(RTM_GETLINK, 0, &getlink_body(self.ifindex)) {
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(if self.moved() {
                Presence::Gone(
                    Gone::Moved,
                    format!(
                        "interface {} was moved to another network namespace",
                        self.name
                    ),
                )
            } else {
                Presence::Gone(
                    Gone::Removed,
                    format!("interface {} was removed", self.name),
                )
            }),
            Err(e) => bail!("asking netlink for interface {}: {e}", self.name),
            Ok(msgs) => Ok(match msgs.first().and_then(|m| link_name_of(m)) {
                Some(n) if !n.is_empty() && n != self.name => Presence::Gone(
                    Gone::Removed,
                    format!(
                        "interface {} was removed (its index now names {n})",
                        self.name
                    ),
                ),
                _ => {
                    self.checked = msgs.first().and_then(|m| link_totals(m));
                    Presence::Present
                }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::netlink::attr;

    #[test]
    fn the_request_names_the_index_and_the_answer_its_link() {
        let b = getlink_body(7);
        assert_eq!(i32::from_ne_bytes(b[4..8].try_into().unwrap()), 7);
        let mut body = vec![0u8; IFINFOMSG];
        body.extend(attr(IFLA_IFNAME, b"ddrcv\0"));
        assert_eq!(link_name_of(&body), Some("ddrcv".into()));
        assert_eq!(link_name_of(&body[..4]), None);
        assert_eq!(link_totals(&body), None);
        let mut stats = [0u8; 24 * 8];
        for (i, v) in [11u64, 22, 1100, 2200].into_iter().enumerate() {
            stats[i * 8..i * 8 + 8].copy_from_slice(&v.to_ne_bytes());
        }
        body.extend(attr(IFLA_STATS64, &stats));
        assert_eq!(
            link_totals(&body),
            Some(LinkTotals {
                packets: [11, 22],
                bytes: [1100, 2200]
            })
        );
    }
}
