//! Basic auth for mcpmon's endpoints, as the Prometheus exporter toolkit does
//! it: bcrypt hashes, checked so that
//! - an unknown user costs the same bcrypt as a wrong password (a dummy
//!   hash at the users' cost), so user names cannot be told by timing;
//! - bcrypt never runs more than [`BCRYPT_SLOTS`] at a time, on permits of
//!   its own: a flood of wrong passwords is answered 429 instead of taking
//!   the blocking pool that renders `/metrics` and resolves names;
//! - a successful (user, password) pair is remembered for [`CACHE_TTL`]
//!   under a keyed hash (never the password itself), so a scraper does not
//!   pay a bcrypt per scrape.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Most bcrypt checks running at once.
pub const BCRYPT_SLOTS: usize = 2;
impl Default for Auth {
    /// No users: nothing is ever checked.
    fn default() -> Self {
        Auth {
            users: BTreeMap::new(),
            dummy: String::new(),
            slots: Arc::new(Semaphore::new(BCRYPT_SLOTS)),
            key: RandomState::new(),
            cache: Mutex::new(HashMap::new()),
        }
    }
}

/// How long a successful check is remembered.
pub const CACHE_TTL: Duration = Duration::from_secs(60);
/// Most remembered checks; past this the cache starts afresh.
const CACHE_MAX: usize = 1024;

/// What a request's credentials amount to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid credentials.
    Allowed,
    /// Missing, malformed or wrong credentials.
    Denied,
    /// Every bcrypt slot is taken: try again later (429).
    Busy,
}

/// The configured users and what checking them needs.
pub struct Auth {
    users: BTreeMap<String, String>,
    /// A hash no password matches, at the users' cost.
    dummy: String,
    slots: Arc<Semaphore>,
    key: RandomState,
    cache: Mutex<HashMap<u64, Instant>>,
}

impl Auth {
    /// Checks against `users` (name → bcrypt hash).
    pub fn new(users: BTreeMap<String, String>) -> Auth {
        if users.is_empty() {
            return Auth::default();
        }
        let cost = users
            .values()
            .find_map(|h| h.split('$').nth(2)?.parse::<u32>().ok())
            .unwrap_or(bcrypt::DEFAULT_COST);
        // The password is random, so nothing ever matches the dummy.
        let random = format!("{:x}", RandomState::new().hash_one(Instant::now()));
        let dummy = bcrypt::hash(random, cost).unwrap_or_default();
        Auth {
            users,
            dummy,
            slots: Arc::new(Semaphore::new(BCRYPT_SLOTS)),
            key: RandomState::new(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Whether any user is configured.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    fn cache_key(&self, user: &str, password: &str) -> u64 {
        let mut h = self.key.build_hasher();
        user.hash(&mut h);
        password.hash(&mut h);
        h.finish()
    }

    /// Check an `Authorization` header value.
    pub async fn check(&self, header: Option<&str>) -> Verdict {
        let Some((user, password)) = header.and_then(parse_basic) else {
            return Verdict::Denied;
        };
        let key = self.cache_key(&user, &password);
        let now = Instant::now();
        {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.get(&key).is_some_and(|until| *until > now) {
                return Verdict::Allowed;
            }
        }
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return Verdict::Busy;
        };
        // Unknown users pay the same bcrypt as known ones.
        let (hash, known) = match self.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (self.dummy.clone(), false),
        };
        let ok = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            bcrypt::verify(password, &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        if !(ok && known) {
            return Verdict::Denied;
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, now + CACHE_TTL);
        Verdict::Allowed
    }
}

/// `Basic <base64 user:password>`, the scheme in any case (RFC 7617).
pub(crate) fn parse_basic(value: &str) -> Option<(String, String)> {
    use base64::Engine;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn basic(user: &str, password: &str) -> String {
        let raw = format!("{user}:{password}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }

    fn auth() -> Auth {
        let hash = bcrypt::hash("right", 4).expect("hash");
        Auth::new(BTreeMap::from([("prom".to_owned(), hash)]))
    }

    #[test]
    fn the_scheme_is_case_insensitive_and_malformed_values_are_refused() {
        let b = basic("u", "p:w");
        assert_eq!(parse_basic(&b), Some(("u".into(), "p:w".into())));
        assert_eq!(
            parse_basic(&b.replacen("Basic", "bASIC", 1)),
            Some(("u".into(), "p:w".into()))
        );
        assert_eq!(parse_basic("Bearer abc"), None);
        assert_eq!(parse_basic("Basic !!!"), None);
        assert_eq!(parse_basic("Basic"), None);
    }

    #[tokio::test]
    async fn right_wrong_and_unknown() {
        let a = auth();
        assert!(
            a.dummy.starts_with("$2b$04$"),
            "dummy at the users' cost: {}",
            a.dummy
        );
        assert_eq!(
            a.check(Some(&basic("prom", "right"))).await,
            Verdict::Allowed
        );
        assert_eq!(
            a.check(Some(&basic("prom", "wrong"))).await,
            Verdict::Denied
        );
        assert_eq!(
            a.check(Some(&basic("nobody", "right"))).await,
            Verdict::Denied
        );
        assert_eq!(a.check(None).await, Verdict::Denied);
    }

    #[tokio::test]
    async fn a_success_is_remembered_and_a_full_pool_answers_busy() {
        let a = auth();
        assert_eq!(
            a.check(Some(&basic("prom", "right"))).await,
            Verdict::Allowed
        );
        // Every slot taken: a new check cannot run, a remembered one still passes.
        let held: Vec<_> = (0..BCRYPT_SLOTS)
            .map(|_| a.slots.clone().try_acquire_owned().expect("slot"))
            .collect();
        assert_eq!(a.check(Some(&basic("prom", "wrong"))).await, Verdict::Busy);
        assert_eq!(
            a.check(Some(&basic("prom", "right"))).await,
            Verdict::Allowed
        );
        drop(held);
        assert_eq!(
            a.check(Some(&basic("prom", "wrong"))).await,
            Verdict::Denied
        );
    }
}
