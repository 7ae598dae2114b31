//! What a supervisor carries from one session to the next: the backoff
//! between attempts, the era to try first, the session count (the owner's
//! stuck signal names a session by it), why the last one ended, and the
//! last certificate seen. A state type of its own, so the loop that opens
//! sessions holds one value instead of six loose locals.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::time::Instant;

use crate::config::Settings;
use crate::state::Loss;
use crate::transport::Era;
use crate::transport::tls::PeerCertificate;

/// One server's reconnection state.
pub(super) struct Reconnect {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
    max: Duration,
    reset_after: Duration,
    /// Why the last attempt or session ended (`None` before the first).
    pub(super) after: Option<Loss>,
    /// The era to try first: the one the last session settled.
    pub(super) era_hint: Option<Era>,
    /// Sessions opened so far; the latest's number.
    pub(super) sessions: u64,
    certificate: Option<PeerCertificate>,
}

impl Reconnect {
    /// Exponential backoff with jitter between `backoff_initial` and
    /// `backoff_max`, started afresh after a session that lasted
    /// `backoff_reset_after`.
    pub(super) fn new(s: &Settings) -> Self {
        let builder = ExponentialBuilder::default()
            .with_min_delay(s.backoff_initial.0)
            .with_max_delay(s.backoff_max.0)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Reconnect {
            delays: builder.build(),
            builder,
            max: s.backoff_max.0,
            reset_after: s.backoff_reset_after.0,
            after: None,
            era_hint: None,
            sessions: 0,
            certificate: None,
        }
    }

    /// A session opened, speaking what `remembered` says to try next
    /// time; its number.
    pub(super) fn opened(&mut self, remembered: Option<Era>) -> u64 {
        self.sessions += 1;
        self.era_hint = remembered;
        self.sessions
    }

    /// The attempt or session ended for `loss`; a session open since
    /// `opened_at` long enough starts the backoff afresh. How long to wait
    /// before the next attempt.
    pub(super) fn ended(&mut self, loss: Loss, opened_at: Option<Instant>) -> Duration {
        self.after = Some(loss);
        if opened_at.is_some_and(|at| at.elapsed() >= self.reset_after) {
            self.delays = self.builder.build();
        }
        self.delays.next().unwrap_or(self.max).min(self.max)
    }

    /// Whether `seen` is news: a certificate other than the last one.
    pub(super) fn certificate(&mut self, seen: Option<PeerCertificate>) -> Option<PeerCertificate> {
        let c = seen?;
        (self.certificate.replace(c) != Some(c)).then_some(c)
    }
}
