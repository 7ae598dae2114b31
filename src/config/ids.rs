//! Ids made unique among names that may collide: the first of a name keeps
//! it, the later ones get `-2`, `-3`, … . Each base remembers where its
//! count stands, so a source that lists forty thousand names alike costs
//! forty thousand claims, not their square.

use std::collections::{HashMap, HashSet};

/// The ids handed out so far.
#[derive(Debug, Default)]
pub struct UniqueIds {
    taken: HashSet<String>,
    /// The next suffix to try, per base that was taken.
    next: HashMap<String, usize>,
}

impl UniqueIds {
    /// `base` if it is free, else `base-N` for the lowest N from 2 on that
    /// this base has not tried yet and nobody holds.
    pub fn claim(&mut self, base: &str) -> String {
        if self.taken.insert(base.to_owned()) {
            return base.to_owned();
        }
        let n = self.next.entry(base.to_owned()).or_insert(2);
        loop {
            let id = format!("{base}-{n}");
            *n += 1;
            if self.taken.insert(id.clone()) {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_names_get_the_next_free_suffix() {
        let mut ids = UniqueIds::default();
        assert_eq!(ids.claim("a"), "a");
        assert_eq!(ids.claim("a-3"), "a-3");
        assert_eq!(ids.claim("a"), "a-2");
        // a-3 is held by a name of its own: skipped, not doubled.
        assert_eq!(ids.claim("a"), "a-4");
        assert_eq!(ids.claim("b"), "b");
        assert_eq!(ids.claim("a-2"), "a-2-2");
    }

    #[test]
    fn forty_thousand_equal_names_are_claimed_in_linear_time() {
        let mut ids = UniqueIds::default();
        let base = "x".repeat(64);
        // Counted, not timed: the number of candidates tried is the number
        // of claims, however many collide.
        let mut tried = 0usize;
        for i in 0..40_000 {
            let id = ids.claim(&base);
            tried += 1;
            if i > 0 {
                assert_eq!(id, format!("{base}-{}", i + 1));
            }
        }
        assert_eq!(ids.taken.len(), 40_000);
        assert_eq!(ids.next[&base], 40_001);
        assert_eq!(tried, 40_000);
    }
}
