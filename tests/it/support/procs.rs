//! Real processes: found by marker, killed, zombies and what mcpmon holds.

use std::time::Duration;

/// Processes whose environment holds `MCPMON_TEST_MARKER=<marker>`.
pub fn pids_with_marker(marker: &str) -> Vec<i32> {
    let needle = format!("MCPMON_TEST_MARKER={marker}");
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) && !is_zombie(pid) {
            out.push(pid);
        }
    }
    out.sort();
    out
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Wait until some process carries the marker; returns their pids.
pub async fn wait_pids(marker: &str, within: Duration) -> Vec<i32> {
    let what = format!("a process with marker {marker}");
    super::eventually(&what, within, async || {
        let p = pids_with_marker(marker);
        if p.is_empty() { Err(p) } else { Ok(p) }
    })
    .await
}

/// Send `signal` to each of `pids`. The tests' only way to signal a
/// process: kill(2) has no safe std form for signals other than SIGKILL.
#[allow(unsafe_code)]
pub fn kill(pids: &[i32], signal: i32) {
    for &pid in pids {
        // SAFETY: a plain syscall on a pid; a gone process is ESRCH.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Send `signal` to process group `pgid` (a server and its children).
#[allow(unsafe_code)]
pub fn killpg(pgid: i32, signal: i32) {
    // SAFETY: a plain syscall on a group id; a gone group is ESRCH.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// What mcpmon holds: descriptors, direct children, resident memory,
/// threads.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub fds: usize,
    pub children: usize,
    pub rss_kib: u64,
    pub threads: usize,
}

pub fn held(pid: i32) -> Held {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|_| ())
        .ok()
        .map_or(0, |_| count_children(pid));
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0);
    Held {
        fds,
        children,
        rss_kib,
        threads,
    }
}

fn count_children(pid: i32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .map(|c| c.split_whitespace().count())
        .sum()
}
