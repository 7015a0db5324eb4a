//! The `sluice` binary: `sluice serve` runs a node; `sluice gen-logs` writes generated log
//! documents as a `_bulk` body; `sluice users add` manages the users file of basic auth.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use sluice_server::config::Config;
use sluice_server::server::{Node, shutdown_signal};

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Workload management for search: an OpenSearch-compatible node"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a search node.
    Serve {
        /// Config file (default: config/sluice.yml when it exists).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Override a setting, OpenSearch style: -E http.port=9201.
        #[arg(short = 'E', value_name = "KEY=VALUE")]
        settings: Vec<String>,
    },
    /// Print generated log documents as an OpenSearch `_bulk` body (NDJSON) on stdout.
    GenLogs {
        /// Number of documents.
        #[arg(long, default_value_t = 10_000)]
        docs: u64,
        /// Random seed: the same seed gives the same documents.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Target index.
        #[arg(long, default_value = "logs")]
        index: String,
        /// Print the index mapping (JSON for `PUT /{index}`) instead of documents.
        #[arg(long)]
        mapping: bool,
    },
    /// Manage the users file of `auth.type: basic`.
    Users {
        #[command(subcommand)]
        command: UsersCommand,
    },
}

#[derive(Subcommand)]
enum UsersCommand {
    /// Add a user (password read from stdin, stored as an argon2 hash).
    Add {
        /// The users file (written atomically; created when missing).
        #[arg(long, default_value = sluice_server::auth::DEFAULT_USERS_FILE)]
        file: PathBuf,
        /// The user name.
        #[arg(long)]
        username: String,
        /// Comma-separated roles, e.g. analyst,admin.
        #[arg(long, value_delimiter = ',')]
        roles: Vec<String>,
        /// Read the password from stdin (the default; accepted for scripts that say so).
        #[arg(long)]
        password_stdin: bool,
        /// Replace the password and roles of an existing user instead of refusing.
        #[arg(long)]
        update: bool,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config, settings } => {
            let config = match Config::load(config.as_deref(), &settings) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("sluice: {e}");
                    return std::process::ExitCode::from(2);
                }
            };
            sluice_server::logging::init(config.log_format);
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("sluice: cannot start the async runtime: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            let result = rt.block_on(async move {
                let node = Node::start(config).await?;
                node.serve(shutdown_signal()).await
            });
            match result {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("sluice: {e:#}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        Command::Users {
            command:
                UsersCommand::Add {
                    file,
                    username,
                    roles,
                    password_stdin: _,
                    update,
                },
        } => users_add(&file, &username, &roles, update),
        Command::GenLogs {
            docs,
            seed,
            index,
            mapping,
        } => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let res = if mapping {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"mappings": sluice_datagen::index_mapping()})
                )
            } else {
                gen_logs(&mut out, docs, seed, &index)
            };
            match res.and_then(|()| out.flush()) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sluice: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}

/// `sluice users add`: reads one line of password from stdin and adds the user.
fn users_add(
    file: &std::path::Path,
    username: &str,
    roles: &[String],
    update: bool,
) -> std::process::ExitCode {
    use std::io::{BufRead, IsTerminal};
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("password for {username} (echoed): ");
    }
    let mut password = String::new();
    if let Err(e) = stdin.lock().read_line(&mut password) {
        eprintln!("sluice: cannot read the password from stdin: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let password = password.strip_suffix('\n').unwrap_or(&password);
    let password = password.strip_suffix('\r').unwrap_or(password);
    let roles: Vec<String> = roles
        .iter()
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .collect();
    match sluice_server::auth::add_user(file, username, password, &roles, update) {
        Ok(outcome) => {
            let verb = match outcome {
                sluice_server::auth::AddOutcome::Added => "added",
                sluice_server::auth::AddOutcome::Updated => "updated",
            };
            eprintln!("{verb} user [{username}] in {}", file.display());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

fn gen_logs(out: &mut impl Write, docs: u64, seed: u64, index: &str) -> std::io::Result<()> {
    let generator =
        sluice_datagen::LogGenerator::new(seed, sluice_datagen::DEFAULT_START_EPOCH_MILLIS);
    let action = serde_json::json!({"index": {"_index": index}}).to_string();
    for doc in generator.take(docs as usize) {
        writeln!(out, "{action}")?;
        writeln!(out, "{doc}")?;
    }
    Ok(())
}
