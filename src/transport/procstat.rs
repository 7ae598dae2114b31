//! What Linux says about a stdio server's processes (`/proc`): run state, CPU
//! time and resident memory, summed over the process mcpmon started and its
//! descendants, so a wrapper (`npx`, `uv run`, `sh -c`) does not hide the real
//! server. CPU time that advances while pings go unanswered is evidence of a
//! busy server, not a dead one; a stopped or zombie leader is evidence too.

use std::time::Duration;

/// Most processes of one server's tree that are read.
const MAX_TREE: usize = 64;

/// The run state of the process mcpmon started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Running, sleeping or in disk wait: alive as far as the kernel knows.
    Alive,
    /// Stopped by a signal (SIGSTOP) or being traced.
    Stopped,
    /// Exited, not yet reaped.
    Zombie,
}

/// One sample of a process tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// State of the leader.
    pub state: RunState,
    /// User plus system CPU time of the whole tree.
    pub cpu: Duration,
    /// Resident memory of the whole tree, in bytes.
    pub rss_bytes: u64,
}

/// Parsed fields of one `/proc/<pid>/stat` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// State letter (R, S, D, T, t, Z, …).
    pub state: char,
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    /// Resident set size, in pages.
    pub rss_pages: u64,
}

/// Parse a `/proc/<pid>/stat` line. The command name may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let rest = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime 14, stime 15, rss 24.
    let state = fields.first()?.chars().next()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let rss_pages: u64 = fields.get(21)?.parse().ok()?;
    Some(Stat {
        state,
        cpu_ticks: utime + stime,
        rss_pages,
    })
}

fn run_state(letter: char) -> RunState {
    match letter {
        'T' | 't' => RunState::Stopped,
        'Z' | 'X' | 'x' => RunState::Zombie,
        _ => RunState::Alive,
    }
}

fn read_stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Child pids of `pid`, from every thread's `children` file.
fn children(pid: u32, out: &mut Vec<u32>) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
}

/// Sample the tree rooted at `pid`; `None` once the leader is gone.
pub fn sample(pid: u32) -> Option<Sample> {
    let leader = read_stat(pid)?;
    let mut ticks = leader.cpu_ticks;
    let mut pages = leader.rss_pages;
    let mut queue = Vec::new();
    children(pid, &mut queue);
    let mut seen = 1;
    while let Some(child) = queue.pop() {
        if seen >= MAX_TREE {
            break;
        }
        seen += 1;
        if let Some(st) = read_stat(child) {
            ticks += st.cpu_ticks;
            pages += st.rss_pages;
            children(child, &mut queue);
        }
    }
    Some(Sample {
        state: run_state(leader.state),
        cpu: Duration::from_secs_f64(ticks as f64 / clock_ticks()),
        rss_bytes: pages * page_size(),
    })
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parentheses() {
        let line = "1234 (my (odd) server) S 1 1234 1234 0 -1 4194560 500 0 0 0 \
                    250 50 0 0 20 0 3 0 100 123456789 2048 18446744073709551615";
        let st = parse_stat(line).expect("parsed");
        assert_eq!(st.state, 'S');
        assert_eq!(st.cpu_ticks, 300);
        assert_eq!(st.rss_pages, 2048);
    }

    #[test]
    fn states_map_to_evidence() {
        assert_eq!(run_state('R'), RunState::Alive);
        assert_eq!(run_state('S'), RunState::Alive);
        assert_eq!(run_state('D'), RunState::Alive);
        assert_eq!(run_state('T'), RunState::Stopped);
        assert_eq!(run_state('t'), RunState::Stopped);
        assert_eq!(run_state('Z'), RunState::Zombie);
    }

    #[test]
    fn garbage_is_none() {
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("12 (x) S 1 2"), None);
    }

    #[test]
    fn samples_this_process() {
        let s = sample(std::process::id()).expect("own stat");
        assert_eq!(s.state, RunState::Alive);
        assert!(s.rss_bytes > 0);
    }
}
