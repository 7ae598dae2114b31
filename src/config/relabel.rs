//! `relabel_configs`, in Prometheus's shape and with its semantics: rules
//! applied in order to each discovered server's label set, which may keep
//! or drop the server, rewrite its id or URL, and rename or drop labels.
//!
//! A server's label set is its labels as its source wrote them (among them
//! the source's `__meta_*` labels), plus `__id__` (the server id),
//! `__url__` (its URL) and `__address__` (the URL's `host:port`). After
//! the rules, `__id__`, `__url__` and `__address__` are read back, and
//! every label whose name starts with `__` is removed, as Prometheus
//! removes them from a target.

use std::collections::BTreeMap;

use regex::Regex;
use serde::Deserialize;

/// A rule's action, as Prometheus names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Set `target_label` to `replacement`, expanded from the regex's
    /// groups, when the joined source labels match.
    #[default]
    Replace,
    /// Drop the server unless the joined source labels match.
    Keep,
    /// Drop the server when the joined source labels match.
    Drop,
    /// Keep only when the joined source labels equal `target_label`'s value.
    KeepEqual,
    /// Drop when the joined source labels equal `target_label`'s value.
    DropEqual,
    /// Set `target_label` to the MD5 of the joined source labels modulo
    /// `modulus` (for sharding across replicas).
    HashMod,
    /// Copy every label whose name matches to the name `replacement`
    /// expands to.
    LabelMap,
    /// Remove every label whose name matches.
    LabelDrop,
    /// Remove every label whose name does not match.
    LabelKeep,
    /// Set `target_label` to the joined source labels, lower case.
    Lowercase,
    /// Set `target_label` to the joined source labels, upper case.
    Uppercase,
}

/// One rule as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RelabelFile {
    #[serde(default)]
    source_labels: Vec<String>,
    separator: Option<String>,
    regex: Option<String>,
    target_label: Option<String>,
    replacement: Option<String>,
    #[serde(default)]
    action: Action,
    modulus: Option<u64>,
}

/// One rule, checked and compiled.
#[derive(Clone, Debug)]
pub struct Relabel {
    source_labels: Vec<String>,
    separator: String,
    /// Anchored at both ends, as Prometheus anchors it.
    regex: Regex,
    target_label: String,
    replacement: String,
    action: Action,
    modulus: u64,
}

impl PartialEq for Relabel {
    fn eq(&self, other: &Relabel) -> bool {
        self.source_labels == other.source_labels
            && self.separator == other.separator
            && self.regex.as_str() == other.regex.as_str()
            && self.target_label == other.target_label
            && self.replacement == other.replacement
            && self.action == other.action
            && self.modulus == other.modulus
    }
}

impl RelabelFile {
    /// The rule, or what is wrong with it (naming the field).
    pub(super) fn check(self) -> Result<Relabel, String> {
        let pattern = self.regex.unwrap_or_else(|| "(.*)".to_owned());
        let regex = Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|e| format!("regex {pattern:?} does not compile: {e}"))?;
        let needs_target = matches!(
            self.action,
            Action::Replace
                | Action::HashMod
                | Action::KeepEqual
                | Action::DropEqual
                | Action::Lowercase
                | Action::Uppercase
        );
        let target_label = self.target_label.unwrap_or_default();
        if needs_target && target_label.is_empty() {
            return Err(format!(
                "action {:?} needs a target_label",
                action_name(self.action)
            ));
        }
        let modulus = self.modulus.unwrap_or(0);
        if self.action == Action::HashMod && modulus == 0 {
            return Err("action \"hashmod\" needs a modulus greater than zero".to_owned());
        }
        let label_action = matches!(
            self.action,
            Action::LabelMap | Action::LabelDrop | Action::LabelKeep
        );
        if label_action && !self.source_labels.is_empty() {
            return Err(format!(
                "action {:?} matches label names, not source_labels",
                action_name(self.action)
            ));
        }
        Ok(Relabel {
            source_labels: self.source_labels,
            separator: self.separator.unwrap_or_else(|| ";".to_owned()),
            regex,
            target_label,
            replacement: self.replacement.unwrap_or_else(|| "$1".to_owned()),
            action: self.action,
            modulus,
        })
    }
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Replace => "replace",
        Action::Keep => "keep",
        Action::Drop => "drop",
        Action::KeepEqual => "keepequal",
        Action::DropEqual => "dropequal",
        Action::HashMod => "hashmod",
        Action::LabelMap => "labelmap",
        Action::LabelDrop => "labeldrop",
        Action::LabelKeep => "labelkeep",
        Action::Lowercase => "lowercase",
        Action::Uppercase => "uppercase",
    }
}

/// Apply `rules` in order to `labels`; false when a rule drops the server
/// (the labels are then of no further use).
pub fn apply(rules: &[Relabel], labels: &mut BTreeMap<String, String>) -> bool {
    rules.iter().all(|rule| rule.apply(labels))
}

impl Relabel {
    fn apply(&self, labels: &mut BTreeMap<String, String>) -> bool {
        let joined = || {
            let values: Vec<&str> = self
                .source_labels
                .iter()
                .map(|name| labels.get(name).map_or("", String::as_str))
                .collect();
            values.join(&self.separator)
        };
        match self.action {
            Action::Keep => self.regex.is_match(&joined()),
            Action::Drop => !self.regex.is_match(&joined()),
            Action::KeepEqual => {
                labels.get(&self.target_label).map(String::as_str) == Some(&joined())
            }
            Action::DropEqual => {
                labels.get(&self.target_label).map(String::as_str) != Some(&joined())
            }
            Action::Replace => {
                let value = joined();
                let Some(caps) = self.regex.captures(&value) else {
                    return true;
                };
                let mut target = String::new();
                caps.expand(&self.target_label, &mut target);
                let mut replaced = String::new();
                caps.expand(&self.replacement, &mut replaced);
                if target.is_empty() {
                    return true;
                }
                if replaced.is_empty() {
                    labels.remove(&target);
                } else {
                    labels.insert(target, replaced);
                }
                true
            }
            Action::Lowercase => {
                labels.insert(self.target_label.clone(), joined().to_lowercase());
                true
            }
            Action::Uppercase => {
                labels.insert(self.target_label.clone(), joined().to_uppercase());
                true
            }
            Action::HashMod => {
                let bucket = hashmod(&joined(), self.modulus);
                labels.insert(self.target_label.clone(), bucket.to_string());
                true
            }
            Action::LabelMap => {
                let mapped: Vec<(String, String)> = labels
                    .iter()
                    .filter_map(|(name, value)| {
                        let caps = self.regex.captures(name)?;
                        let mut to = String::new();
                        caps.expand(&self.replacement, &mut to);
                        Some((to, value.clone()))
                    })
                    .collect();
                labels.extend(mapped);
                true
            }
            Action::LabelDrop => {
                labels.retain(|name, _| !self.regex.is_match(name));
                true
            }
            Action::LabelKeep => {
                labels.retain(|name, _| self.regex.is_match(name));
                true
            }
        }
    }
}

/// Relabel one discovered entry as written: its id, URL and labels go in
/// as the label set described above and come back rewritten, without the
/// `__` labels. False when a rule drops it. With no rules this only
/// removes the `__` labels a source wrote for rules to read.
pub(super) fn entry(
    rules: &[Relabel],
    id: &mut String,
    url: &mut Option<String>,
    labels: &mut BTreeMap<String, String>,
) -> bool {
    if rules.is_empty() {
        labels.retain(|name, _| !name.starts_with("__"));
        return true;
    }
    let address = url.as_deref().and_then(address_of);
    let mut set = std::mem::take(labels);
    set.insert(ID.to_owned(), std::mem::take(id));
    if let Some(u) = url {
        set.insert(URL.to_owned(), u.clone());
    }
    if let Some(a) = &address {
        set.insert(ADDRESS.to_owned(), a.clone());
    }
    if !apply(rules, &mut set) {
        return false;
    }
    *id = set.remove(ID).unwrap_or_default();
    let new_url = set.remove(URL);
    let new_address = set.remove(ADDRESS);
    if new_url.as_deref() != url.as_deref() {
        *url = new_url;
    } else if new_address != address
        && let (Some(u), Some(a)) = (url.as_deref(), new_address)
    {
        *url = Some(with_address(u, &a));
    }
    set.retain(|name, _| !name.starts_with("__"));
    *labels = set;
    true
}

const ID: &str = "__id__";
const URL: &str = "__url__";
const ADDRESS: &str = "__address__";

/// A URL's `host:port`, the port written out when the scheme implies it.
fn address_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    let host = match u.host()? {
        url::Host::Ipv6(ip) => format!("[{ip}]"),
        h => h.to_string(),
    };
    Some(format!("{host}:{}", u.port_or_known_default()?))
}

/// `url` aimed at `address` (`host:port`) instead, the rest kept; as
/// written when `address` cannot stand in a URL (validation then says so).
fn with_address(url: &str, address: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let path = rest.find('/').map_or("", |i| &rest[i..]);
            format!("{scheme}://{address}{path}")
        }
        None => url.to_owned(),
    }
}

/// Prometheus's `hashmod`: MD5 of `value`, its last 8 bytes as a
/// big-endian u64 (the first eight shift out of a 64-bit word in Go's
/// `sum64`), modulo `modulus` (which must not be 0).
pub fn hashmod(value: &str, modulus: u64) -> u64 {
    use md5::Digest;
    let sum = md5::Md5::digest(value.as_bytes());
    let mut tail = [0u8; 8];
    tail.copy_from_slice(&sum[8..16]);
    u64::from_be_bytes(tail) % modulus
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(yaml: &str) -> Relabel {
        let file: RelabelFile = yaml_serde::from_str(yaml).expect("rule parses");
        file.check().expect("rule checks")
    }

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn replace_expands_groups_into_the_target_and_an_empty_result_removes_it() {
        let r = rule(
            "{source_labels: [__meta_kubernetes_namespace, __meta_kubernetes_name], separator: /, regex: '(.+)/(.+)', target_label: __id__, replacement: '${1}-$2'}",
        );
        let mut l = set(&[
            ("__meta_kubernetes_namespace", "team-a"),
            ("__meta_kubernetes_name", "search"),
            ("__id__", "x"),
        ]);
        assert!(apply(std::slice::from_ref(&r), &mut l));
        assert_eq!(l["__id__"], "team-a-search");
        // No match: nothing changes.
        let mut l = set(&[("__id__", "x")]);
        assert!(apply(&[r], &mut l));
        assert_eq!(l["__id__"], "x");
        let clear = rule("{source_labels: [a], regex: 'gone', target_label: b, replacement: ''}");
        let mut l = set(&[("a", "gone"), ("b", "here")]);
        apply(&[clear], &mut l);
        assert!(!l.contains_key("b"));
    }

    #[test]
    fn the_regex_is_anchored_at_both_ends() {
        let keep = rule("{source_labels: [a], regex: 'b', action: keep}");
        assert!(!apply(
            std::slice::from_ref(&keep),
            &mut set(&[("a", "abc")])
        ));
        assert!(apply(&[keep], &mut set(&[("a", "b")])));
    }

    #[test]
    fn keep_and_drop_decide_on_the_joined_sources_and_a_missing_label_is_empty() {
        let drop = rule("{source_labels: [a, b], regex: 'x;', action: drop}");
        assert!(!apply(std::slice::from_ref(&drop), &mut set(&[("a", "x")])));
        assert!(apply(&[drop], &mut set(&[("a", "x"), ("b", "y")])));
        let keep = rule("{source_labels: [a], regex: '.+', action: keep}");
        assert!(!apply(&[keep], &mut set(&[])));
    }

    #[test]
    fn keepequal_and_dropequal_compare_with_the_target_label() {
        let keep = rule("{source_labels: [a], target_label: b, action: keepequal}");
        assert!(apply(
            std::slice::from_ref(&keep),
            &mut set(&[("a", "1"), ("b", "1")])
        ));
        assert!(!apply(&[keep], &mut set(&[("a", "1"), ("b", "2")])));
        let drop = rule("{source_labels: [a], target_label: b, action: dropequal}");
        assert!(!apply(&[drop], &mut set(&[("a", "1"), ("b", "1")])));
    }

    #[test]
    fn hashmod_matches_prometheus() {
        // Prometheus's own case (model/relabel/relabel_test.go): "baz"
        // modulo 1000 is 976.
        let r = rule("{source_labels: [c], target_label: d, action: hashmod, modulus: 1000}");
        let mut l = set(&[("c", "baz")]);
        apply(&[r], &mut l);
        assert_eq!(l["d"], "976");
    }

    #[test]
    fn labelmap_copies_matching_names_and_labeldrop_and_labelkeep_filter_names() {
        let map = rule(
            "{action: labelmap, regex: '__meta_kubernetes_label_(.+)', replacement: 'k8s_$1'}",
        );
        let mut l = set(&[("__meta_kubernetes_label_app", "search"), ("team", "a")]);
        apply(&[map], &mut l);
        assert_eq!(l["k8s_app"], "search");
        assert_eq!(l["__meta_kubernetes_label_app"], "search");
        let drop = rule("{action: labeldrop, regex: 'team'}");
        apply(&[drop], &mut l);
        assert!(!l.contains_key("team"));
        let keep = rule("{action: labelkeep, regex: 'k8s_.*'}");
        apply(&[keep], &mut l);
        assert_eq!(l.keys().collect::<Vec<_>>(), ["k8s_app"]);
    }

    #[test]
    fn lowercase_and_uppercase_set_the_target() {
        let lower = rule("{source_labels: [a], target_label: b, action: lowercase}");
        let upper = rule("{source_labels: [a], target_label: c, action: uppercase}");
        let mut l = set(&[("a", "MiXed")]);
        apply(&[lower, upper], &mut l);
        assert_eq!((l["b"].as_str(), l["c"].as_str()), ("mixed", "MIXED"));
    }

    #[test]
    fn an_entry_is_read_and_written_back_through_its_label_set() {
        let rules = [
            rule(
                "{source_labels: [__meta_kubernetes_namespace], regex: 'kube-system', action: drop}",
            ),
            rule(
                "{source_labels: [__address__], regex: '.*', target_label: __address__, replacement: '127.0.0.1:4000'}",
            ),
            rule(
                "{source_labels: [__meta_kubernetes_namespace, __id__], separator: '.', target_label: __id__, regex: '(.*)'}",
            ),
            rule("{action: labelmap, regex: '__meta_kubernetes_label_(.+)'}"),
        ];
        let mut id = "search".to_owned();
        let mut url = Some("http://search.team-a.svc:8080/mcp?x=1".to_owned());
        let mut labels = set(&[
            ("__meta_kubernetes_namespace", "team-a"),
            ("__meta_kubernetes_label_app", "search"),
            ("team", "a"),
        ]);
        assert!(entry(&rules, &mut id, &mut url, &mut labels));
        assert_eq!(id, "team-a.search");
        assert_eq!(url.as_deref(), Some("http://127.0.0.1:4000/mcp?x=1"));
        assert_eq!(labels, set(&[("app", "search"), ("team", "a")]));
        let mut labels = set(&[("__meta_kubernetes_namespace", "kube-system")]);
        assert!(!entry(&rules, &mut id, &mut url, &mut labels));
    }

    #[test]
    fn without_rules_only_the_double_underscore_labels_go() {
        let mut id = "a".to_owned();
        let mut url = Some("http://h/mcp".to_owned());
        let mut labels = set(&[("__meta_x", "1"), ("team", "a")]);
        assert!(entry(&[], &mut id, &mut url, &mut labels));
        assert_eq!((id.as_str(), url.as_deref()), ("a", Some("http://h/mcp")));
        assert_eq!(labels, set(&[("team", "a")]));
    }

    #[test]
    fn rules_that_cannot_work_are_refused_with_what_is_missing() {
        let check = |yaml: &str| {
            let file: RelabelFile = yaml_serde::from_str(yaml).expect("parses");
            file.check().expect_err("refused")
        };
        assert!(check("{regex: '('}").contains("does not compile"));
        assert!(check("{source_labels: [a]}").contains("needs a target_label"));
        assert!(
            check("{source_labels: [a], target_label: b, action: hashmod}").contains("modulus")
        );
        assert!(check("{source_labels: [a], action: labeldrop}").contains("label names"));
    }
}
