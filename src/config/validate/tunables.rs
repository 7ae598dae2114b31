//! Tunables: ranges, timers that contradict each other, and the floors an
//! untrusted entry is raised to.

use super::*;

impl Validator<'_> {
    /// Raise what an untrusted (http_sd) entry set below the least it may
    /// set: a remote source chooses how hard mcpmon works for its servers,
    /// and must not choose a tight loop (200 entries with a 1 ms backoff
    /// made 6 000 reconnects a second).
    pub(super) fn raise_to_floors(&mut self, s: &mut Settings, at: &[Seg], id: &str) {
        let ms = Duration::from_millis;
        let floors: [(&str, &mut Dur, Duration); 12] = [
            ("ping_interval", &mut s.ping_interval, ms(1000)),
            ("ping_timeout", &mut s.ping_timeout, ms(100)),
            ("connect_timeout", &mut s.connect_timeout, ms(1000)),
            ("request_timeout", &mut s.request_timeout, ms(1000)),
            ("max_request_timeout", &mut s.max_request_timeout, ms(1000)),
            (
                "health_check_interval",
                &mut s.health_check_interval,
                ms(1000),
            ),
            ("health_check_timeout", &mut s.health_check_timeout, ms(100)),
            ("tools_interval", &mut s.tools_interval, ms(10_000)),
            ("stuck_after", &mut s.stuck_after, ms(5000)),
            ("backoff_initial", &mut s.backoff_initial, ms(1000)),
            ("backoff_max", &mut s.backoff_max, ms(10_000)),
            (
                "backoff_reset_after",
                &mut s.backoff_reset_after,
                ms(10_000),
            ),
        ];
        let mut raised = Vec::new();
        for (name, value, floor) in floors {
            if value.0 < floor {
                value.0 = floor;
                raised.push((name, floor));
            }
        }
        s.backoff_max.0 = s.backoff_max.0.max(s.backoff_initial.0);
        if s.health_check_max_fields > REMOTE_MAX_FIELDS {
            s.health_check_max_fields = REMOTE_MAX_FIELDS;
            self.warn(
                &[at, &[Seg::key("health_check_max_fields")]].concat(),
                format!("server {id:?}: health_check_max_fields lowered to {REMOTE_MAX_FIELDS}, the most an http_sd entry may set"),
            );
        }
        for (name, floor) in raised {
            self.warn(
                &[at, &[Seg::key(name)]].concat(),
                format!(
                    "server {id:?}: {name} raised to {}, the least an http_sd entry may set",
                    humantime::format_duration(floor)
                ),
            );
        }
    }

    /// Range and consistency checks on tunables written at `at`.
    pub(super) fn check_tunables(&mut self, t: &TunablesFile, at: &[Seg]) {
        let key = |name: &str| under(at, name);
        let positive = [
            ("max_request_timeout", t.max_request_timeout),
            ("ping_interval", t.ping_interval),
            ("ping_timeout", t.ping_timeout),
            ("connect_timeout", t.connect_timeout),
            ("request_timeout", t.request_timeout),
            ("health_check_interval", t.health_check_interval),
            ("health_check_timeout", t.health_check_timeout),
            ("tools_interval", t.tools_interval),
            ("stuck_after", t.stuck_after),
            ("window", t.window),
            ("backoff_initial", t.backoff_initial),
            ("backoff_max", t.backoff_max),
        ];
        for (name, value) in positive {
            if value.is_some_and(|d| d.0.is_zero()) {
                self.error(&key(name), format!("{name} must be greater than zero"));
            }
        }
        if let (Some(initial), Some(max)) = (t.backoff_initial, t.backoff_max)
            && initial > max
        {
            self.error(
                &key("backoff_initial"),
                "backoff_initial is longer than backoff_max".to_owned(),
            );
        }
        for (name, v) in [("rise", t.rise), ("fall", t.fall)] {
            if v == Some(0) {
                self.error(&key(name), format!("{name} must be at least 1"));
            }
        }
        for (name, v) in [
            ("healthy_max_error_ratio", t.healthy_max_error_ratio),
            ("degraded_max_error_ratio", t.degraded_max_error_ratio),
        ] {
            if v.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
                self.error(&key(name), format!("{name} must be between 0 and 1"));
            }
        }
        if let Some(p) = &t.protocol
            && p != "auto"
            && !KNOWN_VERSIONS.contains(&p.as_str())
        {
            self.error(
                &key("protocol"),
                format!(
                    "unknown protocol {p:?}; use auto or one of {}",
                    KNOWN_VERSIONS.join(", ")
                ),
            );
        }
        if let Some(slo) = &t.slo {
            for (name, message) in slo.problems() {
                self.error(&under(&key("slo"), name), message);
            }
        }
    }

    /// The timers must not contradict each other (errors) and should leave
    /// room for judgement (warnings). `at` is where they were written; `owns`
    /// says which keys were written there, so that a server is only told
    /// about problems its own keys take part in.
    pub(super) fn check_timers(
        &mut self,
        s: &Settings,
        at: &[Seg],
        who: &str,
        owns: &dyn Fn(&str) -> bool,
    ) {
        for c in timer_conflicts(s) {
            // Point at the first key involved that was written here; a
            // conflict among keys all written elsewhere is reported there.
            let Some(written) = c.keys.iter().find(|k| owns(k)) else {
                continue;
            };
            let p = under(at, written);
            let message = format!("{who}{}", c.message);
            match c.severity {
                Severity::Error => self.error(&p, message),
                Severity::Warning => self.warn(&p, message),
            }
        }
    }
}

/// Whether a conflict stops the config from loading.
enum Severity {
    Error,
    Warning,
}

/// Timers that contradict each other, and the keys that take part.
struct Conflict {
    severity: Severity,
    keys: &'static [&'static str],
    message: String,
}

/// Every contradiction among resolved timers: a pure function of them.
fn timer_conflicts(s: &Settings) -> Vec<Conflict> {
    use Severity::{Error, Warning};
    let f = |d: Dur| humantime::format_duration(d.0).to_string();
    let conflict = |severity, keys, message| Conflict {
        severity,
        keys,
        message,
    };
    let mut found = Vec::new();
    if s.ping_timeout > s.ping_interval {
        found.push(conflict(
            Error,
            &["ping_timeout", "ping_interval"],
            format!(
                "ping_timeout ({}) is longer than ping_interval ({}): probes would overlap",
                f(s.ping_timeout),
                f(s.ping_interval)
            ),
        ));
    }
    if s.request_timeout > s.max_request_timeout {
        found.push(conflict(
            Error,
            &["request_timeout", "max_request_timeout"],
            format!(
                "request_timeout ({}) is longer than max_request_timeout ({})",
                f(s.request_timeout),
                f(s.max_request_timeout)
            ),
        ));
    }
    if s.stuck_after <= s.ping_timeout {
        found.push(conflict(
            Error,
            &["stuck_after", "ping_timeout"],
            format!(
                "stuck_after ({}) must be longer than ping_timeout ({}): every late answer would be judged stuck",
                f(s.stuck_after),
                f(s.ping_timeout)
            ),
        ));
    } else if s.stuck_after.0 < s.ping_interval.0 * 3 {
        found.push(conflict(
            Warning,
            &["stuck_after", "ping_interval"],
            format!(
                "stuck_after ({}) allows fewer than 3 liveness probes ({} apart) before a server is judged stuck and restarted",
                f(s.stuck_after),
                f(s.ping_interval)
            ),
        ));
    }
    if let Some(idle) = s.session_idle_limit {
        if s.ping_interval >= idle {
            found.push(conflict(
                Error,
                &["ping_interval", "session_idle_limit"],
                format!(
                    "ping_interval ({}) must be shorter than session_idle_limit ({}): the session would be cut between probes",
                    f(s.ping_interval),
                    f(idle)
                ),
            ));
        } else if s.ping_interval.0 * 5 > idle.0 * 4 {
            found.push(conflict(
                Warning,
                &["ping_interval", "session_idle_limit"],
                format!(
                    "ping_interval ({}) is within 20% of session_idle_limit ({})",
                    f(s.ping_interval),
                    f(idle)
                ),
            ));
        }
    }
    if s.ping_timeout.0 < Duration::from_millis(100) {
        found.push(conflict(
            Warning,
            &["ping_timeout"],
            format!(
                "ping_timeout ({}) is shorter than 100ms: scheduling noise alone will read as lateness",
                f(s.ping_timeout)
            ),
        ));
    }
    found
}
