//! Durations as the config file and the flags write them (`250ms`, `5s`,
//! `2m`), parsed in one place and bounded, so no timer or date computed
//! from one can overflow.

use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

use super::defuse;

/// A duration written as `250ms`, `5s`, `2m`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map(Dur).map_err(|e| {
            de::Error::custom(format!(
                "invalid duration {:?} ({e}); write it like 250ms, 5s or 2m",
                defuse(&text, 40)
            ))
        })
    }
}

/// The longest duration accepted anywhere (ten years of 365.25 days):
/// every timer, every date a window computes from it and every deadline
/// stays far inside what clocks and dates can hold, and a longer one is a
/// typing mistake.
pub const MAX_DURATION: Duration = Duration::from_secs(315_576_000);

/// A duration written as `250ms`, `5s`, `2m`, at most [`MAX_DURATION`]:
/// the one parser of durations for the config file and the flags.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| e.to_string())?;
    if d > MAX_DURATION {
        return Err(format!(
            "over the longest accepted, {}",
            humantime::format_duration(MAX_DURATION)
        ));
    }
    Ok(d)
}
