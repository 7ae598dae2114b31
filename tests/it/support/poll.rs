//! The one way the tests wait: poll until a check passes, bounded, and
//! say what was last seen when it does not ([`eventually`]); or, for a
//! claim about a stretch of time ("never unhealthy while throttled"),
//! check every reading across it ([`throughout`]).

use std::fmt::Debug;
use std::time::{Duration, Instant};

/// How often a check is tried again.
pub const POLL_EVERY: Duration = Duration::from_millis(25);

/// Try `check` every [`POLL_EVERY`] until it gives `Ok`; panic naming
/// `what` and the last `Err` once `within` has passed.
pub async fn eventually<T, E: Debug>(
    what: &str,
    within: Duration,
    mut check: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok(done) => return done,
            Err(last) => last,
        };
        assert!(
            start.elapsed() < within,
            "{what}: not within {within:?}; last seen: {last:#?}"
        );
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Run `check` every `every` for `window`; it asserts what must hold at
/// each reading. How many readings were taken.
pub async fn throughout(window: Duration, every: Duration, mut check: impl AsyncFnMut()) -> u32 {
    let start = Instant::now();
    let mut readings = 0;
    while start.elapsed() < window {
        check().await;
        readings += 1;
        tokio::time::sleep(every).await;
    }
    readings
}
