//! `serve`'s connections: a cap on how many are open, the oldest idle one closed to make
//! room, and a header-read timeout, so idle clients cannot take the descriptors a scrape needs.
//!
//! Capping requests is not enough: an idle connection holds a descriptor without making
//! one. Refusing connections past the cap is not enough either: a scrape that arrives
//! behind them waits in the listen backlog until they go. So every connection is taken,
//! and once the cap is reached the oldest that is not answering a request is closed.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{oneshot, Semaphore};

/// Time a client has to send a request's headers, from the connection's start or the end
/// of its previous response: an idle keep-alive connection is closed after it too.
/// Prometheus sends its request at once and reconnects when a kept-alive one was closed.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after an accept error (out of descriptors) before accepting again: the
/// closed connection's descriptor is free by then.
const ACCEPT_RETRY: Duration = Duration::from_millis(5);

/// The most connections open at once: a quarter of the descriptor limit (at systemd's
/// default soft limit of 1024, 256), so the probes' descriptors, the scrape's own and the
/// ones being closed always fit; between 16 and 4096.
pub fn connection_cap() -> usize {
    cap_for(nofile_soft_limit())
}

fn cap_for(nofile: u64) -> usize {
    (nofile / 4).clamp(16, 4096) as usize
}

fn nofile_soft_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
        r.rlim_cur
    } else {
        // The limit systemd gives a service when nothing says otherwise.
        1024
    }
}

/// One open connection: whether it is answering a request, and how to close it.
struct Open {
    busy: Arc<AtomicBool>,
    close: oneshot::Sender<()>,
}

/// The open connections by the order they were accepted.
#[derive(Default)]
struct Conns {
    next: u64,
    open: BTreeMap<u64, Open>,
}

impl Conns {
    /// Closes the oldest connection that is not answering a request (the oldest of all
    /// when every one is): its task drops it, and its permit with it.
    fn close_oldest_idle(&mut self) {
        let id = self
            .open
            .iter()
            .find(|(_, o)| !o.busy.load(Ordering::Relaxed))
            .or_else(|| self.open.iter().next())
            .map(|(id, _)| *id);
        if let Some(o) = id.and_then(|id| self.open.remove(&id)) {
            let _ = o.close.send(());
        }
    }
}

fn lock(c: &Mutex<Conns>) -> MutexGuard<'_, Conns> {
    // A panicked holder cannot leave the map half-written for what is done with it here.
    c.lock().unwrap_or_else(|e| e.into_inner())
}

/// Accepts connections until the listener fails, serving `app` on each, at most `cap` open.
pub async fn accept_loop(listener: tokio::net::TcpListener, app: Router, cap: usize) -> Result<()> {
    let permits = Arc::new(Semaphore::new(cap));
    let conns = Arc::new(Mutex::new(Conns::default()));
    loop {
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                lock(&conns).close_oldest_idle();
                Arc::clone(&permits)
                    .acquire_owned()
                    .await
                    .context("the connection permits closed")?
            }
        };
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of descriptors, or a client that reset before it was taken: make
                // room and take the next.
                lock(&conns).close_oldest_idle();
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let busy = Arc::new(AtomicBool::new(false));
        let (close, closed) = oneshot::channel();
        let id = {
            let mut c = lock(&conns);
            let id = c.next;
            c.next += 1;
            c.open.insert(
                id,
                Open {
                    busy: Arc::clone(&busy),
                    close,
                },
            );
            id
        };
        let (app, conns) = (app.clone(), Arc::clone(&conns));
        tokio::spawn(async move {
            // Dropped last: the descriptor is closed before the permit is given back.
            let _permit = permit;
            serve_one(stream, app, busy, closed).await;
            lock(&conns).open.remove(&id);
        });
    }
}

/// One connection, until the client is done, its headers are late, or it is closed to
/// make room.
async fn serve_one(
    stream: tokio::net::TcpStream,
    app: Router,
    busy: Arc<AtomicBool>,
    closed: oneshot::Receiver<()>,
) {
    let inner = TowerToHyperService::new(app);
    let svc = hyper::service::service_fn(move |req| {
        busy.store(true, Ordering::Relaxed);
        let answer = hyper::service::Service::call(&inner, req);
        let busy = Arc::clone(&busy);
        async move {
            let r = answer.await;
            busy.store(false, Ordering::Relaxed);
            r
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        _ = conn => {}
        _ = closed => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_three_quarters_of_the_descriptors() {
        assert_eq!(cap_for(1024), 256);
        assert_eq!(cap_for(40), 16);
        assert_eq!(cap_for(1 << 20), 4096);
    }

    #[test]
    fn the_oldest_idle_connection_goes_first() {
        let mut c = Conns::default();
        let mut rx = Vec::new();
        for busy in [true, false, false] {
            let (close, closed) = oneshot::channel();
            let id = c.next;
            c.next += 1;
            c.open.insert(
                id,
                Open {
                    busy: Arc::new(AtomicBool::new(busy)),
                    close,
                },
            );
            rx.push(closed);
        }
        c.close_oldest_idle();
        assert_eq!(c.open.keys().copied().collect::<Vec<_>>(), [0, 2]);
        assert!(rx[1].try_recv().is_ok() && rx[0].try_recv().is_err());
        c.open.remove(&2);
        // Only a busy one left: it goes rather than none.
        c.close_oldest_idle();
        assert!(c.open.is_empty());
    }
}
