//! Maintenance windows: planned work during which a server's probes go on
//! and its verdict stays visible, but it reads `maintenance`, counts
//! neither for nor against the fleet policy, and the shipped alerts stay
//! silent for it. A window is one span of time (`start`, `end`) or a cron
//! schedule with a `duration`, in a time zone; it covers servers by id or
//! by label. Everything here is a pure function of the time it is given.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::Dur;

/// One `maintenance:` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WindowFile {
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) servers: Vec<String>,
    #[serde(default)]
    pub(super) selector: BTreeMap<String, String>,
    pub(super) start: Option<String>,
    pub(super) end: Option<String>,
    pub(super) cron: Option<String>,
    pub(super) duration: Option<Dur>,
    pub(super) timezone: Option<String>,
}

/// When a window is open.
#[derive(Clone, Debug, PartialEq)]
pub enum When {
    /// Once, from `start` until `end`.
    Once {
        /// Opens.
        start: DateTime<Utc>,
        /// Closes.
        end: DateTime<Utc>,
    },
    /// At every start of `schedule` in `timezone`, for `duration`.
    Cron {
        /// As written (five fields, or six with seconds).
        source: String,
        /// Parsed.
        schedule: Box<cron::Schedule>,
        /// How long each opening lasts.
        duration: Duration,
        /// Where the schedule's clock hangs.
        timezone: chrono_tz::Tz,
    },
}

/// One maintenance window.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// Its name (a label value): given, or `maintenance[i]`.
    pub name: String,
    /// Servers by id.
    pub servers: Vec<String>,
    /// Servers by label: every pair must match.
    pub selector: BTreeMap<String, String>,
    /// When.
    pub when: When,
}

impl Window {
    /// Whether the window covers a server with this id and these labels.
    pub fn covers(&self, id: &str, labels: &[super::Label]) -> bool {
        self.servers.iter().any(|s| s == id)
            || (!self.selector.is_empty()
                && self
                    .selector
                    .iter()
                    .all(|(k, v)| labels.iter().any(|l| &l.name == k && &l.value == v)))
    }

    /// Whether the window is open at `now`; if so, until when.
    pub fn open_until(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.when {
            When::Once { start, end } => (*start <= now && now < *end).then_some(*end),
            When::Cron {
                schedule,
                duration,
                timezone,
                ..
            } => {
                let duration = chrono::Duration::from_std(*duration).ok()?;
                // The latest opening that could still be open started after
                // `now - duration`; the first start after that tells.
                // Checked: a date past chrono's range is no window, never a
                // panic in the state owner.
                let since = now.checked_sub_signed(duration)?.with_timezone(timezone);
                let opened = schedule.after(&since).next()?.with_timezone(&Utc);
                (opened <= now).then(|| opened.checked_add_signed(duration))?
            }
        }
    }

    /// The next time the window opens after `now`.
    pub fn next_start(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.when {
            When::Once { start, .. } => (*start > now).then_some(*start),
            When::Cron {
                schedule, timezone, ..
            } => schedule
                .after(&now.with_timezone(timezone))
                .next()
                .map(|t| t.with_timezone(&Utc)),
        }
    }
}

/// One line per window for `check-config`: its name, what it covers and
/// when it next opens (or that it is open now, or over).
pub fn describe(windows: &[Window], now: DateTime<Utc>) -> String {
    let mut out = String::new();
    for w in windows {
        let covers = if w.selector.is_empty() {
            format!("servers {}", w.servers.join(", "))
        } else {
            let sel: Vec<String> = w.selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("servers with {}", sel.join(", "))
        };
        let when = match (w.open_until(now), w.next_start(now)) {
            (Some(until), _) => format!("open now, until {}", until.to_rfc3339()),
            (None, Some(next)) => format!("next opens {}", next.to_rfc3339()),
            (None, None) => "over: it will not open again".to_owned(),
        };
        out.push_str(&format!("maintenance {:?} ({covers}): {when}\n", w.name));
    }
    out
}

/// The window `f` describes, or what is wrong with it (with the key it is
/// about).
pub(super) fn window(f: &WindowFile, index: usize) -> Result<Window, (&'static str, String)> {
    if f.servers.is_empty() && f.selector.is_empty() {
        return Err((
            "servers",
            "a window needs `servers` or a `selector`".to_owned(),
        ));
    }
    let time = |key: &'static str, v: &str| {
        DateTime::parse_from_rfc3339(v)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| (key, format!("{v:?} is not an RFC 3339 time: {e}")))
    };
    let when = match (&f.start, &f.end, &f.cron, &f.duration) {
        (Some(start), Some(end), None, None) => {
            let (start, end) = (time("start", start)?, time("end", end)?);
            if end <= start {
                return Err(("end", "`end` must come after `start`".to_owned()));
            }
            When::Once { start, end }
        }
        (None, None, Some(source), Some(duration)) => {
            // Five fields as crontab writes them; the crate wants seconds first.
            let fields = source.split_whitespace().count();
            let full = if fields == 5 {
                format!("0 {source}")
            } else {
                source.clone()
            };
            let schedule = cron::Schedule::from_str(&full)
                .map_err(|e| ("cron", format!("{source:?} is not a cron schedule: {e}")))?;
            let timezone = match &f.timezone {
                Some(tz) => chrono_tz::Tz::from_str(tz)
                    .map_err(|_| ("timezone", format!("{tz:?} is not an IANA time zone")))?,
                None => chrono_tz::UTC,
            };
            if duration.0.is_zero() {
                return Err(("duration", "`duration` must be above zero".to_owned()));
            }
            When::Cron {
                source: source.clone(),
                schedule: Box::new(schedule),
                duration: duration.0,
                timezone,
            }
        }
        _ => {
            return Err((
                "start",
                "a window is `start` and `end`, or `cron` and `duration`".to_owned(),
            ));
        }
    };
    Ok(Window {
        name: f
            .name
            .clone()
            .unwrap_or_else(|| format!("maintenance[{index}]")),
        servers: f.servers.clone(),
        selector: f.selector.clone(),
        when,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Window, (&'static str, String)> {
        let f: WindowFile = yaml_serde::from_str(yaml).expect("yaml");
        window(&f, 0)
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&Utc)
    }

    #[test]
    fn a_span_is_open_from_its_start_until_its_end() {
        let w = parse(
            "{servers: [billing], start: '2026-12-24T22:00:00Z', end: '2026-12-25T02:00:00Z'}",
        )
        .expect("valid");
        assert_eq!(w.name, "maintenance[0]");
        assert_eq!(w.open_until(at("2026-12-24T21:59:59Z")), None);
        assert_eq!(
            w.open_until(at("2026-12-24T22:00:00Z")),
            Some(at("2026-12-25T02:00:00Z"))
        );
        assert_eq!(
            w.open_until(at("2026-12-25T02:00:00Z")),
            None,
            "the end is not inside"
        );
        assert_eq!(
            w.next_start(at("2026-12-01T00:00:00Z")),
            Some(at("2026-12-24T22:00:00Z"))
        );
        assert_eq!(w.next_start(at("2026-12-25T00:00:00Z")), None);
    }

    #[test]
    fn a_cron_window_opens_in_its_time_zone_for_its_duration() {
        // 03:00 on Sundays in Paris: 02:00Z in winter, 01:00Z in summer.
        let w = parse("{name: weekly, selector: {team: search}, cron: '0 3 * * SUN', duration: 1h, timezone: Europe/Paris}")
            .expect("valid");
        assert_eq!(
            w.next_start(at("2026-12-01T00:00:00Z")),
            Some(at("2026-12-06T02:00:00Z"))
        );
        assert_eq!(w.open_until(at("2026-12-06T01:59:59Z")), None);
        assert_eq!(
            w.open_until(at("2026-12-06T02:00:00Z")),
            Some(at("2026-12-06T03:00:00Z"))
        );
        assert_eq!(
            w.open_until(at("2026-12-06T02:59:59Z")),
            Some(at("2026-12-06T03:00:00Z"))
        );
        assert_eq!(w.open_until(at("2026-12-06T03:00:00Z")), None);
        assert_eq!(
            w.next_start(at("2027-06-01T00:00:00Z")),
            Some(at("2027-06-06T01:00:00Z"))
        );
    }

    #[test]
    fn windows_cover_servers_by_id_or_by_every_label_of_the_selector() {
        let label = |n: &str, v: &str| super::super::Label {
            name: n.into(),
            exported: format!("label_{n}"),
            value: v.into(),
        };
        let w = parse("{servers: [a], selector: {team: search, env: prod}, start: '2026-01-01T00:00:00Z', end: '2026-01-02T00:00:00Z'}")
            .expect("valid");
        assert!(w.covers("a", &[]));
        assert!(w.covers("b", &[label("team", "search"), label("env", "prod")]));
        assert!(!w.covers("b", &[label("team", "search")]));
        assert!(!w.covers("b", &[]));
    }

    #[test]
    fn check_config_says_when_each_window_next_opens() {
        let once = parse("{name: xmas, servers: [billing], start: '2026-12-24T22:00:00Z', end: '2026-12-25T02:00:00Z'}")
            .expect("valid");
        let weekly = parse("{name: weekly, selector: {team: search}, cron: '0 3 * * SUN', duration: 1h, timezone: Europe/Paris}")
            .expect("valid");
        let text = describe(&[once, weekly], at("2026-12-01T00:00:00Z"));
        assert_eq!(
            text,
            "maintenance \"xmas\" (servers billing): next opens 2026-12-24T22:00:00+00:00\n\
             maintenance \"weekly\" (servers with team=search): next opens 2026-12-06T02:00:00+00:00\n"
        );
    }

    #[test]
    fn bad_windows_say_which_key_is_wrong() {
        let key = |yaml: &str| parse(yaml).expect_err("refused").0;
        assert_eq!(
            key("{start: '2026-01-01T00:00:00Z', end: '2026-01-02T00:00:00Z'}"),
            "servers"
        );
        assert_eq!(
            key("{servers: [a], start: 'tomorrow', end: '2026-01-02T00:00:00Z'}"),
            "start"
        );
        assert_eq!(
            key("{servers: [a], start: '2026-01-02T00:00:00Z', end: '2026-01-01T00:00:00Z'}"),
            "end"
        );
        assert_eq!(
            key("{servers: [a], cron: 'every day', duration: 1h}"),
            "cron"
        );
        assert_eq!(
            key("{servers: [a], cron: '0 3 * * *', duration: 1h, timezone: Mars/Olympus}"),
            "timezone"
        );
        assert_eq!(key("{servers: [a], cron: '0 3 * * *'}"), "start");
    }
}
