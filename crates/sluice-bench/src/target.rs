//! The server under test: checking that it is on loopback, starting one, waiting until it answers.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use reqwest::Url;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// The text before the bound address in the server's startup log line.
const LISTENING_MARKER: &str = "listening on http://";

/// How long a spawned server may take to print its address: generous, since a release server
/// opening a large data directory on a busy two-core machine can take a while.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// How many times to try `GET /` before giving up on a server.
const READY_ATTEMPTS: u32 = 100;

/// Pause between two `GET /` attempts; with [`READY_ATTEMPTS`] this waits at most ten seconds.
const READY_RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// Server log lines kept to explain a failed start.
const LOG_TAIL_LINES: usize = 20;

/// Checks that `url` names this machine, so the benchmark can never load a remote server.
pub fn check_loopback(url: &Url) -> Result<()> {
    // `host_str` writes IPv6 addresses in brackets, as in the URL.
    let host = url.host_str().unwrap_or_default();
    let is_loopback = match host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    };
    if !is_loopback {
        bail!("--url must point at this machine (127.0.0.1, [::1] or localhost), got {url}");
    }
    if url.scheme() != "http" {
        bail!("--url must use http://, got {url}");
    }
    Ok(())
}

/// Returns the address in a server log line containing `listening on http://ADDR`, if any.
///
/// Colour escape codes are removed first. An unspecified address (`0.0.0.0`, `[::]`) is replaced
/// by the loopback address of the same family, which is where the benchmark connects.
pub fn parse_listening_addr(line: &str) -> Option<SocketAddr> {
    let line = strip_ansi(line);
    let rest = &line[line.find(LISTENING_MARKER)? + LISTENING_MARKER.len()..];
    let text = rest
        .split(|c: char| c.is_whitespace() || c == '"' || c == ',')
        .next()?;
    let mut addr: SocketAddr = text.trim_end_matches('/').parse().ok()?;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    }
    Some(addr)
}

/// Removes ANSI escape sequences (`ESC [ … letter`), as coloured log output contains.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip the sequence up to and including its final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The server a scenario runs against: with `spawn`, a `sluice` it starts (`sluice_bin`, else
/// the one next to this binary) with its data in `data_root/server` and its log in
/// `data_root/server.log`; otherwise the one at `url`. Waits until it answers; returns its
/// address, its `GET /` answer and the process it started, if any (the caller keeps it alive
/// and stops it).
///
/// # Cancel safety
///
/// Dropping the future kills a server it started.
pub async fn spawn_or_connect(
    client: &reqwest::Client,
    spawn: bool,
    sluice_bin: Option<&Path>,
    url: &Url,
    data_root: &Path,
) -> Result<(Url, serde_json::Value, Option<SpawnedServer>)> {
    let (base_url, spawned) = if spawn {
        let bin = match sluice_bin {
            Some(bin) => bin.to_path_buf(),
            None => crate::default_sluice_bin()?,
        };
        let dir = data_root.join("server");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("could not create the server data dir {}", dir.display()))?;
        let server =
            SpawnedServer::start(&bin, &dir, &data_root.join(crate::SERVER_LOG_FILE)).await?;
        eprintln!(
            "started {} at {} (log: {})",
            bin.display(),
            server.base_url,
            server.log_path.display()
        );
        (server.base_url.clone(), Some(server))
    } else {
        (url.clone(), None)
    };
    let about = wait_until_ready(client, &base_url).await?;
    Ok((base_url, about, spawned))
}

/// A `sluice` server process started by the benchmark; killed when dropped.
#[derive(Debug)]
pub struct SpawnedServer {
    child: Child,
    /// Where the server listens, as `http://ADDR/`.
    pub base_url: Url,
    /// File the server's stderr is copied to.
    pub log_path: PathBuf,
}

impl SpawnedServer {
    /// Starts `bin serve -E http.port=0 -E path.data=<data_dir>` and waits for its address.
    ///
    /// The server's stderr is copied to `log_path` for as long as it runs.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the process (it is spawned with `kill_on_drop`).
    pub async fn start(bin: &Path, data_dir: &Path, log_path: &Path) -> Result<Self> {
        Self::start_with(bin, data_dir, log_path, &[], None).await
    }

    /// [`SpawnedServer::start`] with more `-E` settings (`key=value` each), on the CPUs of
    /// `cpus` (a `taskset` list such as `1` or `2-3`) when given, else on this process's.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the process (it is spawned with `kill_on_drop`).
    pub async fn start_with(
        bin: &Path,
        data_dir: &Path,
        log_path: &Path,
        settings: &[String],
        cpus: Option<&str>,
    ) -> Result<Self> {
        let mut path_data = std::ffi::OsString::from("path.data=");
        path_data.push(data_dir);
        let mut command = match cpus {
            // `taskset` sets the mask, then execs the server in the same process.
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", cpus]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = command
            .arg("serve")
            .args(["-E", "http.port=0", "-E"])
            .arg(path_data)
            .args(settings.iter().flat_map(|s| ["-E", s.as_str()]))
            // The address is printed at INFO; make sure that level is on and uncoloured.
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!("could not start {}; build it with `cargo build --release -p sluice-server` or pass --sluice-bin", bin.display())
            })?;

        let stderr = child.stderr.take().expect("stderr is piped");
        let mut log = tokio::fs::File::create(log_path)
            .await
            .with_context(|| format!("could not create the server log {}", log_path.display()))?;
        let (addr_sender, addr_receiver) =
            oneshot::channel::<std::result::Result<SocketAddr, Vec<String>>>();
        // Copies stderr to the log for the server's whole life, so its pipe never fills up.
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut addr_sender = Some(addr_sender);
            let mut tail = VecDeque::with_capacity(LOG_TAIL_LINES);
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = log.write_all(line.as_bytes()).await;
                let _ = log.write_all(b"\n").await;
                if let Some(sender) = addr_sender.take() {
                    match parse_listening_addr(&line) {
                        Some(addr) => {
                            let _ = sender.send(Ok(addr));
                        }
                        None => {
                            if tail.len() == LOG_TAIL_LINES {
                                tail.pop_front();
                            }
                            tail.push_back(line);
                            addr_sender = Some(sender);
                        }
                    }
                }
            }
            let _ = log.flush().await;
            if let Some(sender) = addr_sender {
                let _ = sender.send(Err(tail.into()));
            }
        });

        let addr = match tokio::time::timeout(STARTUP_TIMEOUT, addr_receiver).await {
            Ok(Ok(Ok(addr))) => addr,
            Ok(Ok(Err(tail))) => bail!(
                "{} exited before printing `{LISTENING_MARKER}ADDR`; its last lines:\n{}",
                bin.display(),
                if tail.is_empty() {
                    "(none)".to_owned()
                } else {
                    tail.join("\n")
                }
            ),
            Ok(Err(_)) => bail!("the reader of the server's log stopped unexpectedly"),
            Err(_) => bail!(
                "{} printed no `{LISTENING_MARKER}ADDR` line within {STARTUP_TIMEOUT:?}; see {}",
                bin.display(),
                log_path.display()
            ),
        };
        let base_url =
            Url::parse(&format!("http://{addr}/")).expect("a socket address makes a valid URL");
        Ok(Self {
            child,
            base_url,
            log_path: log_path.to_owned(),
        })
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills the server and waits for it to exit.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future still kills the process, through `kill_on_drop`.
    pub async fn stop(mut self) -> Result<()> {
        self.child
            .kill()
            .await
            .context("could not stop the spawned sluice server")
    }
}

/// Polls `GET /` until the server answers 2xx, and returns the answer's JSON.
///
/// # Cancel safety
///
/// Dropping the future abandons the poll; nothing else is affected.
pub async fn wait_until_ready(
    client: &reqwest::Client,
    base_url: &Url,
) -> Result<serde_json::Value> {
    let mut last_failure = String::new();
    for _ in 0..READY_ATTEMPTS {
        match client.get(base_url.clone()).send().await {
            Ok(response) if response.status().is_success() => {
                return response
                    .json()
                    .await
                    .with_context(|| format!("GET {base_url} did not answer JSON"));
            }
            Ok(response) => last_failure = format!("status {}", response.status()),
            Err(error) => last_failure = error.to_string(),
        }
        tokio::time::sleep(READY_RETRY_INTERVAL).await;
    }
    bail!(
        "{base_url} did not answer GET / with 2xx after {READY_ATTEMPTS} tries; last failure: {last_failure}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse_listening_addr_finds_the_address_in_a_log_line() {
        let line =
            "2026-11-01T10:00:00.123Z  INFO sluice_server: listening on http://127.0.0.1:41234";
        assert_eq!(
            parse_listening_addr(line),
            Some("127.0.0.1:41234".parse().unwrap())
        );
        let line = "INFO listening on http://[::1]:9200/ node=abc";
        assert_eq!(
            parse_listening_addr(line),
            Some("[::1]:9200".parse().unwrap())
        );
    }

    #[test]
    fn test_parse_listening_addr_strips_colour_codes() {
        let line = "\u{1b}[32m INFO\u{1b}[0m \u{1b}[2msluice\u{1b}[0m: listening on http://127.0.0.1:5000\u{1b}[0m";
        assert_eq!(
            parse_listening_addr(line),
            Some("127.0.0.1:5000".parse().unwrap())
        );
    }

    #[test]
    fn test_parse_listening_addr_maps_unspecified_to_loopback() {
        assert_eq!(
            parse_listening_addr("listening on http://0.0.0.0:80"),
            Some("127.0.0.1:80".parse().unwrap())
        );
        assert_eq!(
            parse_listening_addr("listening on http://[::]:80"),
            Some("[::1]:80".parse().unwrap())
        );
    }

    #[test]
    fn test_parse_listening_addr_ignores_other_lines() {
        assert_eq!(parse_listening_addr("INFO opening data dir /tmp/x"), None);
        assert_eq!(
            parse_listening_addr("listening on http://not-an-address"),
            None
        );
    }

    #[test]
    fn test_check_loopback_accepts_only_this_machine() {
        for url in [
            "http://127.0.0.1:9200",
            "http://localhost:9200/",
            "http://[::1]:9200",
            "http://127.1.2.3",
        ] {
            check_loopback(&Url::parse(url).unwrap()).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        for url in [
            "http://10.0.0.1:9200",
            "http://example.com",
            "http://[2001:db8::1]",
            "https://127.0.0.1",
        ] {
            let error = check_loopback(&Url::parse(url).unwrap())
                .unwrap_err()
                .to_string();
            assert!(error.starts_with("--url must"), "{url}: {error}");
        }
    }
}
