//! mcpmon as PID 1 of a PID namespace (a container with no init): stdio
//! servers whose wrapper is killed leave orphans, re-parented to PID 1, and
//! mcpmon reaps them. A `sh -c` wrapper is killed again and again, and no
//! zombie is left in the namespace; SIGTERM still stops mcpmon cleanly.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::*;

/// (parent pid, state letter) of every process.
fn processes() -> HashMap<i32, (i32, char)> {
    let mut out = HashMap::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        out.insert(pid, (ppid, state));
    }
    out
}

/// Zombies among the descendants of `root`.
fn zombies_under(root: i32) -> Vec<i32> {
    let all = processes();
    let descends = |mut pid: i32| {
        for _ in 0..64 {
            let Some((ppid, _)) = all.get(&pid) else {
                return false;
            };
            if *ppid == root {
                return true;
            }
            pid = *ppid;
        }
        false
    };
    all.iter()
        .filter(|(pid, (_, state))| *state == 'Z' && descends(**pid))
        .map(|(pid, _)| *pid)
        .collect()
}

fn can_unshare() -> bool {
    std::process::Command::new(which("unshare"))
        .args(["--user", "--map-root-user", "--pid", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test]
async fn as_pid_1_mcpmon_reaps_the_orphans_of_killed_wrappers() {
    require!(program("unshare"));
    assert!(
        can_unshare(),
        "unshare --user --pid is not permitted here; this test needs user namespaces"
    );
    let marker = marker("pid1");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("fleet.yaml");
    // The wrapper starts a sidecar and the server, and stays their parent:
    // killing it orphans both.
    let script = format!(
        "sleep 300 & {} --name wrapped; wait",
        demo_server().display()
    );
    std::fs::write(
        &config,
        format!(
            "{FAST_GLOBAL}servers:\n  - id: wrapped\n    transport: stdio\n    command: /bin/sh\n    args: [\"-c\", {script:?}]\n    env: {{ MCPMON_TEST_MARKER: {marker} }}\n"
        ),
    )
    .expect("config");
    let mut mon = Binary::start_under(
        &[
            "unshare",
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--kill-child",
        ],
        &config,
        &[],
    )
    .await;
    let unshare = mon.pid();
    mon.wait_status("wrapped", "healthy", SLACK).await;

    const KILLS: usize = 6;
    for round in 0..KILLS {
        let before = mon.server("wrapped").await.1["sessions"]
            .as_u64()
            .unwrap_or(0);
        let wrappers: Vec<i32> = pids_with_marker(&marker)
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.starts_with(b"/bin/sh\0-c\0"))
            })
            .collect();
        assert_eq!(wrappers.len(), 1, "round {round}: {wrappers:?}");
        kill(&wrappers, libc::SIGKILL);
        // A new session, on a new wrapper.
        eventually(
            &format!("round {round}: a new session"),
            SLACK,
            async || {
                let v = mon.server("wrapped").await.1;
                if v["status"] == "healthy" && v["sessions"].as_u64().unwrap_or(0) > before {
                    return Ok(());
                }
                Err(format!("round {round}: no new session: {v}"))
            },
        )
        .await
    }

    // The orphans died (their group was killed with the wrapper) and were
    // reaped: no zombie stays. One may be caught between exit and reap.
    eventually(
        "no zombie left in the namespace",
        Duration::from_secs(10),
        async || {
            let z = zombies_under(unshare);
            if z.is_empty() {
                return Ok(());
            }
            Err(format!(
                "zombies left in the namespace after {KILLS} killed wrappers: {z:?}"
            ))
        },
    )
    .await;

    // SIGTERM to the namespace's PID 1 (what a container runtime signals)
    // reaches mcpmon, which stops cleanly; unshare exits with its status.
    let init: Vec<i32> = processes()
        .into_iter()
        .filter(|(_, (ppid, _))| *ppid == unshare)
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(init.len(), 1, "{init:?}");
    kill(&init, libc::SIGTERM);
    let status = mon.wait_exit(SLACK).await;
    assert!(status.success(), "{status:?}");
    let logs = mon.logs.lock().expect("logs").join("\n");
    assert!(logs.contains("\"stopped\""), "{logs}");
    assert!(
        pids_with_marker(&marker).is_empty(),
        "children outlived mcpmon"
    );
}
