//! Signals to a node in its own process, waited on until the kernel shows them taken: the
//! HTTP tests' gateways and the cluster tests' nodes pause (`STOP`) and resume (`CONT`) alike.

use std::time::Duration;

/// Sends `signal` (`KILL`, `STOP`, `CONT`, `TERM`) to process `pid` (`name` in messages). A
/// stop is asynchronous: kill(2) returns before every thread has stopped, and a thread still
/// running can answer a request sent right after; so for `STOP` and `CONT` this waits until
/// the kernel shows every thread stopped (or none).
pub fn send(pid: u32, signal: &str, name: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid} ({name}) failed");
    let want_stopped = match signal {
        "STOP" => true,
        "CONT" => false,
        _ => return,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while threads_stopped(pid) != Some(want_stopped) {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} ({pid}) did not {} within 10 s",
            if want_stopped { "stop" } else { "continue" }
        );
        std::thread::yield_now();
    }
}

/// Whether every thread of `pid` is stopped (`Some(true)`), none is (`Some(false)`), or some
/// are (`None`), as `/proc/<pid>/task/*/stat` shows it.
fn threads_stopped(pid: u32) -> Option<bool> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let (mut stopped, mut running) = (0, 0);
    for entry in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The state follows the command name in parentheses, which may hold spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        match state {
            Some('T' | 't') => stopped += 1,
            Some(_) => running += 1,
            None => {}
        }
    }
    match (stopped, running) {
        (_, 0) if stopped > 0 => Some(true),
        (0, _) => Some(false),
        _ => None,
    }
}
