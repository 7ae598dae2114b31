//! Merging, settling duplicates, keeping last good lists and sharding,
//! with documents handed in directly (no tasks, no I/O).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use super::check::validate;
use super::*;
use crate::config::Rejection;

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
    d.set_sources(list);
    (c, d, 0, 1)
}

/// Hand `source` `documents`, validated as its task would.
fn feed_docs(
    d: &mut Discovered,
    c: &Config,
    source: u64,
    documents: Vec<Document>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Report {
    let (_, src, _) = d
        .sources
        .iter()
        .find(|(id, ..)| *id == source)
        .expect("a source");
    let src = src.clone();
    let own: Vec<SocketAddr> = vec![
        "127.0.0.1:9850".parse().unwrap(),
        "[::]:9851".parse().unwrap(),
    ];
    let documents = documents
        .into_iter()
        .map(|doc| {
            let parsed = validate(
                &doc,
                &src,
                &super::Against::of(c),
                Path::new("/etc/mcpmon"),
                &own,
                env,
            );
            Checked::Fresh(doc.origin, parsed)
        })
        .collect();
    d.update(Update { source, documents })
}

/// Hand `source` one document read from `origin`, as its task would.
fn feed(d: &mut Discovered, c: &Config, source: u64, origin: &str, text: &str) -> Report {
    feed_docs(d, c, source, vec![doc(origin, text)], &|_| None)
}

/// The HTTP source's one server, `h1`.
fn feed_h1(d: &mut Discovered, c: &Config, http: u64) -> Report {
    feed(
        d,
        c,
        http,
        "http://127.0.0.1:2/sd",
        r#"[{"id":"h1","transport":"http","url":"http://h/mcp"}]"#,
    )
}

fn ids(r: &Resolved) -> Vec<&str> {
    r.servers.iter().map(|s| s.id.as_str()).collect()
}

#[test]
fn the_resolved_list_shares_each_spec_rather_than_copying_it() {
    let (c, mut d, _, http) = setup();
    feed_h1(&mut d, &c, http);
    let (first, again) = (
        d.resolve(&c, Shard::default()),
        d.resolve(&c, Shard::default()),
    );
    assert_eq!(ids(&first), ["static-a", "h1"]);
    // The main file's spec, and a discovered one across two settlings:
    // one allocation each, however many lists hold it.
    assert!(Arc::ptr_eq(&first.servers[0], &c.servers[0]));
    assert!(Arc::ptr_eq(&first.servers[1], &again.servers[1]));
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
    feed_h1(&mut d, &c, http);
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
    let rep = feed_docs(
        &mut d,
        &c,
        http,
        vec![doc("http://127.0.0.1:2/sd", body)],
        &env,
    );
    let reasons: Vec<(Mechanism, Rejection)> =
        rep.rejected.iter().map(|(m, r, ..)| (*m, *r)).collect();
    assert_eq!(
        reasons,
        [
            (Mechanism::Http, Rejection::StdioRefused),
            (Mechanism::Http, Rejection::Invalid)
        ],
        "{rep:?}"
    );
    assert!(
        rep.rejected[1].3[0].message.contains("bearer_token_env"),
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
    d.set_sources(list);
    let rep = feed(
        &mut d,
        &c,
        9,
        "u",
        r#"[{"id":"ok","transport":"stdio","command":"/bin/true"}]"#,
    );
    assert!(rep.rejected.is_empty(), "{rep:?}");
    assert_eq!(ids(&d.resolve(&c, Shard::default())), ["ok"]);
}

#[test]
fn a_bad_entry_never_stops_the_rest_and_a_bad_document_keeps_the_last_good_list() {
    let (c, mut d, file, _) = setup();
    let rep = feed(
        &mut d,
        &c,
        file,
        "/etc/mcpmon/sd/a.yaml",
        "- { id: ok1, transport: http, url: \"http://h/mcp\" }\n- { id: bad, transport: http }\n- { id: bad2, transport: http, url: \"http://h\", ping_intervall: 5s }\n- { id: ok2, transport: http, url: \"http://h/mcp\" }\n",
    );
    assert_eq!(rep.rejected.len(), 2, "{rep:?}");
    let lines: Vec<usize> = rep.rejected.iter().map(|(.., e)| e[0].line).collect();
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
    let rep = feed_docs(
        &mut d,
        &c,
        file,
        vec![Document {
            origin: "/etc/mcpmon/sd/a.yaml".into(),
            text: Err("cannot read: denied".into()),
        }],
        &|_| None,
    );
    assert_eq!(rep.failures.len(), 1);
    assert_eq!(
        ids(&d.resolve(&c, Shard::default())),
        ["static-a", "ok1", "ok2"]
    );
    // The file is gone: so are its servers.
    let rep = feed_docs(&mut d, &c, file, vec![], &|_| None);
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

#[tokio::test]
async fn a_source_task_validates_only_what_changed_and_everything_when_global_does() {
    let c = config(MAIN);
    let file = sources(&c).remove(0);
    let (global_tx, global) = watch::channel(Arc::new(super::Against::of(&c)));
    let mut checker = Checker::new(file, PathBuf::from("/etc/mcpmon"), Arc::new([]), global);
    let text = "- { id: f1, transport: http, url: \"http://h/mcp\" }\n";
    let interval = |checked: &[Checked]| match checked {
        [Checked::Fresh(_, Ok(e))] => Some(e.servers[0].0.settings.ping_interval.0.as_secs()),
        _ => None,
    };
    let first = checker
        .check(vec![doc("/etc/mcpmon/sd/a.yaml", text)])
        .await;
    assert_eq!(interval(&first), Some(7), "{first:?}");
    let again = checker
        .check(vec![doc("/etc/mcpmon/sd/a.yaml", text)])
        .await;
    assert!(matches!(again[..], [Checked::Same(_)]), "{again:?}");
    let c2 = config(&MAIN.replace("7s", "3s"));
    global_tx.send_replace(Arc::new(super::Against::of(&c2)));
    let after = checker
        .check(vec![doc("/etc/mcpmon/sd/a.yaml", text)])
        .await;
    assert_eq!(interval(&after), Some(3), "{after:?}");
}

#[test]
fn a_source_adds_at_most_max_servers_and_counts_the_rest() {
    let c = config("file_sd_configs:\n  - files: [sd/*.yaml]\n    max_servers: 2\n");
    let mut d = Discovered::default();
    d.set_sources(sources(&c).into_iter().map(|s| (0, s)).collect());
    let entries: String = (0..5)
        .map(|i| format!("- {{ id: s{i}, transport: http, url: \"http://h/{i}\" }}\n"))
        .collect();
    let rep = feed(&mut d, &c, 0, "/etc/mcpmon/sd/a.yaml", &entries);
    assert_eq!(ids(&d.resolve(&c, Shard::default())), ["s0", "s1"]);
    let [(Mechanism::File, Rejection::OverLimit, 3, errors)] = &rep.rejected[..] else {
        panic!("{rep:?}");
    };
    assert!(errors[0].message.contains("max_servers"), "{errors:?}");
    assert_eq!(errors[0].line, 3, "{errors:?}");
}

#[test]
fn an_entry_aimed_at_mcpmon_itself_is_refused() {
    let (c, mut d, _, http) = setup();
    let body = r#"[
        {"id":"loop","transport":"http","url":"http://127.0.0.1:9850/-/reload"},
        {"id":"name","transport":"http","url":"http://LOCALHOST:9850/"},
        {"id":"any","transport":"http","url":"http://10.1.2.3:9851/mcp"},
        {"id":"v6","transport":"http","url":"http://[::1]:9851/mcp"},
        {"id":"other-port","transport":"http","url":"http://127.0.0.1:9852/mcp"},
        {"id":"other-host","transport":"http","url":"http://10.1.2.3:9850/mcp"}
    ]"#;
    let rep = feed(&mut d, &c, http, "http://127.0.0.1:2/sd", body);
    let refused = rep
        .rejected
        .iter()
        .filter(|(_, r, ..)| *r == Rejection::OwnAddress)
        .count();
    assert_eq!(refused, 4, "{rep:?}");
    assert_eq!(
        ids(&d.resolve(&c, Shard::default())),
        ["static-a", "other-port", "other-host"]
    );
}

#[test]
fn a_remote_entry_cannot_set_a_tight_loop() {
    let (c, mut d, file, http) = setup();
    let body = r#"[{"id":"fast","transport":"http","url":"http://h/mcp","backoff_initial":"1ms",
        "backoff_max":"2ms","ping_interval":"10ms","ping_timeout":"5ms","health_check_max_fields":10000,
        "tool_probes":[{"tool":"t","interval":"1ms"}]}]"#;
    let rep = feed(&mut d, &c, http, "http://127.0.0.1:2/sd", body);
    assert!(rep.rejected.is_empty(), "{rep:?}");
    let warned = |key: &str| rep.warnings.iter().any(|w| w.message.contains(key));
    for key in [
        "backoff_initial",
        "ping_interval",
        "ping_timeout",
        "health_check_max_fields",
        "tool probe",
    ] {
        assert!(warned(key), "no warning about {key}: {:?}", rep.warnings);
    }
    let r = d.resolve(&c, Shard::default());
    let s = &r.servers[1].settings;
    assert_eq!(s.backoff_initial.0, std::time::Duration::from_secs(1));
    assert!(s.backoff_max >= s.backoff_initial);
    assert_eq!(s.ping_interval.0, std::time::Duration::from_secs(1));
    assert_eq!(s.health_check_max_fields, 16);
    assert_eq!(
        r.servers[1].probes.tools[0].interval,
        std::time::Duration::from_secs(10)
    );
    // The same settings from a local file are the operator's choice.
    let yaml = "- { id: local, transport: http, url: \"http://h/mcp\", backoff_initial: 1ms, backoff_max: 2ms }\n";
    let rep = feed(&mut d, &c, file, "/etc/mcpmon/sd/a.yaml", yaml);
    assert!(rep.warnings.is_empty(), "{rep:?}");
}

#[test]
fn documents_are_untrusted_input() {
    let (c, mut d, file, http) = setup();
    // An endpoint's answer is JSON: YAML (and its aliases) is refused.
    let rep = feed(
        &mut d,
        &c,
        http,
        "http://127.0.0.1:2/sd",
        "- &a {id: x}\n- *a\n",
    );
    assert!(rep.failures[0].1.message.contains("not JSON"), "{rep:?}");
    // A file's aliases may not stand for more than the file holds.
    let mut bomb = String::from("a0: &a0 [x, x]\n");
    for i in 1..25 {
        bomb.push_str(&format!("a{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1));
    }
    let rep = feed(&mut d, &c, file, "/etc/mcpmon/sd/a.yaml", &bomb);
    assert!(
        rep.failures[0].1.message.contains("aliases expand"),
        "{rep:?}"
    );
    // A key holding a newline and ESC cannot forge a log line.
    let rep = feed(
        &mut d,
        &c,
        http,
        "http://127.0.0.1:2/sd",
        "[{\"id\":\"k\",\"transport\":\"http\",\"url\":\"http://h\",\"x\\n\\u001b[31mERROR forged\":1}]",
    );
    let text = rep.rejected[0].3[0].to_string();
    assert!(!text.contains('\n') && !text.contains('\u{1b}'), "{text:?}");
}
