//! `ddioscope top`: a refreshing per-queue terminal view of the live Snapshot
//! stream (rates, NAPI batches, stage p99s, in-flight bytes vs the assumed DDIO
//! capacity, socket DDIO miss %, top flows); plain periodic lines when stdout
//! is not a terminal. The terminal is restored on every exit path, panics included.
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::{cursor, queue, style, terminal};

use super::view::{self, fmt_bytes, fmt_ns, FlowRate, FlowRates, QueueView};
use crate::analysis::filter::{Filter, FlowView};
use crate::counters::socket_metrics;
use crate::session::{Session, SessionArgs, SessionOptions};
use crate::snapshot::{Dir, Snapshot};

/// `ddioscope top`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub session: SessionArgs,
    /// Refresh interval in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub interval: u64,
    /// Quit after this long (seconds, or with units: 30s, 5m, 1h30m), detaching everything,
    /// with exit status 0. Default: run until q, Esc or Ctrl-C.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::duration_flag)]
    pub duration: Option<f64>,
    #[command(flatten)]
    pub filter: crate::analysis::filter::FilterArgs,
}

/// Flows listed on screen at most (fewer when the terminal is short).
const MAX_FLOWS: usize = 10;

pub fn run(args: &TopArgs) -> Result<()> {
    // Flow rates are per interval, so the flow table is read every interval.
    let opts = SessionOptions::surface(&args.session, args.interval, 1);
    let (features, iface) = Session::preflight(&opts)?;
    // Signals first, so a Ctrl-C during attach still detaches cleanly; SIGHUP
    // (an SSH session going away) stops too.
    let stop = crate::sys::stop_flag()?;
    let mut live = Session::start(&opts, features, iface)?;
    let end = args
        .duration
        .map(|d| Instant::now() + Duration::from_secs_f64(d));
    let over = || end.is_some_and(|e| Instant::now() >= e);
    loop {
        if args.session.verbose {
            let ids: Vec<String> = live.prog_ids().iter().map(|i| i.to_string()).collect();
            eprintln!("attached: prog ids {}", ids.join(","));
        }
        let filter = Filter::from(&args.filter);
        let result = if io::stdout().is_terminal() {
            run_tty(&mut live, &stop, end, &filter)
        } else {
            run_plain(&mut live, &stop, end, &filter)
        };
        let gone = live.gone().map(str::to_string);
        // Detach (drop the links) before the caller prints anything.
        drop(live);
        let Some(why) = gone else { return result };
        result?;
        // The view goes on once an interface of that name is back.
        eprintln!("ddioscope top: {why}; waiting for it to return (Ctrl-C quits)");
        let Some((features, back)) = Session::await_return(&opts, &stop, over)? else {
            return Ok(());
        };
        eprintln!("ddioscope top: {} is back", back.name);
        live = Session::start(&opts, features, back)?;
    }
}

/// Everything one screen or one set of lines needs about one interval.
struct Frame {
    dur_s: f64,
    queues: Vec<QueueView>,
    flows: Vec<FlowRate>,
    /// (socket, write miss %, read miss %).
    ddio: Vec<(u32, Option<f64>, Option<f64>)>,
    elapsed_s: f64,
    /// The model's verdicts on this interval: the computation `serve` and `report` make.
    model: Option<super::live_model::LiveVerdicts>,
}

fn frame(live: &Session, snap: &Snapshot, flows: &mut FlowRates, filter: &Filter) -> Frame {
    let dur_s = snap.dur_ns as f64 / 1e9;
    let ddio = if snap.counters.is_empty() || dur_s <= 0.0 {
        Vec::new()
    } else {
        socket_metrics(&snap.counters, dur_s)
            .into_iter()
            .map(|m| (m.socket, m.write_miss_pct, m.read_miss_pct))
            .collect()
    };
    let mut queues = view::queue_views(&snap.queues, snap.dur_ns);
    queues.retain(|q| filter.queue(q.dir, q.queue));
    let mut rates = flows.update(&snap.flows, snap.dur_ns);
    rates.retain(|r| {
        let k = &r.flow.key;
        filter.flow(
            k.dir,
            Some(r.flow.queue),
            &FlowView {
                proto: &k.proto,
                src: &k.src,
                sport: k.sport,
                dst: &k.dst,
                dport: k.dport,
            },
        )
    });
    Frame {
        dur_s,
        queues,
        flows: rates,
        ddio,
        elapsed_s: live.started.elapsed().as_secs_f64(),
        model: super::live_model::geometry(&live.host).map(|g| {
            super::live_model::verdicts(&g.geometry, &live.iface, &snap.queues, snap.dur_ns)
        }),
    }
}

// ---------------------------------------------------------------- plain lines

fn run_plain(
    live: &mut Session,
    stop: &AtomicBool,
    end: Option<Instant>,
    filter: &Filter,
) -> Result<()> {
    let mut flows = FlowRates::default();
    let mut out = io::stdout().lock();
    loop {
        let (snap, finishing) = live.next(stop, end)?;
        let f = frame(live, &snap, &mut flows, filter);
        let mut text = String::new();
        for q in &f.queues {
            text.push_str(&plain_line(&f, q));
            text.push('\n');
        }
        // A reader that went away (`| head`) ends the view, cleanly.
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
            || finishing
        {
            return Ok(());
        }
    }
}

fn plain_line(f: &Frame, q: &QueueView) -> String {
    let mut s = format!(
        "t={:.1}s {} q{} pkts/s={:.0} mbit/s={:.1}",
        f.elapsed_s,
        q.dir.as_str(),
        q.queue,
        q.packets_per_s,
        q.mbit_per_s
    );
    if q.dir == Dir::Rx {
        s += &format!(
            " napi_avg_batch={} budget_exhausted={}",
            q.napi_avg_batch.map_or("-".into(), |b| format!("{b:.1}")),
            q.napi_budget_exhausted
        );
    }
    for (name, p) in q.dir.stage_names().iter().zip(q.p99_ns) {
        s += &format!(
            " p99_{name}_us={}",
            p.map_or("-".into(), |n| format!("{:.1}", n as f64 / 1e3))
        );
    }
    if let Some(b) = q.inflight_bytes {
        s += &format!(" inflight_bytes={b:.0}");
    }
    // The verdict report and serve give, in their spelling.
    if let Some(v) = f
        .model
        .as_ref()
        .and_then(|m| m.queues.iter().find(|v| v.0 == q.dir && v.1 == q.queue))
    {
        s += &format!(" verdict={}", v.2);
    }
    s
}

// ---------------------------------------------------------------- terminal

/// Raw mode + alternate screen for as long as it lives; Drop restores the
/// terminal whatever the exit path (error, `?`, panic unwinding).
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> Result<TerminalGuard> {
        terminal::enable_raw_mode().context("switching the terminal to raw mode")?;
        // From here on the guard exists, so a failure below still restores.
        let g = TerminalGuard;
        let mut out = io::stdout();
        crossterm::execute!(out, terminal::EnterAlternateScreen, cursor::Hide)
            .context("entering the alternate screen")?;
        Ok(g)
    }
}

fn restore_terminal() {
    let mut out = io::stdout();
    let _ = crossterm::execute!(
        out,
        style::ResetColor,
        cursor::Show,
        terminal::LeaveAlternateScreen
    );
    let _ = terminal::disable_raw_mode();
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Reads keys on its own thread, blocking in `event::poll` with a timeout (no
/// busy loop); `q`, Esc and Ctrl-C (raw mode turns it into a key) set `stop`.
fn spawn_keys(stop: Arc<AtomicBool>, done: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
            match event::poll(Duration::from_millis(100)) {
                Ok(true) => {}
                Ok(false) => continue,
                // No terminal to read keys from: stop reading, not the view
                // (signals still stop it; a hang-up sends SIGHUP).
                Err(_) => return,
            }
            if let Ok(Event::Key(k)) = event::read() {
                if k.kind == KeyEventKind::Release {
                    continue;
                }
                let quit = matches!(
                    k.code,
                    KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc
                ) || (k.code == KeyCode::Char('c')
                    && k.modifiers.contains(KeyModifiers::CONTROL));
                if quit {
                    stop.store(true, Ordering::Relaxed);
                }
            }
        }
    })
}

fn run_tty(
    live: &mut Session,
    stop: &Arc<AtomicBool>,
    end: Option<Instant>,
    filter: &Filter,
) -> Result<()> {
    // A panic prints its message after the terminal is back to normal.
    let prev_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        prev_hook(info);
    }));
    let guard = TerminalGuard::enter()?;
    let done = Arc::new(AtomicBool::new(false));
    let keys = spawn_keys(Arc::clone(stop), Arc::clone(&done));
    let result = tty_loop(live, stop, end, filter);
    done.store(true, Ordering::Relaxed);
    // The key thread wakes within its poll timeout; join it so it no longer reads the
    // terminal once it is restored. A terminal that hung up can hold it in a read that never
    // returns: then it is left behind (the process is about to exit), not waited for.
    let deadline = Instant::now() + Duration::from_millis(500);
    while !keys.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if keys.is_finished() {
        let _ = keys.join();
    }
    drop(guard);
    result
}

fn tty_loop(
    live: &mut Session,
    stop: &AtomicBool,
    end: Option<Instant>,
    filter: &Filter,
) -> Result<()> {
    let mut flows = FlowRates::default();
    draw(&header_lines(live, None), &[])?;
    loop {
        let (snap, finishing) = live.next(stop, end)?;
        if finishing {
            return Ok(());
        }
        let f = frame(live, &snap, &mut flows, filter);
        draw(&header_lines(live, Some(&f)), &body_lines(live, &f))?;
    }
}

fn header_lines(live: &Session, f: Option<&Frame>) -> Vec<String> {
    let i = &live.iface;
    let mut h = vec![format!(
        "ddioscope top — {}{} ({}, {} rx / {} tx queues)  {}   q: quit",
        i.name,
        i.netns
            .as_deref()
            .map(|n| format!(" in netns {n}"))
            .unwrap_or_default(),
        i.driver.as_deref().unwrap_or("unknown driver"),
        i.rx_queues,
        i.tx_queues,
        match f {
            Some(f) => format!("t={:.1} s, interval {:.2} s", f.elapsed_s, f.dur_s),
            None => "waiting for the first interval…".into(),
        }
    )];
    h.push(match super::live_model::geometry(&live.host) {
        Some(g) => format!(
            "LLC {} / {} ways → DDIO capacity {} ({} DDIO ways; {})",
            fmt_bytes(g.geometry.size_bytes as f64),
            g.geometry.ways,
            fmt_bytes(g.geometry.ddio_capacity_bytes() as f64),
            g.geometry.ddio_ways,
            g.origin
        ),
        None => "LLC geometry unknown: no DDIO capacity".into(),
    });
    let ddio = match f {
        Some(f) if !f.ddio.is_empty() => f
            .ddio
            .iter()
            .map(|(s, w, r)| {
                let pct = |v: &Option<f64>| v.map_or("-".into(), |p| format!("{p:.1} %"));
                format!(
                    "socket {s}: DDIO write miss {}, read miss {}",
                    pct(w),
                    pct(r)
                )
            })
            .collect::<Vec<_>>()
            .join("   "),
        _ => format!(
            "DDIO counters: {}{}",
            live.counters_source,
            live.counter_notes
                .first()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ),
    };
    h.push(ddio);
    h
}

fn body_lines(_live: &Session, f: &Frame) -> Vec<String> {
    let verdict = |d: Dir, q: u32| {
        f.model
            .as_ref()
            .and_then(|m| m.queues.iter().find(|v| v.0 == d && v.1 == q))
            .map_or_else(|| "-".to_string(), |v| v.2.to_string())
    };
    let mut out = vec![String::new()];
    for dir in [Dir::Rx, Dir::Tx] {
        let names = dir.stage_names();
        let mut hdr = format!(
            "{:<3} {:>3} {:>11} {:>10}",
            dir.as_str().to_uppercase(),
            "Q",
            "PKTS/S",
            "MBIT/S"
        );
        if dir == Dir::Rx {
            hdr += &format!(" {:>7} {:>8}", "BATCH", "BUDGET");
        }
        for n in names {
            hdr += &format!(" {:>15}", format!("p99 {n}"));
        }
        if dir == Dir::Rx {
            hdr += &format!(" {:>10}", "IN-FLIGHT");
        }
        hdr += &format!(" {:>8}", "VERDICT");
        out.push(hdr);
        let qs: Vec<&QueueView> = f.queues.iter().filter(|q| q.dir == dir).collect();
        if qs.is_empty() {
            out.push("    (no activity this interval)".into());
        }
        let mut inflight_sum = 0.0;
        for q in qs {
            let mut l = format!(
                "{:<3} {:>3} {:>11.0} {:>10.1}",
                "", q.queue, q.packets_per_s, q.mbit_per_s
            );
            if dir == Dir::Rx {
                l += &format!(
                    " {:>7} {:>8}",
                    q.napi_avg_batch.map_or("-".into(), |b| format!("{b:.1}")),
                    q.napi_budget_exhausted
                );
            }
            for p in q.p99_ns {
                l += &format!(" {:>15}", fmt_ns(p));
            }
            if dir == Dir::Rx {
                inflight_sum += q.inflight_bytes.unwrap_or(0.0);
                l += &format!(" {:>10}", q.inflight_bytes.map_or("-".into(), fmt_bytes));
            }
            l += &format!(" {:>8}", verdict(dir, q.queue));
            out.push(l);
        }
        if dir == Dir::Rx && inflight_sum > 0.0 {
            out.push(format!(
                "    all RX queues: {} in flight (Little's law: bytes/s × mean driver_to_free)",
                fmt_bytes(inflight_sum)
            ));
        }
        // What the verdicts rest on, as report's "ring needs": the rings against DDIO.
        if let Some(m) = f
            .model
            .as_ref()
            .filter(|m| dir == Dir::Rx && m.rx_footprint_bytes > 0)
        {
            out.push(format!(
                "    RX rings together need {} of DDIO's {} ({})",
                fmt_bytes(m.rx_footprint_bytes as f64),
                fmt_bytes(m.ddio_capacity_bytes as f64),
                pct_of(
                    Some(m.rx_footprint_bytes as f64),
                    Some(m.ddio_capacity_bytes)
                )
            ));
        }
        out.push(String::new());
    }
    out.push(format!(
        "{:<3} {:<5} {:>41} {:>41} {:>4} {:>10} {:>10}",
        "DIR", "PROTO", "SOURCE", "DESTINATION", "Q", "MBIT/S", "PKTS/S"
    ));
    if f.flows.is_empty() {
        out.push("    (no flow traffic this interval)".into());
    }
    for fr in f.flows.iter().take(MAX_FLOWS) {
        let k = &fr.flow.key;
        out.push(format!(
            "{:<3} {:<5} {:>41} {:>41} {:>4} {:>10.1} {:>10.0}",
            k.dir.as_str(),
            k.proto,
            endpoint(&k.src, k.sport),
            endpoint(&k.dst, k.dport),
            fr.flow.queue,
            fr.bytes_per_s * 8.0 / 1e6,
            fr.packets_per_s
        ));
    }
    out
}

fn endpoint(addr: &str, port: u16) -> String {
    if addr.contains(':') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    }
}

fn pct_of(v: Option<f64>, cap: Option<u64>) -> String {
    match (v, cap) {
        (Some(v), Some(c)) if c > 0 => format!("{:.1}%", 100.0 * v / c as f64),
        _ => "-".into(),
    }
}

/// Repaint in place (no full clear, so no flicker), cut to the terminal's size.
fn draw(header: &[String], body: &[String]) -> Result<()> {
    let (w, h) = terminal::size().unwrap_or((80, 24));
    let mut out = io::stdout().lock();
    for (row, line) in header.iter().chain(body).take(h as usize).enumerate() {
        let cut: String = line.chars().take(w as usize).collect();
        queue!(
            out,
            cursor::MoveTo(0, row as u16),
            style::Print(cut),
            terminal::Clear(terminal::ClearType::UntilNewLine)
        )?;
    }
    queue!(out, terminal::Clear(terminal::ClearType::FromCursorDown))?;
    out.flush().context("writing to the terminal")?;
    Ok(())
}
