//! The state owner: the one task that writes fleet state. Supervisors send
//! it [`Msg`]s; it runs each server's evidence tracker and the verdict,
//! keeps each server's counters, and publishes numbered [`Snapshot`]s
//! through a [`Publisher`]. Readers never hold a lock across I/O, and
//! because a server's status and counters are published together,
//! `/metrics` and `/health` of one generation always agree.
//!
//! What one observation changes for its server is `Entry::apply`'s to
//! say; this
//! file keeps the fleet: servers added and removed, the running counts,
//! maintenance windows, readiness and publishing.
//!
//! Publishing is driven by messages and by readers: news (a verdict, a
//! reason, a window, a server come or gone) is published within
//! [`PUBLISH_EVERY`], and what only counts waits for a reader's ask (see
//! [`super::reader`]), or for as long as readers that cannot ask allow
//! ([`Publisher::unasked`]; with none, it waits). An idle fleet wakes the
//! owner for nothing, and a probe is one message, its answer or its
//! lateness.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::entry::Entry;
use super::evidence::Tracker;
use super::operations::Operations;
use super::reader::{Ask, Publisher};
use super::series::Series;
use super::servers::Slot;
use super::snapshot::{ServerRecord, Snapshot, Summary};
use super::verdict::{Reason, State, Transition};
use super::{Msg, Observation};
#[cfg(test)]
use crate::config::Settings;
use crate::config::{FleetPolicy, ServerSpec, TransportSpec};

/// Longest delay between a change and its appearance in snapshots.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// Where the owner's timer waits when nothing is due: far enough that it
/// never fires, near enough that no clock arithmetic overflows.
const NOTHING_DUE: Duration = Duration::from_secs(365 * 24 * 3600);

/// By when a change applied at `now` must be published, if at all
/// unasked: news within [`PUBLISH_EVERY`] of the last publish; the rest
/// within `unasked`, when readers that cannot ask need it (see
/// [`Publisher::unasked`]). A record is copied out of the owner's hands by
/// the first write after each publish that shares it, so publishing what
/// only counts no more often than it is read spares a copy per probe.
fn publish_by(
    news: bool,
    now: Instant,
    last_publish: Instant,
    unasked: Option<Duration>,
) -> Option<Instant> {
    if news {
        Some((last_publish + PUBLISH_EVERY).max(now))
    } else {
        unasked.map(|lag| now + lag)
    }
}

/// The owner's state; [`run`] drives it, tests call [`Owner::apply`] directly.
pub struct Owner {
    /// Each server's slot in the snapshot's servers, and its entry: one
    /// lookup per message finds both. The entry is boxed: it is over a
    /// kilobyte, and the table keeps its values inline in up to twice as
    /// many buckets as there are servers.
    entries: HashMap<Arc<str>, (Slot, Box<Entry>)>,
    snap: Snapshot,
    expected: usize,
    ops: Option<Arc<dyn Operations>>,
    windows: Arc<[crate::config::maintenance::Window]>,
}

impl Owner {
    /// An owner for a fleet of `expected` servers under `policy`.
    pub fn new(policy: FleetPolicy, expected: usize) -> Self {
        Owner {
            entries: HashMap::new(),
            snap: Snapshot {
                policy,
                ..Snapshot::default()
            },
            expected,
            ops: None,
            windows: Arc::from(Vec::new()),
        }
    }

    /// Tell `ops` about every probe and session end from now on.
    pub fn with_operations(mut self, ops: Option<Arc<dyn Operations>>) -> Self {
        self.ops = ops;
        self
    }

    /// Apply one message at `now`; whether it is news: a server come or
    /// gone, or its verdict, reason or window changed (published within
    /// [`PUBLISH_EVERY`]; the rest waits for a reader's ask, or as long as
    /// [`Publisher::unasked`] allows).
    pub fn apply(&mut self, msg: Msg, now: Instant) -> bool {
        match msg {
            Msg::Add { spec, stuck } => self.add(&spec, stuck, now),
            Msg::Remove(id) => {
                self.entries.remove(&id);
                if let Some(old) = self.snap.servers.remove(&id) {
                    count(&mut self.snap.counts, key(&old.status), -1);
                }
            }
            Msg::Said(id, word) => {
                let slot = self.entries.get(&id).map(|(slot, _)| *slot);
                if let Some(record) = slot.and_then(|s| self.snap.servers.slot_mut(s)) {
                    Arc::make_mut(&mut Arc::make_mut(record).status).operator = word;
                }
            }
            Msg::Policy(p) => self.snap.policy = p,
            Msg::Maintenance(windows) => self.windows = windows,
            Msg::Discovery(news) => self.snap.discovery.record(news),
            Msg::Server(id, event) => return self.event(&id, event, now),
        }
        true
    }

    fn add(&mut self, spec: &ServerSpec, stuck: tokio::sync::watch::Sender<u64>, now: Instant) {
        let tracker = Tracker::new(spec, now);
        // One allocation of the id, shared by the table's key, the entry's
        // logs and every copy of the status.
        let id = tracker.status().id.clone();
        let tools: Vec<String> = spec.probes.tools.iter().map(|t| t.tool.clone()).collect();
        let mut status = tracker.status().clone();
        status.maintenance = maintenance(&self.windows, &status);
        let mut record = ServerRecord {
            status: Arc::new(status),
            series: Series::new(&crate::probe::kinds(spec), &link_reasons(spec), &tools),
        };
        record.series.uptime.enter(now, key(&record.status));
        count(&mut self.snap.counts, key(&record.status), 1);
        let (slot, old) = self.snap.servers.insert(id.clone(), Arc::new(record));
        if let Some(old) = old {
            count(&mut self.snap.counts, key(&old.status), -1);
        }
        self.entries
            .insert(id, (slot, Box::new(Entry::new(spec, tracker, stuck))));
    }

    /// Apply what a server's supervisor observed; whether its verdict,
    /// reason or window changed.
    fn event(&mut self, id: &Arc<str>, obs: Observation, now: Instant) -> bool {
        // Observations of a server already removed are late news; drop them.
        let Some((slot, entry)) = self.entries.get_mut(id) else {
            return false;
        };
        let Some(record) = self.snap.servers.slot_mut(*slot) else {
            return false;
        };
        let before = key(&record.status);
        let reason = record.status.reason;
        // A snapshot published since the last write (for news or a reader)
        // shares the record: copying it copies the series, whose counters
        // stay shared until written, and the status is copied only when
        // there is a new verdict, from it. Otherwise it is the owner's alone.
        let record = Arc::make_mut(record);
        let applied = entry.apply(&mut record.series, obs, now);
        if let Some(tr) = applied.transition {
            record.series.state_changes += 1;
            log_transition(id, tr, &entry.tracker.status().detail);
        }
        entry.rebuild_if_stuck(now);
        // Observations that only count leave the verdict as it was.
        if applied.judged {
            let mut status = entry.tracker.status().clone();
            status.maintenance = record.status.maintenance.clone();
            status.operator = record.status.operator.clone();
            record.status = Arc::new(status);
        }
        // Windows open and close with the clock: looked at on every event,
        // and a server hears of one at least every probe interval.
        let open = maintenance(&self.windows, &record.status);
        if open != record.status.maintenance {
            Arc::make_mut(&mut record.status).maintenance = open;
        }
        if before != key(&record.status) {
            count(&mut self.snap.counts, before, -1);
            count(&mut self.snap.counts, key(&record.status), 1);
            record.series.uptime.enter(now, key(&record.status));
        }
        if let (Some(ops), Some(told)) = (&self.ops, applied.told) {
            told.tell(ops.as_ref(), &record.status, entry);
        }
        before != key(&record.status) || reason != record.status.reason
    }

    /// Latch readiness once every server has a verdict or `grace` passed.
    fn check_ready(&mut self, started: Instant, grace: Duration, now: Instant) -> bool {
        if self.snap.ready {
            return false;
        }
        let judged = self.snap.counts.total + self.snap.counts.maintenance >= self.expected
            && self.snap.counts.unknown == 0;
        if judged || now.saturating_duration_since(started) >= grace {
            self.snap.ready = true;
            tracing::info!(
                after_ms = now.saturating_duration_since(started).as_millis() as u64,
                "fleet ready"
            );
            return true;
        }
        false
    }

    /// The next snapshot (numbered one higher than the last). Records
    /// are shared with it until written, so the first write after it
    /// copies its server's record.
    pub fn publish(&mut self) -> Arc<Snapshot> {
        self.snap.generation += 1;
        Arc::new(self.snap.clone())
    }

    /// Running counts per state.
    #[cfg(test)]
    pub fn counts(&self) -> &Summary {
        &self.snap.counts
    }
}

/// The reasons a session of this transport can be rebuilt for: the link
/// failures that apply to it, and being judged stuck.
fn link_reasons(spec: &ServerSpec) -> Vec<Reason> {
    use strum::VariantArray;
    let stdio = matches!(spec.transport, TransportSpec::Stdio { .. });
    crate::transport::LinkFailure::VARIANTS
        .iter()
        .filter(|f| f.applies_to(stdio))
        .map(|f| Reason::from(*f))
        .chain([Reason::Stuck])
        .collect()
}

fn log_transition(id: &str, t: Transition, detail: &str) {
    tracing::info!(
        server = %id,
        from = t.from.as_str(),
        to = t.to.as_str(),
        reason = t.reason.as_str(),
        detail = %detail,
        "state changed"
    );
}

/// What the owner owes its readers: whether something applied is not
/// published yet, and by when it must be unasked.
struct Outbox {
    tx: watch::Sender<Arc<Snapshot>>,
    unasked: Option<Duration>,
    last: Instant,
    dirty: bool,
    due: Option<Instant>,
}

impl Outbox {
    /// Messages were applied at `now`; `news` if any of them was.
    fn applied(&mut self, news: bool, now: Instant) {
        self.dirty = true;
        if let Some(by) = publish_by(news, now, self.last, self.unasked) {
            self.due = Some(self.due.map_or(by, |at| at.min(by)));
        }
    }

    /// Something not applied through a message (readiness) must be
    /// published at once.
    fn due_now(&mut self, now: Instant) {
        (self.dirty, self.due) = (true, Some(now));
    }

    /// Publish whatever is unpublished, now.
    fn flush(&mut self, owner: &mut Owner, now: Instant) {
        if self.dirty {
            self.tx.send_replace(owner.publish());
            self.last = now;
        }
        (self.dirty, self.due) = (false, None);
    }

    /// Answer `ask`, and every ask queued behind it, with everything
    /// applied so far.
    fn answer(&mut self, ask: Ask, queued: &mut mpsc::Receiver<Ask>, owner: &mut Owner) {
        self.flush(owner, Instant::now());
        let snap = self.tx.borrow().clone();
        let _ = ask.send(snap.clone());
        while let Ok(ask) = queued.try_recv() {
            let _ = ask.send(snap.clone());
        }
    }
}

/// Run the state owner until cancelled, publishing through `out` and
/// answering its readers' asks. `grace` bounds how long `/-/ready` waits
/// for first verdicts.
pub async fn run(
    mut rx: mpsc::Receiver<Msg>,
    out: Publisher,
    policy: FleetPolicy,
    expected: usize,
    grace: Duration,
    ops: Option<Arc<dyn Operations>>,
    cancel: CancellationToken,
) {
    let started = Instant::now();
    let mut owner = Owner::new(policy, expected).with_operations(ops);
    let mut asks = out.asks;
    let mut outbox = Outbox {
        tx: out.published,
        unasked: out.unasked,
        last: started,
        dirty: true,
        due: Some(started),
    };
    // One timer and one cancellation waiter for the owner's life: built
    // afresh on every wake-up, each would register with the runtime and
    // deregister again, once or twice per probe of the fleet. The timer
    // is reset only when the deadline it waits for moves, as a
    // supervisor's schedule does. With nothing to wait for it is moved
    // out of reach: a deadline left behind (a quiet change's, published
    // early with news or for a reader) would still fire, and wake the
    // process for nothing.
    let cancelled = cancel.cancelled();
    tokio::pin!(cancelled);
    let timer = tokio::time::sleep_until(started);
    tokio::pin!(timer);
    loop {
        let ready_at = (!owner.snap.ready).then_some(started + grace);
        let wake = [outbox.due, ready_at].into_iter().flatten().min();
        match wake {
            Some(at) if timer.deadline() != at => timer.as_mut().reset(at),
            // Measured from now, not from the start: a process up longer
            // than NOTHING_DUE must not find the far deadline behind it.
            None if timer.deadline() < Instant::now() + NOTHING_DUE / 2 => {
                timer.as_mut().reset(Instant::now() + NOTHING_DUE);
            }
            _ => {}
        }
        // Biased: the order written, with no random draw per wake-up. Asks
        // first, so a reader waits for no burst of messages; then the
        // messages, so a wake-up for one polls nothing else. A busy channel
        // cannot starve publishing (checked below whatever woke the loop)
        // nor shutdown (checked here, an atomic load).
        if cancel.is_cancelled() {
            break;
        }
        tokio::select! {
            biased;
            Some(ask) = asks.recv() => {
                outbox.answer(ask, &mut asks, &mut owner);
                continue;
            }
            msg = rx.recv() => {
                let Some(msg) = msg else { break };
                let now = Instant::now();
                let mut news = owner.apply(msg, now);
                // Drain what is queued so a burst costs one publish.
                while let Ok(msg) = rx.try_recv() {
                    news |= owner.apply(msg, now);
                }
                outbox.applied(news, now);
            }
            () = &mut timer, if wake.is_some() => {}
            () = &mut cancelled => break,
        }
        let now = Instant::now();
        if owner.check_ready(started, grace, now) {
            // Readiness is published at once, not within the period.
            outbox.due_now(now);
        }
        if outbox.due.is_some_and(|at| at <= now) {
            outbox.flush(&mut owner, now);
        }
    }
    // What was applied and not yet published is the last word readers see
    // (the history's final flush among them).
    outbox.flush(&mut owner, Instant::now());
}

/// The window `status`'s server is in now, if one is open.
fn maintenance(
    windows: &[crate::config::maintenance::Window],
    status: &super::snapshot::ServerStatus,
) -> Option<super::snapshot::InMaintenance> {
    if windows.is_empty() {
        return None;
    }
    let now = chrono::Utc::now();
    windows
        .iter()
        .filter(|w| w.covers(&status.id, &status.labels))
        .find_map(|w| {
            let until = w.open_until(now)?;
            Some(super::snapshot::InMaintenance {
                window: Arc::from(w.name.as_str()),
                until: std::time::SystemTime::from(until),
            })
        })
}

/// What a server counts as: its state, and whether it is in maintenance.
fn key(status: &super::snapshot::ServerStatus) -> (State, bool) {
    (status.status, status.maintenance.is_some())
}

/// Add `delta` (±1) servers counted as `key` to the counts: by state, or
/// apart while in maintenance (neither for nor against the policy).
fn count(counts: &mut Summary, (state, in_maintenance): (State, bool), delta: isize) {
    if in_maintenance {
        counts.maintenance = counts.maintenance.saturating_add_signed(delta);
        return;
    }
    let slot = match state {
        State::Healthy => &mut counts.healthy,
        State::Degraded => &mut counts.degraded,
        State::Unhealthy => &mut counts.unhealthy,
        State::Unknown => &mut counts.unknown,
    };
    *slot = slot.saturating_add_signed(delta);
    counts.total = counts.total.saturating_add_signed(delta);
}

#[cfg(test)]
#[path = "owner_tests.rs"]
mod tests;
