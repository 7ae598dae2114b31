//! Merging, settling duplicates, keeping last good lists and sharding,
//! with documents handed in directly (no tasks, no I/O).

use std::path::{Path, PathBuf};

use super::*;

fn config(yaml: &str) -> Config {
    crate::config::parse(Path::new("/etc/mcpmon/fleet.yaml"), yaml, &|_| None).expect("valid")
}

const MAIN: &str = r#"
global: { ping_interval: 7s }
servers:
  - { id: static-a, transport: http, url: "http://127.0.0.1:1/mcp" }
file_sd_configs:
  - files: [sd/*.yaml]
    labels: { team: files }
http_sd_configs:
  - url: http://127.0.0.1:2/sd
    labels: { team: remote }
"#;

fn doc(origin: &str, text: &str) -> Document {
    Document {
        origin: PathBuf::from(origin),
        text: Ok(text.to_owned()),
    }
}

fn setup() -> (Config, Discovered, u64, u64) {
    let c = config(MAIN);
    let list: Vec<(u64, Source)> = sources(&c)
        .into_iter()
        .enumerate()
        .map(|(i, s)| (i as u64, s))
        .collect();
    let mut d = Discovered::default();
    d.set_sources(list, &c.global, false, Path::new("/etc/mcpmon"), &|_| None);
    (c, d, 0, 1)
}

/// Hand `source` one document read from `origin`, as its task would.
fn feed(d: &mut Discovered, c: &Config, source: u64, origin: &str, text: &str) -> Report {
    let update = Update {
        source,
        documents: vec![doc(origin, text)],
    };
    d.update(update, &c.global, Path::new("/etc/mcpmon"), &|_| None)
}

fn ids(r: &Resolved) -> Vec<&str> {
    r.servers.iter().map(|s| s.id.as_str()).collect()
}

#[test]
fn sources_merge_after_the_main_file_with_their_labels_and_globals() {
    let (c, mut d, file, http) = setup();
    let rep = feed(
        &mut d,
        &c,
        file,
        "/etc/mcpmon/sd/a.yaml",
        "- { id: f1, transport: stdio, command: ./srv, labels: { team: own } }\n- { id: f2, transport: http, url: \"http://h/mcp\" }\n",
    );
    assert!(
        rep.changed && rep.failures.is_empty() && rep.rejected.is_empty(),
        "{rep:?}"
    );
    feed(
        &mut d,
        &c,
        http,
        "http://127.0.0.1:2/sd",
        r#"[{"id":"h1","transport":"http","url":"http://h/mcp"}]"#,
    );
    let r = d.resolve(&c, Shard::default());
    assert_eq!(ids(&r), ["static-a", "f1", "f2", "h1"]);
    assert_eq!(r.counts[&Mechanism::File], 2);
    assert_eq!(r.counts[&Mechanism::Http], 1);
    let label = |id: &str| {
        let s = r.servers.iter().find(|s| s.id == id).unwrap();
        s.labels
            .iter()
            .find(|l| l.name == "team")
            .map(|l| l.value.clone())
    };
    assert_eq!(
        label("f1").as_deref(),
        Some("own"),
        "an entry's own label wins"
    );
    assert_eq!(label("f2").as_deref(), Some("files"));
    assert_eq!(label("h1").as_deref(), Some("remote"));
    // global: applies to discovered entries too.
    assert!(
        r.servers
            .iter()
            .all(|s| s.settings.ping_interval.0.as_secs() == 7)
    );
    // A relative command is read from the file's own directory.
    let f1 = r.servers.iter().find(|s| s.id == "f1").unwrap();
    match &f1.transport {
        crate::config::TransportSpec::Stdio { command, .. } => {
            assert_eq!(command, Path::new("/etc/mcpmon/sd/./srv"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_http_sd_entry_may_not_start_a_process_or_read_the_environment() {
    let (c, mut d, _, http) = setup();
    let body = r#"[
        {"id":"evil","transport":"stdio","command":"/bin/sh","args":["-c","touch /tmp/pwned"]},
        {"id":"leak","transport":"http","url":"http://h/${HOME}","bearer_token_env":"HOME"},
        {"id":"fine","transport":"http","url":"http://h/${HOME}"}
    ]"#;
    let env = |_: &str| Some("/root".to_owned());
    let rep = d.update(
        Update {
            source: http,
            documents: vec![doc("http://127.0.0.1:2/sd", body)],
        },
        &c.global,
        Path::new("/etc/mcpmon"),
        &env,
    );
    let reasons: Vec<(Mechanism, Rejection)> =
        rep.rejected.iter().map(|(m, r, _)| (*m, *r)).collect();
    assert_eq!(
        reasons,
        [
            (Mechanism::Http, Rejection::StdioRefused),
            (Mechanism::Http, Rejection::Invalid)
        ],
        "{rep:?}"
    );
    assert!(
        rep.rejected[1].2[0].message.contains("bearer_token_env"),
        "{rep:?}"
    );
    let r = d.resolve(&c, Shard::default());
    assert_eq!(ids(&r), ["static-a", "fine"]);
    // `${HOME}` stays as written: an endpoint names no variable of ours.
    match &r.servers[1].transport {
        crate::config::TransportSpec::Http { url, .. } => {
            assert!(url.as_str().contains("$%7BHOME%7D"), "{url}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn stdio_from_http_sd_runs_when_the_main_file_allows_it() {
    let c = config("http_sd_configs:\n  - url: http://127.0.0.1:2/sd\n    allow_stdio: true\n");
    let mut d = Discovered::default();
    let list = sources(&c).into_iter().map(|s| (9, s)).collect();
    d.set_sources(list, &c.global, false, Path::new("/"), &|_| None);
    let rep = d.update(
        Update {
            source: 9,
            documents: vec![doc(
                "u",
                r#"[{"id":"ok","transport":"stdio","command":"/bin/true"}]"#,
            )],
        },
        &c.global,
        Path::new("/"),
        &|_| None,
    );
    assert!(rep.rejected.is_empty(), "{rep:?}");
    assert_eq!(ids(&d.resolve(&c, Shard::default())), ["ok"]);
}

#[test]
fn a_bad_entry_never_stops_the_rest_and_a_bad_document_keeps_the_last_good_list() {
    let (c, mut d, file, _) = setup();
    let g = &c.global;
    let base = Path::new("/etc/mcpmon");
    let rep = feed(
        &mut d,
        &c,
        file,
        "/etc/mcpmon/sd/a.yaml",
        "- { id: ok1, transport: http, url: \"http://h/mcp\" }\n- { id: bad, transport: http }\n- { id: bad2, transport: http, url: \"http://h\", ping_intervall: 5s }\n- { id: ok2, transport: http, url: \"http://h/mcp\" }\n",
    );
    assert_eq!(rep.rejected.len(), 2, "{rep:?}");
    let lines: Vec<usize> = rep.rejected.iter().map(|(_, _, e)| e[0].line).collect();
    assert_eq!(lines, [2, 3], "each problem names its line: {rep:?}");
    assert_eq!(
        ids(&d.resolve(&c, Shard::default())),
        ["static-a", "ok1", "ok2"]
    );
    // Truncated mid-write: not a list. The last good list stays, counted as a failure.
    let rep = feed(
        &mut d,
        &c,
        file,
        "/etc/mcpmon/sd/a.yaml",
        "- { id: ok1, transport: ht",
    );
    assert_eq!(rep.failures.len(), 1, "{rep:?}");
    assert!(!rep.changed);
    assert_eq!(
        ids(&d.resolve(&c, Shard::default())),
        ["static-a", "ok1", "ok2"]
    );
    // Unreadable: the same.
    let rep = d.update(
        Update {
            source: file,
            documents: vec![Document {
                origin: "/etc/mcpmon/sd/a.yaml".into(),
                text: Err("cannot read: denied".into()),
            }],
        },
        g,
        base,
        &|_| None,
    );
    assert_eq!(rep.failures.len(), 1);
    assert_eq!(
        ids(&d.resolve(&c, Shard::default())),
        ["static-a", "ok1", "ok2"]
    );
    // The file is gone: so are its servers.
    let rep = d.update(
        Update {
            source: file,
            documents: vec![],
        },
        g,
        base,
        &|_| None,
    );
    assert!(rep.changed);
    assert_eq!(ids(&d.resolve(&c, Shard::default())), ["static-a"]);
}

#[test]
fn a_duplicate_id_is_dropped_naming_both_origins() {
    let (c, mut d, file, http) = setup();
    feed(
        &mut d,
        &c,
        file,
        "/etc/mcpmon/sd/a.yaml",
        "- { id: static-a, transport: http, url: \"http://h/x\" }\n- { id: shared, transport: http, url: \"http://h/f\" }\n",
    );
    feed(
        &mut d,
        &c,
        http,
        "http://127.0.0.1:2/sd",
        r#"[{"id":"shared","transport":"http","url":"http://h/h"}]"#,
    );
    let r = d.resolve(&c, Shard::default());
    assert_eq!(ids(&r), ["static-a", "shared"]);
    assert_eq!(r.duplicates.len(), 2, "{:?}", r.duplicates);
    assert_eq!(r.duplicates[0].0, Mechanism::File);
    assert!(
        r.duplicates[0].1.contains("/etc/mcpmon/sd/a.yaml [0]")
            && r.duplicates[0]
                .1
                .contains("/etc/mcpmon/fleet.yaml servers[0]"),
        "{:?}",
        r.duplicates
    );
    assert_eq!(r.duplicates[1].0, Mechanism::Http);
    assert!(
        r.duplicates[1].1.contains("http://127.0.0.1:2/sd [0]")
            && r.duplicates[1].1.contains("/etc/mcpmon/sd/a.yaml [1]"),
        "{:?}",
        r.duplicates
    );
    match &r.servers[1].transport {
        crate::config::TransportSpec::Http { url, .. } => assert_eq!(url.path(), "/f"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_shard_gets_the_servers_hashmod_assigns_it() {
    let (c, mut d, file, _) = setup();
    let entries: String = (0..30)
        .map(|i| format!("- {{ id: s{i}, transport: http, url: \"http://h/{i}\" }}\n"))
        .collect();
    feed(&mut d, &c, file, "/etc/mcpmon/sd/a.yaml", &entries);
    let mut all = Vec::new();
    for index in 0..3 {
        let r = d.resolve(&c, Shard::new(index, 3).unwrap());
        for s in &r.servers {
            assert_eq!(shard::hashmod(&s.id, 3), index, "{}", s.id);
            all.push(s.id.clone());
        }
        // Counts are before sharding: every replica reports the same.
        assert_eq!(r.counts[&Mechanism::File], 30);
    }
    all.sort();
    let mut want: Vec<String> = (0..30)
        .map(|i| format!("s{i}"))
        .chain(["static-a".to_owned()])
        .collect();
    want.sort();
    assert_eq!(all, want);
}

#[test]
fn a_changed_global_revalidates_the_kept_documents() {
    let (c, mut d, file, http) = setup();
    feed(
        &mut d,
        &c,
        file,
        "/etc/mcpmon/sd/a.yaml",
        "- { id: f1, transport: http, url: \"http://h/mcp\" }\n",
    );
    let c2 = config(&MAIN.replace("7s", "3s"));
    let list = sources(&c2)
        .into_iter()
        .zip([file, http])
        .map(|(s, id)| (id, s))
        .collect();
    d.set_sources(list, &c2.global, true, Path::new("/etc/mcpmon"), &|_| None);
    let r = d.resolve(&c2, Shard::default());
    assert_eq!(ids(&r), ["static-a", "f1"]);
    assert!(
        r.servers
            .iter()
            .all(|s| s.settings.ping_interval.0.as_secs() == 3)
    );
}
