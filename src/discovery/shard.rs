//! Horizontal sharding by a stable hash, the kube-state-metrics way: each
//! replica monitors the servers whose id hashes to its index. The hash is
//! Prometheus's `hashmod` relabel action (MD5 of the value, the last 8
//! bytes as a big-endian u64, modulo the count), so an operator can
//! reproduce the assignment with a relabel rule or one line of Python:
//!
//! ```text
//! int.from_bytes(hashlib.md5(id.encode()).digest()[8:], "big") % count
//! ```

/// This replica's share of the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Which share, `0..count`.
    pub index: u64,
    /// How many replicas split the fleet.
    pub count: u64,
}

/// A shard that cannot be.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShardError {
    /// `--shard.count 0`.
    #[error("--shard.count must be at least 1")]
    NoShards,
    /// The index is not below the count.
    #[error("shard index {index} is out of range for --shard.count {count} (0..{count})")]
    OutOfRange {
        /// The index asked for.
        index: u64,
        /// The count.
        count: u64,
    },
    /// The host name has no `-<ordinal>` suffix.
    #[error("host name {0:?} does not end in -<ordinal> (a StatefulSet pod name such as mcpmon-2)")]
    NoOrdinal(String),
}

impl Default for Shard {
    fn default() -> Self {
        Shard { index: 0, count: 1 }
    }
}

impl Shard {
    /// Shard `index` of `count`.
    pub fn new(index: u64, count: u64) -> Result<Shard, ShardError> {
        if count == 0 {
            return Err(ShardError::NoShards);
        }
        if index >= count {
            return Err(ShardError::OutOfRange { index, count });
        }
        Ok(Shard { index, count })
    }

    /// The index from a StatefulSet pod's host name (`mcpmon-2` is 2).
    pub fn from_hostname(hostname: &str, count: u64) -> Result<Shard, ShardError> {
        // A FQDN's first label is the pod name.
        let pod = hostname.split('.').next().unwrap_or(hostname);
        let index = pod
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse::<u64>().ok())
            .ok_or_else(|| ShardError::NoOrdinal(hostname.to_owned()))?;
        Shard::new(index, count)
    }

    /// Whether this replica monitors `id`.
    pub fn owns(&self, id: &str) -> bool {
        self.count == 1 || hashmod(id, self.count) == self.index
    }
}

pub use crate::config::relabel::hashmod;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashmod_matches_prometheus_and_the_python_one_liner() {
        // Values from the one-liner in the module doc.
        for (id, n, want) in [
            ("a", 3, 1),
            ("mcp-1", 3, 0),
            ("payments-api", 5, 1),
            ("x", 1, 0),
            ("server-17", 7, 1),
        ] {
            assert_eq!(hashmod(id, n), want, "{id} mod {n}");
        }
        assert_eq!(hashmod("a", u64::MAX), 3585878926028121697);
    }

    #[test]
    fn every_id_is_owned_by_exactly_one_shard() {
        let shards: Vec<Shard> = (0..3).map(|i| Shard::new(i, 3).unwrap()).collect();
        for i in 0..500 {
            let id = format!("server-{i}");
            assert_eq!(shards.iter().filter(|s| s.owns(&id)).count(), 1, "{id}");
        }
        assert!(Shard::default().owns("anything"));
    }

    #[test]
    fn the_index_comes_from_a_statefulset_ordinal() {
        assert_eq!(
            Shard::from_hostname("mcpmon-2", 3),
            Ok(Shard { index: 2, count: 3 })
        );
        assert_eq!(
            Shard::from_hostname("mcpmon-0.mcpmon.monitoring.svc.cluster.local", 3),
            Ok(Shard { index: 0, count: 3 })
        );
        assert_eq!(
            Shard::from_hostname("mcpmon-3", 3),
            Err(ShardError::OutOfRange { index: 3, count: 3 })
        );
        assert!(matches!(
            Shard::from_hostname("mcpmon", 3),
            Err(ShardError::NoOrdinal(_))
        ));
        assert!(matches!(
            Shard::from_hostname("mcpmon-x", 3),
            Err(ShardError::NoOrdinal(_))
        ));
        assert_eq!(Shard::new(0, 0), Err(ShardError::NoShards));
    }
}
