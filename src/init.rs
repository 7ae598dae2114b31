//! mcpmon as PID 1 of a container or PID namespace, with no init in front.
//!
//! PID 1 has two jobs nobody else does: every orphaned process is re-parented
//! to it and must be reaped (a stdio server's wrapper that dies leaves its
//! children behind, and they become zombies when they exit), and the kernel
//! drops signals whose default action would kill PID 1 unless it handles
//! them. When mcpmon finds itself PID 1 it forks before anything else runs:
//! the parent stays PID 1 as a minimal init (what tini does: forward
//! signals, reap everything, exit with mcpmon's status) and the child goes
//! on to be mcpmon. Anywhere else this does nothing.

// The kernel calls here (fork, signal handlers and waitpid have no safe std form); every
// unsafe block says why it is sound.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI32, Ordering};

/// The forked mcpmon, for the signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);

/// Signals an orchestrator or a terminal sends, passed on to mcpmon.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

extern "C" fn forward(signal: libc::c_int) {
    let child = CHILD.load(Ordering::Relaxed);
    if child > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe {
            libc::kill(child, signal);
        }
    }
}

/// When PID 1, become the init and never return; the forked child returns
/// and runs mcpmon. Call it first thing in `main`, while the process has
/// one thread (a fork copies only the calling thread).
pub fn become_init_if_pid1() {
    if std::process::id() != 1 {
        return;
    }
    // SAFETY: one thread, nothing locked; the child carries on as a normal
    // process and the parent only calls async-signal-safe functions.
    let child = unsafe { libc::fork() };
    if child < 0 {
        // No init, but still a working monitor.
        eprintln!(
            "mcpmon: running as PID 1 and fork failed ({}); orphaned processes will not be reaped",
            std::io::Error::last_os_error()
        );
        return;
    }
    if child == 0 {
        return;
    }
    CHILD.store(child, Ordering::Relaxed);
    for signal in FORWARDED {
        // SAFETY: `forward` only loads an atomic and calls kill(2).
        unsafe {
            libc::signal(signal, forward as *const () as libc::sighandler_t);
        }
    }
    std::process::exit(reap_until(child));
}

/// Reap every child until `mcpmon` exits; its exit code (128 + signal when
/// killed, as a shell reports it).
fn reap_until(mcpmon: libc::pid_t) -> i32 {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: a plain blocking waitpid on any child.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == mcpmon {
            if libc::WIFEXITED(status) {
                return libc::WEXITSTATUS(status);
            }
            if libc::WIFSIGNALED(status) {
                return 128 + libc::WTERMSIG(status);
            }
            continue;
        }
        if pid < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // No children left at all (ECHILD): nothing to wait for.
            return 1;
        }
        // An orphan reaped, or a signal forwarded (EINTR): keep going.
    }
}
