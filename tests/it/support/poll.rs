//! The one way the tests wait: poll until a check passes, bounded, and
//! say what was last seen when it does not.

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
