//! Loads and attaches the BPF probe families, and reads what they aggregate.
pub mod features;
pub mod l3miss;
pub mod memlayout;
pub mod pktlife;

pub mod skel {
    #![allow(clippy::all, dead_code, non_camel_case_types, non_snake_case, non_upper_case_globals, unused)]
    include!(concat!(env!("OUT_DIR"), "/pktlife.skel.rs"));
}

pub mod feature_skel {
    #![allow(clippy::all, dead_code, non_camel_case_types, non_snake_case, non_upper_case_globals, unused)]
    include!(concat!(env!("OUT_DIR"), "/features.skel.rs"));
}
