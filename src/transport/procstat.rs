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
    /// User plus system CPU time of the whole tree, with what its exited
    /// and reaped descendants used: the sum never falls when one exits,
    /// and a start that runs short-lived commands (a shell's loop, a
    /// package manager's steps) reads as busy even when no sample catches
    /// one of them alive.
    pub cpu: Duration,
    /// Resident memory of the whole tree, in bytes.
    pub rss_bytes: u64,
}

/// The fields of one process's `stat` that mcpmon reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    /// State letter (R, S, D, T, t, Z, …).
    state: char,
    /// utime + stime, and cutime + cstime (its reaped children's), in
    /// clock ticks.
    cpu_ticks: u64,
    /// Resident set size, in pages.
    rss_pages: u64,
}

fn run_state(letter: char) -> RunState {
    match letter {
        'T' | 't' => RunState::Stopped,
        'Z' | 'X' | 'x' => RunState::Zombie,
        _ => RunState::Alive,
    }
}

fn read_stat(pid: u32) -> Option<Stat> {
    let st = procfs::process::Process::new(i32::try_from(pid).ok()?)
        .ok()?
        .stat()
        .ok()?;
    Some(Stat {
        state: st.state,
        cpu_ticks: st.utime
            + st.stime
            + u64::try_from(st.cutime).unwrap_or(0)
            + u64::try_from(st.cstime).unwrap_or(0),
        rss_pages: st.rss,
    })
}

/// Child pids of `pid`, from every thread's `children` file.
fn children(pid: u32, out: &mut Vec<u32>) {
    let Some(tasks) = i32::try_from(pid)
        .ok()
        .and_then(|p| procfs::process::Process::new(p).ok())
        .and_then(|p| p.tasks().ok())
    else {
        return;
    };
    for task in tasks.flatten() {
        if let Ok(pids) = task.children() {
            out.extend(pids);
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
    match procfs::ticks_per_second() {
        0 => 100.0,
        t => t as f64,
    }
}

fn page_size() -> u64 {
    procfs::page_size()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map_to_evidence() {
        assert_eq!(run_state('R'), RunState::Alive);
        assert_eq!(run_state('S'), RunState::Alive);
        assert_eq!(run_state('D'), RunState::Alive);
        assert_eq!(run_state('T'), RunState::Stopped);
        assert_eq!(run_state('t'), RunState::Stopped);
        assert_eq!(run_state('Z'), RunState::Zombie);
    }

    /// A child that burns CPU, exits and is reaped still counts: the
    /// tree's CPU after it is gone is no less than while it ran.
    #[test]
    fn a_reaped_childs_cpu_stays_in_the_tree() {
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "timeout 1 sh -c 'while :; do :; done'; sleep 30"])
            .spawn()
            .expect("spawn sh");
        let pid = shell.id();
        let alive = |pid: u32| {
            let mut ids = Vec::new();
            children(pid, &mut ids);
            ids
        };
        let started = std::time::Instant::now();
        let mut burning = Duration::ZERO;
        let mut gone = None;
        while started.elapsed() < Duration::from_secs(10) {
            let s = sample(pid).expect("shell alive");
            let kids = alive(pid);
            // The burner's `timeout` is gone and `sleep` has taken its place.
            let only_sleep = kids.len() == 1
                && std::fs::read_to_string(format!("/proc/{}/comm", kids[0]))
                    .is_ok_and(|c| c.trim() == "sleep");
            if only_sleep && burning > Duration::ZERO {
                gone = Some(s.cpu);
                break;
            }
            if !only_sleep {
                burning = burning.max(s.cpu);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = shell.kill();
        let _ = shell.wait();
        let gone = gone.expect("the burner ran and exited within 10 s");
        assert!(
            burning >= Duration::from_millis(50),
            "it burned {burning:?}"
        );
        assert!(gone >= burning, "{gone:?} after, {burning:?} while it ran");
    }

    #[test]
    fn samples_this_process_and_its_children() {
        let s = sample(std::process::id()).expect("own stat");
        assert_eq!(s.state, RunState::Alive);
        assert!(s.rss_bytes > 0);
        // A child is found in the tree and sampled (its memory may still
        // read 0 while it execs, so only its presence is asserted).
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        let mut ids = Vec::new();
        children(std::process::id(), &mut ids);
        assert!(ids.contains(&child.id()), "{ids:?}");
        assert!(sample(child.id()).is_some());
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_missing_process_is_none() {
        assert_eq!(sample(u32::MAX), None);
    }
}
