//! Node configuration: `config/sluice.yml`, then `SLUICE_*` environment variables, then
//! `-E key=value` flags, later sources overriding earlier ones, with OpenSearch-style dotted keys.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Setting keys the node reads; each is also the name users write.
pub mod keys {
    /// Address the HTTP server binds.
    pub const HTTP_HOST: &str = "http.host";
    /// Port the HTTP server binds; 0 picks a free one.
    pub const HTTP_PORT: &str = "http.port";
    /// Address the node tells clients to reach its HTTP server at (`_nodes`, `_cat/nodes`);
    /// by default `http.host`, or one of the machine's addresses when that is a wildcard.
    pub const HTTP_PUBLISH_HOST: &str = "http.publish_host";
    /// Port the node tells clients to reach its HTTP server at; by default the bound one.
    pub const HTTP_PUBLISH_PORT: &str = "http.publish_port";
    /// Largest request body accepted.
    pub const HTTP_MAX_CONTENT_LENGTH: &str = "http.max_content_length";
    /// How long a connection may read nothing before it is closed; `0` (the default) never.
    pub const HTTP_READ_TIMEOUT: &str = "http.read_timeout";
    /// How long a stopping node waits for its requests in flight before it closes their
    /// connections.
    pub const HTTP_SHUTDOWN_GRACE: &str = "http.shutdown_grace";
    /// Folder holding indices and node state.
    pub const PATH_DATA: &str = "path.data";
    /// This node's name.
    pub const NODE_NAME: &str = "node.name";
    /// The cluster's name.
    pub const CLUSTER_NAME: &str = "cluster.name";
    /// Threads of the search pool (OpenSearch's static `thread_pool.search.size`).
    pub const SEARCH_POOL_SIZE: &str = "thread_pool.search.size";
    /// Waiting room of the search pool (`thread_pool.search.queue_size`).
    pub const SEARCH_POOL_QUEUE_SIZE: &str = "thread_pool.search.queue_size";
    /// Authentication mode: `none`, `basic` or `proxy`.
    pub const AUTH_TYPE: &str = "auth.type";
    /// The users file `basic` authentication checks passwords against.
    pub const AUTH_USERS_FILE: &str = "auth.users_file";
    /// The header a trusted proxy names the user in.
    pub const AUTH_PROXY_USER_HEADER: &str = "auth.proxy.user_header";
    /// The header a trusted proxy lists the user's roles in, comma-separated.
    pub const AUTH_PROXY_ROLES_HEADER: &str = "auth.proxy.roles_header";
    /// Peers (comma-separated IPs or CIDRs) whose proxy headers are believed.
    pub const AUTH_PROXY_TRUSTED_ADDRESSES: &str = "auth.proxy.trusted_addresses";
    /// Roles (comma-separated) with every permission, the admin APIs included.
    pub const AUTH_ADMIN_ROLES: &str = "auth.admin_roles";
    /// The roles file: per role, cluster and index permissions.
    pub const AUTH_ROLES_FILE: &str = "auth.roles_file";
    /// The memory task usage is a fraction of: bytes (`8gb`) or a percentage (`50%`) of the
    /// node's memory (cgroup limit, else physical).
    pub const NODE_MEMORY_BUDGET: &str = "node.memory_budget";
    /// Other nodes' transport addresses (`host:port`, comma-separated or a YAML list).
    pub const DISCOVERY_SEED_HOSTS: &str = "discovery.seed_hosts";
    /// Address node-to-node RPC (TCP) and gossip (UDP) bind.
    pub const TRANSPORT_HOST: &str = "transport.host";
    /// Port (or range) of the transport; `0` picks a free one.
    pub const TRANSPORT_PORT: &str = "transport.port";
    /// Address the node tells other nodes to reach its transport at; by default
    /// `http.publish_host` when set, else `transport.host`, or one of the machine's addresses
    /// when that is a wildcard.
    pub const TRANSPORT_PUBLISH_HOST: &str = "transport.publish_host";
    /// Port the node tells other nodes to reach its transport at; by default the bound one.
    pub const TRANSPORT_PUBLISH_PORT: &str = "transport.publish_port";
    /// The metastore: unset for the embedded SQLite file in `path.data`, or
    /// `postgres://user:password@host:port/db` for a PostgreSQL database shared by a cluster.
    pub const METASTORE_URI: &str = "metastore.uri";
    /// What runs admitted search-class work: `embedded` or `upstream` (a gateway).
    pub const BACKEND_TYPE: &str = "backend.type";
    /// The upstream cluster's nodes, comma-separated `http(s)://host:port` URLs.
    pub const BACKEND_UPSTREAM_HOSTS: &str = "backend.upstream.hosts";
    /// The gateway's username on the upstream.
    pub const BACKEND_UPSTREAM_USERNAME: &str = "backend.upstream.username";
    /// The gateway's password on the upstream.
    pub const BACKEND_UPSTREAM_PASSWORD: &str = "backend.upstream.password";
    /// PEM file of the CA certificates the upstream's certificates are verified against.
    pub const BACKEND_UPSTREAM_CA_FILE: &str = "backend.upstream.ca_file";
    /// How long connecting to an upstream host may take.
    pub const BACKEND_UPSTREAM_CONNECT_TIMEOUT: &str = "backend.upstream.connect_timeout";
    /// How long the upstream may take to start answering a request.
    pub const BACKEND_UPSTREAM_REQUEST_TIMEOUT: &str = "backend.upstream.request_timeout";
    /// How the client's identity reaches the upstream: `service`, `passthrough`, `proxy`,
    /// `run_as`.
    pub const BACKEND_UPSTREAM_IDENTITY: &str = "backend.upstream.identity";
    /// The upstream's search threads in all (what a gateway's cpu limits are a share of).
    pub const BACKEND_UPSTREAM_SEARCH_THREADS: &str = "backend.upstream.search_threads";
    /// The header `identity: proxy` names the user in.
    pub const BACKEND_UPSTREAM_PROXY_USER_HEADER: &str = "backend.upstream.proxy.user_header";
    /// The header `identity: proxy` lists the user's roles in.
    pub const BACKEND_UPSTREAM_PROXY_ROLES_HEADER: &str = "backend.upstream.proxy.roles_header";
    /// Whether searches and counts to a plain-`http://` upstream take the gateway's fast lane.
    pub const BACKEND_UPSTREAM_FAST_LANE: &str = "backend.upstream.fast_lane";
    /// The longest a cancelled or abandoned search keeps its group's slot while the upstream
    /// still lists it.
    pub const BACKEND_UPSTREAM_CANCEL_WAIT_TIMEOUT: &str = "backend.upstream.cancel_wait_timeout";
    /// The log line format: `text` (the default) or `json` (one object per line).
    pub const LOGGER_FORMAT: &str = "logger.format";
}

/// Every key accepted in the config file, env and flags.
const KNOWN_KEYS: &[&str] = &[
    keys::HTTP_HOST,
    keys::HTTP_PORT,
    keys::HTTP_PUBLISH_HOST,
    keys::HTTP_PUBLISH_PORT,
    keys::HTTP_MAX_CONTENT_LENGTH,
    keys::HTTP_READ_TIMEOUT,
    keys::HTTP_SHUTDOWN_GRACE,
    keys::PATH_DATA,
    keys::NODE_NAME,
    keys::CLUSTER_NAME,
    keys::SEARCH_POOL_SIZE,
    keys::SEARCH_POOL_QUEUE_SIZE,
    keys::AUTH_TYPE,
    keys::AUTH_USERS_FILE,
    keys::AUTH_PROXY_USER_HEADER,
    keys::AUTH_PROXY_ROLES_HEADER,
    keys::AUTH_PROXY_TRUSTED_ADDRESSES,
    keys::AUTH_ADMIN_ROLES,
    keys::AUTH_ROLES_FILE,
    keys::NODE_MEMORY_BUDGET,
    keys::DISCOVERY_SEED_HOSTS,
    keys::TRANSPORT_HOST,
    keys::TRANSPORT_PORT,
    keys::TRANSPORT_PUBLISH_HOST,
    keys::TRANSPORT_PUBLISH_PORT,
    keys::METASTORE_URI,
    keys::BACKEND_TYPE,
    keys::BACKEND_UPSTREAM_HOSTS,
    keys::BACKEND_UPSTREAM_USERNAME,
    keys::BACKEND_UPSTREAM_PASSWORD,
    keys::BACKEND_UPSTREAM_CA_FILE,
    keys::BACKEND_UPSTREAM_CONNECT_TIMEOUT,
    keys::BACKEND_UPSTREAM_REQUEST_TIMEOUT,
    keys::BACKEND_UPSTREAM_IDENTITY,
    keys::BACKEND_UPSTREAM_SEARCH_THREADS,
    keys::BACKEND_UPSTREAM_PROXY_USER_HEADER,
    keys::BACKEND_UPSTREAM_PROXY_ROLES_HEADER,
    keys::BACKEND_UPSTREAM_FAST_LANE,
    keys::BACKEND_UPSTREAM_CANCEL_WAIT_TIMEOUT,
    keys::LOGGER_FORMAT,
];

/// The default config file, relative to the working directory.
pub const DEFAULT_CONFIG_FILE: &str = "config/sluice.yml";
/// OpenSearch's default `http.max_content_length`: 100mb.
const DEFAULT_MAX_CONTENT_LENGTH: u64 = 100 * 1024 * 1024;

/// The validated node configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// `http.host`.
    pub http_host: IpAddr,
    /// `http.port`.
    pub http_port: u16,
    /// `http.publish_host`; `None`: resolved from the bound address at start
    /// ([`crate::cluster::publish`]).
    pub http_publish_host: Option<IpAddr>,
    /// `http.publish_port`; `None`: the bound port.
    pub http_publish_port: Option<u16>,
    /// `http.max_content_length`, bytes.
    pub max_content_length: u64,
    /// `http.read_timeout`; `None` for OpenSearch's default, `0`: never.
    pub read_timeout: Option<std::time::Duration>,
    /// `http.shutdown_grace`: how long a stopping node waits for the requests in flight on its
    /// connections before it closes them (`crate::http::serve`).
    pub shutdown_grace: std::time::Duration,
    /// `path.data`.
    pub data_path: PathBuf,
    /// `node.name`.
    pub node_name: String,
    /// `cluster.name`.
    pub cluster_name: String,
    /// `thread_pool.search.size`.
    pub search_pool_size: usize,
    /// `thread_pool.search.queue_size`.
    pub search_pool_queue_size: usize,
    /// `auth.*`.
    pub auth: crate::auth::AuthConfig,
    /// `node.memory_budget`, resolved at node start ([`crate::node_usage`]).
    pub memory_budget: crate::node_usage::MemoryBudget,
    /// Dynamic cluster settings given in the configuration: the node's defaults, used where
    /// `_cluster/settings` sets nothing (as OpenSearch reads them from `opensearch.yml`).
    pub cluster_defaults: BTreeMap<String, String>,
    /// `transport.*` and `discovery.seed_hosts`.
    pub transport: TransportConfig,
    /// `metastore.uri`, resolved: the embedded file `path.data/meta.sqlite` when unset. Its
    /// `Display` and `Debug` mask a PostgreSQL password.
    pub metastore: sluice_meta::MetastoreUri,
    /// `backend.*`.
    pub backend: crate::backend::upstream::config::BackendConfig,
    /// `logger.format`.
    pub log_format: crate::logging::LogFormat,
}

/// OpenSearch's default transport ports: the first free one of this range is taken.
const DEFAULT_TRANSPORT_PORTS: sluice_cluster::bind::PortSpec =
    sluice_cluster::bind::PortSpec::Range(9300, 9400);
/// The port a seed host without one is assumed to listen on (OpenSearch's default).
const DEFAULT_SEED_PORT: u16 = 9300;

/// Where the node-to-node transport binds and whom it asks to join.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// `transport.host`; defaults to `http.host`.
    pub host: IpAddr,
    /// `transport.port`; defaults to the first free port of 9300-9400.
    pub port: sluice_cluster::bind::PortSpec,
    /// `transport.publish_host`; defaults to `http.publish_host`; `None`: resolved from the
    /// bound address at start ([`crate::cluster::publish`]).
    pub publish_host: Option<IpAddr>,
    /// `transport.publish_port`; `None`: the bound port.
    pub publish_port: Option<u16>,
    /// `discovery.seed_hosts`, each `host:port`.
    pub seed_hosts: Vec<String>,
}

/// A configuration error: which key, what was wrong, what is accepted.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value that does not parse.
    #[error("invalid value [{value}] for setting [{key}] (from {source_name}): {expected}")]
    InvalidValue {
        key: String,
        value: String,
        source_name: String,
        expected: String,
    },
    /// A key sluice does not know.
    #[error("unknown setting [{key}] (from {source_name}); known settings are: {}", KNOWN_KEYS.join(", "))]
    UnknownKey { key: String, source_name: String },
    /// A config file that cannot be read or parsed.
    #[error("cannot read config file {path}: {reason}")]
    File { path: String, reason: String },
    /// A `-E` flag without `=`.
    #[error("malformed -E flag [{0}]: expected -E key=value, e.g. -E http.port=9201")]
    Flag(String),
}

fn flatten_yaml(
    prefix: &str,
    v: &serde_yaml_ng::Value,
    out: &mut Vec<(String, String)>,
) -> Result<(), String> {
    use serde_yaml_ng::Value as Y;
    match v {
        Y::Mapping(m) => {
            for (k, child) in m {
                let k = match k {
                    Y::String(s) => s.clone(),
                    other => serde_yaml_ng::to_string(other)
                        .map_err(|e| e.to_string())?
                        .trim()
                        .to_string(),
                };
                let key = if prefix.is_empty() {
                    k
                } else {
                    format!("{prefix}.{k}")
                };
                flatten_yaml(&key, child, out)?;
            }
        }
        Y::String(s) => out.push((prefix.to_string(), s.clone())),
        Y::Number(n) => out.push((prefix.to_string(), n.to_string())),
        Y::Bool(b) => out.push((prefix.to_string(), b.to_string())),
        Y::Null => {}
        // A list of scalars (`discovery.seed_hosts: [a:9300, b:9300]`) is a comma list.
        Y::Sequence(items) => {
            let mut parts = Vec::new();
            for item in items {
                match item {
                    Y::String(s) => parts.push(s.clone()),
                    Y::Number(n) => parts.push(n.to_string()),
                    _ => {
                        return Err(format!(
                            "setting [{prefix}] must be a list of single values"
                        ));
                    }
                }
            }
            out.push((prefix.to_string(), parts.join(",")));
        }
        _ => return Err(format!("setting [{prefix}] must be a single value")),
    }
    Ok(())
}

/// Collects raw settings from the three sources, in override order.
pub fn gather(
    config_file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    flags: &[String],
) -> Result<BTreeMap<String, (String, String)>, ConfigError> {
    let mut raw: BTreeMap<String, (String, String)> = BTreeMap::new();
    let default_file = Path::new(DEFAULT_CONFIG_FILE);
    let file = match config_file {
        Some(p) => Some(p.to_path_buf()),
        None if default_file.exists() => Some(default_file.to_path_buf()),
        None => None,
    };
    if let Some(path) = file {
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::File {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let yaml: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&text).map_err(|e| ConfigError::File {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        let mut flat = Vec::new();
        if !matches!(yaml, serde_yaml_ng::Value::Null) {
            flatten_yaml("", &yaml, &mut flat).map_err(|reason| ConfigError::File {
                path: path.display().to_string(),
                reason,
            })?;
        }
        let src = path.display().to_string();
        for (k, v) in flat {
            check_known(&k, &src)?;
            raw.insert(k, (v, src.clone()));
        }
    }
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("SLUICE_") else {
            continue;
        };
        // The project's test tools' own variables (`scripts/postgres.sh` exports
        // SLUICE_TEST_POSTGRES_URL), which a shell that ran them still carries: no setting's
        // key begins with `test.`.
        if rest.starts_with("TEST_") {
            continue;
        }
        let wanted = rest.to_ascii_lowercase();
        let key = KNOWN_KEYS
            .iter()
            .copied()
            .chain(crate::settings::SETTINGS.iter().map(|d| d.key))
            .find(|k| k.replace(['.', '_'], "_") == wanted);
        match key {
            Some(k) => {
                raw.insert((*k).to_string(), (value, format!("env {name}")));
            }
            None => {
                return Err(ConfigError::UnknownKey {
                    key: name,
                    source_name: "environment".into(),
                });
            }
        }
    }
    for flag in flags {
        let (k, v) = flag
            .split_once('=')
            .ok_or_else(|| ConfigError::Flag(flag.clone()))?;
        let k = k.trim();
        check_known(k, "-E flag")?;
        raw.insert(k.to_string(), (v.to_string(), "-E flag".into()));
    }
    Ok(raw)
}

fn check_known(key: &str, src: &str) -> Result<(), ConfigError> {
    if KNOWN_KEYS.contains(&key) || crate::settings::definition(key).is_some() {
        Ok(())
    } else {
        Err(ConfigError::UnknownKey {
            key: key.to_string(),
            source_name: src.to_string(),
        })
    }
}

/// Runs the cross-setting rules of `_cluster/settings` over the node's defaults.
fn check_cluster_defaults(defaults: &BTreeMap<String, String>) -> Result<(), String> {
    let snapshot = crate::settings::SettingsSnapshot::from_node_defaults(defaults.clone());
    for rule in crate::settings::CROSS_CHECKS {
        rule(&snapshot)?;
    }
    Ok(())
}

/// Parses a byte size like `100mb` (see [`sluice_wire::parse_byte_size`]).
pub use sluice_wire::parse_byte_size;

fn default_node_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "sluice-node".to_string())
}

impl Config {
    /// Validates gathered settings into a config.
    pub fn from_raw(raw: &BTreeMap<String, (String, String)>) -> Result<Config, ConfigError> {
        let get = |k: &str| raw.get(k).map(|(v, s)| (v.as_str(), s.as_str()));
        let invalid =
            |key: &str, value: &str, src: &str, expected: &str| ConfigError::InvalidValue {
                key: key.to_string(),
                value: value.to_string(),
                source_name: src.to_string(),
                expected: expected.to_string(),
            };
        let http_host = match get(keys::HTTP_HOST) {
            None => IpAddr::from([127, 0, 0, 1]),
            Some(("localhost", _)) => IpAddr::from([127, 0, 0, 1]),
            Some((v, s)) => v.parse().map_err(|_| {
                invalid(
                    keys::HTTP_HOST,
                    v,
                    s,
                    "expected an IP address such as 127.0.0.1, 0.0.0.0 or ::1, or localhost",
                )
            })?,
        };
        let http_port = match get(keys::HTTP_PORT) {
            None => 9200,
            Some((v, s)) => v.trim().parse::<u16>().map_err(|_| {
                invalid(
                    keys::HTTP_PORT,
                    v,
                    s,
                    "expected a port number between 0 and 65535 (0 picks a free port)",
                )
            })?,
        };
        let http_publish_host = publish_host(&get, keys::HTTP_PUBLISH_HOST)?;
        let http_publish_port = publish_port(&get, keys::HTTP_PUBLISH_PORT)?;
        let max_content_length = match get(keys::HTTP_MAX_CONTENT_LENGTH) {
            None => DEFAULT_MAX_CONTENT_LENGTH,
            Some((v, s)) => parse_byte_size(v).filter(|n| *n > 0).ok_or_else(|| {
                invalid(
                    keys::HTTP_MAX_CONTENT_LENGTH,
                    v,
                    s,
                    "expected a positive byte size such as 100mb, 512kb or 1gb",
                )
            })?,
        };
        // OpenSearch's `timeSetting("http.read_timeout", 0, min 0)`: `-1` is below the minimum.
        let read_timeout = match get(keys::HTTP_READ_TIMEOUT) {
            None => None,
            Some((v, s)) => match sluice_wire::parse_time_value(v, keys::HTTP_READ_TIMEOUT) {
                Ok(sluice_wire::TimeValue::After(d)) => Some(d).filter(|d| !d.is_zero()),
                _ => {
                    return Err(invalid(
                        keys::HTTP_READ_TIMEOUT,
                        v,
                        s,
                        "expected a time value of at least 0ms such as 30s or 5m (0: never)",
                    ));
                }
            },
        };
        // Below Kubernetes' default 30 s between SIGTERM and SIGKILL, so the node closes its
        // last connections itself and still commits its indices before it is killed.
        let shutdown_grace = match get(keys::HTTP_SHUTDOWN_GRACE) {
            None => std::time::Duration::from_secs(20),
            Some((v, s)) => match sluice_wire::parse_time_value(v, keys::HTTP_SHUTDOWN_GRACE) {
                Ok(sluice_wire::TimeValue::After(d)) => d,
                _ => {
                    return Err(invalid(
                        keys::HTTP_SHUTDOWN_GRACE,
                        v,
                        s,
                        "expected a time value of at least 0ms such as 20s",
                    ));
                }
            },
        };
        let data_path = match get(keys::PATH_DATA) {
            None => PathBuf::from("data"),
            Some((v, s)) if v.trim().is_empty() => {
                return Err(invalid(keys::PATH_DATA, v, s, "expected a directory path"));
            }
            Some((v, _)) => PathBuf::from(v),
        };
        let name_setting = |key: &str, default: String| -> Result<String, ConfigError> {
            match get(key) {
                None => Ok(default),
                Some((v, s)) if v.trim().is_empty() || v.contains(':') => {
                    Err(invalid(key, v, s, "expected a non-empty name without ':'"))
                }
                Some((v, _)) => Ok(v.to_string()),
            }
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let count =
            |key: &str, default: usize, min: usize, max: usize| -> Result<usize, ConfigError> {
                match get(key) {
                    None => Ok(default),
                    Some((v, s)) => v
                        .trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (min..=max).contains(n))
                        .ok_or_else(|| {
                            invalid(
                                key,
                                v,
                                s,
                                &format!("expected an integer between {min} and {max}"),
                            )
                        }),
                }
            };
        let search_pool_size = count(
            keys::SEARCH_POOL_SIZE,
            crate::pool::default_pool_size(cores),
            1,
            1024,
        )?;
        let search_pool_queue_size = count(
            keys::SEARCH_POOL_QUEUE_SIZE,
            crate::pool::DEFAULT_QUEUE_SIZE,
            0,
            1_000_000,
        )?;
        let auth = auth_config(&get)?;
        let backend = crate::backend::upstream::config::backend_config(&get, &auth)?;
        let memory_budget = match get(keys::NODE_MEMORY_BUDGET) {
            None => crate::node_usage::MemoryBudget::default(),
            Some((v, s)) => crate::node_usage::MemoryBudget::parse(v).ok_or_else(|| {
                invalid(
                    keys::NODE_MEMORY_BUDGET,
                    v,
                    s,
                    crate::node_usage::MemoryBudget::EXPECTED,
                )
            })?,
        };
        let mut cluster_defaults = BTreeMap::new();
        for (key, (value, src)) in raw {
            if let Some(def) = crate::settings::definition(key) {
                crate::settings::parse_value(def, value)
                    .map_err(|e| invalid(key, value, src, &e))?;
                cluster_defaults.insert(key.clone(), value.clone());
            }
        }
        check_cluster_defaults(&cluster_defaults).map_err(|e| ConfigError::InvalidValue {
            key: "cluster settings".into(),
            value: format!("{cluster_defaults:?}"),
            source_name: "configuration".into(),
            expected: e,
        })?;
        let transport = transport_config(&get, http_host, http_publish_host)?;
        let metastore = match get(keys::METASTORE_URI) {
            None => sluice_meta::MetastoreUri::embedded(&data_path),
            // The value is echoed masked: it may carry a password.
            Some((v, s)) => sluice_meta::MetastoreUri::parse(v).map_err(|expected| {
                invalid(
                    keys::METASTORE_URI,
                    &sluice_meta::redact_url(v),
                    s,
                    &expected,
                )
            })?,
        };
        if !transport.seed_hosts.is_empty() && !metastore.kind().is_shared() {
            let (v, s) = get(keys::DISCOVERY_SEED_HOSTS).unwrap_or_default();
            return Err(invalid(
                keys::DISCOVERY_SEED_HOSTS,
                v,
                s,
                "other nodes to join, but metastore.uri is this node's embedded SQLite file: \
                 the nodes of a cluster share one metastore, so set metastore.uri to \
                 postgres://user:password@host:port/db on every node (or remove \
                 discovery.seed_hosts to run a single node)",
            ));
        }
        let log_format = match get(keys::LOGGER_FORMAT) {
            None => crate::logging::LogFormat::default(),
            Some((v, s)) => crate::logging::LogFormat::parse(v).ok_or_else(|| {
                invalid(
                    keys::LOGGER_FORMAT,
                    v,
                    s,
                    crate::logging::LogFormat::EXPECTED,
                )
            })?,
        };
        Ok(Config {
            cluster_defaults,
            log_format,
            transport,
            metastore,
            backend,
            memory_budget,
            auth,
            search_pool_size,
            search_pool_queue_size,
            http_host,
            http_port,
            http_publish_host,
            http_publish_port,
            max_content_length,
            read_timeout,
            shutdown_grace,
            data_path,
            node_name: name_setting(keys::NODE_NAME, default_node_name())?,
            cluster_name: name_setting(keys::CLUSTER_NAME, "sluice".to_string())?,
        })
    }

    /// Loads the configuration from file, the process environment and flags.
    pub fn load(config_file: Option<&Path>, flags: &[String]) -> Result<Config, ConfigError> {
        let raw = gather(config_file, std::env::vars(), flags)?;
        Config::from_raw(&raw)
    }
}

/// Validates `transport.host`, `transport.port`, `transport.publish_*` and
/// `discovery.seed_hosts`.
fn transport_config<'a>(
    get: &dyn Fn(&str) -> Option<(&'a str, &'a str)>,
    http_host: IpAddr,
    http_publish_host: Option<IpAddr>,
) -> Result<TransportConfig, ConfigError> {
    let invalid = |key: &str, value: &str, src: &str, expected: &str| ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        source_name: src.to_string(),
        expected: expected.to_string(),
    };
    let host = match get(keys::TRANSPORT_HOST) {
        None => http_host,
        Some(("localhost", _)) => IpAddr::from([127, 0, 0, 1]),
        Some((v, s)) => v.trim().parse().map_err(|_| {
            invalid(
                keys::TRANSPORT_HOST,
                v,
                s,
                "expected an IP address such as 127.0.0.1 or 10.0.0.5, or localhost",
            )
        })?,
    };
    let port = match get(keys::TRANSPORT_PORT) {
        None => DEFAULT_TRANSPORT_PORTS,
        Some((v, s)) => sluice_cluster::bind::PortSpec::parse(v)
            .map_err(|e| invalid(keys::TRANSPORT_PORT, v, s, &format!("expected {e}")))?,
    };
    let mut seed_hosts = Vec::new();
    if let Some((v, s)) = get(keys::DISCOVERY_SEED_HOSTS) {
        for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            seed_hosts.push(seed_host(entry).ok_or_else(|| {
                invalid(
                    keys::DISCOVERY_SEED_HOSTS,
                    entry,
                    s,
                    "expected host:port transport addresses of other nodes, comma-separated, \
                     such as 10.0.0.5:9300,10.0.0.6:9300 (a host without a port means port 9300)",
                )
            })?);
        }
    }
    Ok(TransportConfig {
        host,
        port,
        publish_host: publish_host(get, keys::TRANSPORT_PUBLISH_HOST)?.or(http_publish_host),
        publish_port: publish_port(get, keys::TRANSPORT_PUBLISH_PORT)?,
        seed_hosts,
    })
}

/// Validates a `*.publish_host`: an IP address or `localhost`, never a wildcard, which no
/// other machine can reach (it would dial itself).
fn publish_host<'a>(
    get: &dyn Fn(&str) -> Option<(&'a str, &'a str)>,
    key: &str,
) -> Result<Option<IpAddr>, ConfigError> {
    let invalid = |v: &str, s: &str, expected: &str| ConfigError::InvalidValue {
        key: key.to_string(),
        value: v.to_string(),
        source_name: s.to_string(),
        expected: expected.to_string(),
    };
    match get(key) {
        None => Ok(None),
        Some((v, _)) if v.trim() == "localhost" => Ok(Some(IpAddr::from([127, 0, 0, 1]))),
        Some((v, s)) => match v.trim().parse::<IpAddr>() {
            Ok(ip) if ip.is_unspecified() => Err(invalid(
                v,
                s,
                "a wildcard address cannot be published: other nodes and clients would connect \
                 to themselves; expected an address of this machine they can reach, such as \
                 10.0.0.5, or leave it unset to publish one of the machine's addresses",
            )),
            Ok(ip) if ip.is_multicast() || ip == IpAddr::from([255, 255, 255, 255]) => {
                Err(invalid(
                    v,
                    s,
                    "a multicast or broadcast address cannot be published; expected an address of this machine \
                 other nodes and clients can reach, such as 10.0.0.5",
                ))
            }
            Ok(ip) => Ok(Some(ip)),
            Err(_) => Err(invalid(
                v,
                s,
                "expected an IP address such as 10.0.0.5 or 2001:db8::5, or localhost",
            )),
        },
    }
}

/// Validates a `*.publish_port`: 1-65535, or OpenSearch's `-1` for the bound port (as unset).
fn publish_port<'a>(
    get: &dyn Fn(&str) -> Option<(&'a str, &'a str)>,
    key: &str,
) -> Result<Option<u16>, ConfigError> {
    match get(key) {
        None => Ok(None),
        Some((v, _)) if v.trim() == "-1" => Ok(None),
        Some((v, s)) => v
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .map(Some)
            .ok_or_else(|| ConfigError::InvalidValue {
                key: key.to_string(),
                value: v.to_string(),
                source_name: s.to_string(),
                expected: "expected a port number between 1 and 65535 (or -1 for the bound port)"
                    .to_string(),
            }),
    }
}

/// A seed host as `host:port` (port 9300 when missing); `None` when malformed.
fn seed_host(entry: &str) -> Option<String> {
    if entry.parse::<std::net::SocketAddr>().is_ok() {
        return Some(entry.to_string());
    }
    if let Ok(ip) = entry.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Some(std::net::SocketAddr::new(ip, DEFAULT_SEED_PORT).to_string());
    }
    let (host, port) = match entry.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().ok().filter(|p| *p > 0)?),
        None => (entry, DEFAULT_SEED_PORT),
    };
    let valid_name = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    valid_name.then(|| format!("{host}:{port}"))
}

/// Validates the `auth.*` settings.
fn auth_config<'a>(
    get: &dyn Fn(&str) -> Option<(&'a str, &'a str)>,
) -> Result<crate::auth::AuthConfig, ConfigError> {
    use crate::auth::{AuthConfig, AuthMode, IpCidr};
    let invalid = |key: &str, value: &str, src: &str, expected: &str| ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        source_name: src.to_string(),
        expected: expected.to_string(),
    };
    let mut auth = AuthConfig::default();
    if let Some((v, s)) = get(keys::AUTH_TYPE) {
        auth.mode = AuthMode::parse(v).ok_or_else(|| {
            invalid(
                keys::AUTH_TYPE,
                v,
                s,
                &format!("expected {}", AuthMode::ACCEPTED),
            )
        })?;
    }
    if let Some((v, s)) = get(keys::AUTH_USERS_FILE) {
        if v.trim().is_empty() {
            return Err(invalid(keys::AUTH_USERS_FILE, v, s, "expected a file path"));
        }
        auth.users_file = PathBuf::from(v);
    }
    if let Some((v, s)) = get(keys::AUTH_ROLES_FILE) {
        if v.trim().is_empty() {
            return Err(invalid(keys::AUTH_ROLES_FILE, v, s, "expected a file path"));
        }
        auth.roles_file = PathBuf::from(v);
        auth.roles_file_required = true;
    }
    let header = |key: &str| -> Result<Option<http::HeaderName>, ConfigError> {
        match get(key) {
            None => Ok(None),
            Some((v, s)) => http::HeaderName::from_bytes(v.trim().as_bytes())
                .map(Some)
                .map_err(|_| {
                    invalid(
                        key,
                        v,
                        s,
                        "expected an HTTP header name such as x-proxy-user",
                    )
                }),
        }
    };
    if let Some(h) = header(keys::AUTH_PROXY_USER_HEADER)? {
        auth.proxy_user_header = h;
    }
    if let Some(h) = header(keys::AUTH_PROXY_ROLES_HEADER)? {
        auth.proxy_roles_header = h;
    }
    let list = |v: &str| -> Vec<String> {
        v.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    };
    if let Some((v, s)) = get(keys::AUTH_PROXY_TRUSTED_ADDRESSES) {
        auth.trusted_addresses = list(v)
            .iter()
            .map(|a| IpCidr::parse(a))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                invalid(
                    keys::AUTH_PROXY_TRUSTED_ADDRESSES,
                    v,
                    s,
                    "expected comma-separated IP addresses or CIDRs such as 127.0.0.1, 10.0.0.0/8 or ::1",
                )
            })?;
    }
    if let Some((v, s)) = get(keys::AUTH_ADMIN_ROLES) {
        auth.admin_roles = list(v);
        if auth.admin_roles.is_empty() {
            return Err(invalid(
                keys::AUTH_ADMIN_ROLES,
                v,
                s,
                "expected one or more comma-separated role names such as admin",
            ));
        }
    }
    if auth.mode == AuthMode::Proxy && auth.trusted_addresses.is_empty() {
        let (v, s) = get(keys::AUTH_TYPE).unwrap_or(("proxy", "default"));
        return Err(invalid(
            keys::AUTH_TYPE,
            v,
            s,
            "auth.type proxy needs auth.proxy.trusted_addresses: the addresses of the proxies whose user headers are believed, e.g. 127.0.0.1",
        ));
    }
    Ok(auth)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(
        file: Option<&str>,
        env: &[(&str, &str)],
        flags: &[&str],
    ) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluice.yml");
        if let Some(text) = file {
            std::fs::write(&path, text).unwrap();
        }
        let raw = gather(
            file.map(|_| path.as_path()),
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            &flags.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )?;
        Config::from_raw(&raw)
    }

    #[test]
    fn test_transport_settings_parse_and_bad_ones_name_the_key() {
        let c = load(None, &[], &[]).unwrap();
        assert_eq!(
            c.transport.port,
            sluice_cluster::bind::PortSpec::Range(9300, 9400)
        );
        assert_eq!(c.transport.host, c.http_host);
        assert!(c.transport.seed_hosts.is_empty());
        let pg = "metastore.uri=postgres://u:p@127.0.0.1:5432/db";
        let c = load(
            Some("discovery:\n  seed_hosts: [\"10.0.0.5:9301\", \"10.0.0.6\", \"db-1.internal:9302\"]\n"),
            &[],
            &[pg, "transport.port=0", "transport.host=127.0.0.2"],
        )
        .unwrap();
        assert_eq!(
            c.transport.seed_hosts,
            ["10.0.0.5:9301", "10.0.0.6:9300", "db-1.internal:9302"]
        );
        assert_eq!(c.transport.port, sluice_cluster::bind::PortSpec::Exact(0));
        for (flag, key) in [
            ("transport.port=nine", "transport.port"),
            ("transport.port=9400-9300", "transport.port"),
            ("transport.host=not-an-ip", "transport.host"),
            (
                "discovery.seed_hosts=10.0.0.5:99999",
                "discovery.seed_hosts",
            ),
            ("discovery.seed_hosts=bad host:9300", "discovery.seed_hosts"),
        ] {
            let err = load(None, &[], &[pg, flag]).unwrap_err().to_string();
            assert!(err.contains(&format!("[{key}]")), "{flag}: {err}");
        }
    }

    #[test]
    fn test_publish_settings_parse_default_and_refuse_wildcards_naming_the_key() {
        let c = load(None, &[], &[]).unwrap();
        assert_eq!(c.http_publish_host, None);
        assert_eq!(c.http_publish_port, None);
        assert_eq!(c.transport.publish_host, None);
        assert_eq!(c.transport.publish_port, None);
        let c = load(
            Some("http:\n  publish_host: 10.0.0.5\n  publish_port: 80\n"),
            &[("SLUICE_TRANSPORT_PUBLISH_PORT", "9350")],
            &["http.host=0.0.0.0"],
        )
        .unwrap();
        let ten: IpAddr = "10.0.0.5".parse().unwrap();
        assert_eq!(c.http_publish_host, Some(ten));
        assert_eq!(c.http_publish_port, Some(80));
        // `transport.publish_host` defaults to `http.publish_host`, as `transport.host` to
        // `http.host`.
        assert_eq!(c.transport.publish_host, Some(ten));
        assert_eq!(c.transport.publish_port, Some(9350));
        let c = load(
            None,
            &[],
            &[
                "http.publish_host=10.0.0.5",
                "transport.publish_host=localhost",
                "http.publish_port=-1",
            ],
        )
        .unwrap();
        assert_eq!(c.transport.publish_host, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(c.http_publish_port, None, "-1: the bound port");
        for (flag, key, says) in [
            ("http.publish_host=0.0.0.0", "http.publish_host", "wildcard"),
            ("http.publish_host=::", "http.publish_host", "wildcard"),
            (
                "transport.publish_host=0.0.0.0",
                "transport.publish_host",
                "wildcard",
            ),
            (
                "transport.publish_host=224.0.0.1",
                "transport.publish_host",
                "multicast",
            ),
            (
                "http.publish_host=my host",
                "http.publish_host",
                "IP address",
            ),
            (
                "http.publish_port=0",
                "http.publish_port",
                "between 1 and 65535",
            ),
            (
                "http.publish_port=70000",
                "http.publish_port",
                "between 1 and 65535",
            ),
            (
                "transport.publish_port=x",
                "transport.publish_port",
                "between 1 and 65535",
            ),
        ] {
            let err = load(None, &[], &[flag]).unwrap_err().to_string();
            assert!(
                err.starts_with("invalid value [") && err.contains(&format!("[{key}]")),
                "{flag}: {err}"
            );
            assert!(err.contains(says), "{flag}: {err}");
        }
    }

    #[test]
    fn test_seed_hosts_on_the_embedded_metastore_refuse_to_start() {
        let err = load(None, &[], &["discovery.seed_hosts=127.0.0.1:9300"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("[discovery.seed_hosts]"), "{err}");
        assert!(
            err.contains("metastore.uri") && err.contains("postgres://"),
            "{err}"
        );
    }

    #[test]
    fn test_later_sources_override_earlier() {
        let c = load(
            Some("http.port: 9300\nnode.name: a\ncluster:\n  name: c1\n"),
            &[("SLUICE_HTTP_PORT", "9400")],
            &[],
        )
        .unwrap();
        assert_eq!(c.http_port, 9400);
        assert_eq!(c.node_name, "a");
        assert_eq!(c.cluster_name, "c1");
        let c = load(
            Some("http.port: 9300"),
            &[("SLUICE_HTTP_PORT", "9400")],
            &["http.port=9500", "path.data=data/n1"],
        )
        .unwrap();
        assert_eq!(c.http_port, 9500);
        assert_eq!(c.data_path, PathBuf::from("data/n1"));
    }

    #[test]
    fn test_unknown_environment_settings_are_refused_but_the_test_tools_own_are_not_settings() {
        let e = load(None, &[("SLUICE_HTTP_PROT", "9400")], &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SLUICE_HTTP_PROT"), "{e}");
        // What `eval "$(scripts/postgres.sh start)"` leaves in the shell.
        let c = load(
            None,
            &[
                (
                    "SLUICE_TEST_POSTGRES_URL",
                    "postgres://u:p@127.0.0.1:5432/x",
                ),
                ("SLUICE_TEST_POSTGRES_DIR", "/tmp/pg"),
                ("SLUICE_HTTP_PORT", "9400"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(c.http_port, 9400);
    }

    #[test]
    fn test_bad_value_names_key_and_accepted_values() {
        let e = load(None, &[], &["http.port=99999"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[http.port]") && e.contains("between 0 and 65535"),
            "{e}"
        );
        let e = load(None, &[], &["http.max_content_length=lots"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("http.max_content_length"), "{e}");
        let e = load(None, &[], &["http.prot=1"]).unwrap_err().to_string();
        assert!(e.contains("unknown setting [http.prot]"), "{e}");
        let e = load(None, &[], &["nonsense"]).unwrap_err().to_string();
        assert!(e.contains("-E key=value"), "{e}");
    }

    #[test]
    fn test_auth_settings_parse_with_defaults() {
        let c = load(None, &[], &[]).unwrap();
        assert_eq!(c.auth.mode, crate::auth::AuthMode::None);
        assert_eq!(c.auth.users_file, PathBuf::from("config/users.yml"));
        assert_eq!(c.auth.proxy_user_header.as_str(), "x-proxy-user");
        assert_eq!(c.auth.proxy_roles_header.as_str(), "x-proxy-roles");
        assert_eq!(c.auth.admin_roles, vec!["admin".to_string()]);
        let c = load(
            Some("auth:\n  type: proxy\n  proxy:\n    trusted_addresses: 127.0.0.1, 10.0.0.0/8\n"),
            &[("SLUICE_AUTH_ADMIN_ROLES", "ops, root")],
            &["auth.proxy.user_header=X-User"],
        )
        .unwrap();
        assert_eq!(c.auth.mode, crate::auth::AuthMode::Proxy);
        assert_eq!(c.auth.trusted_addresses.len(), 2);
        assert!(c.auth.trusted_addresses[1].contains("10.9.8.7".parse().unwrap()));
        assert_eq!(c.auth.proxy_user_header.as_str(), "x-user");
        assert_eq!(
            c.auth.admin_roles,
            vec!["ops".to_string(), "root".to_string()]
        );
    }

    #[test]
    fn test_bad_auth_values_name_key_and_accepted_values() {
        let e = load(None, &[], &["auth.type=ldap"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[auth.type]") && e.contains("none, basic or proxy"),
            "{e}"
        );
        let e = load(None, &[], &["auth.type=proxy"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("auth.proxy.trusted_addresses"), "{e}");
        let e = load(None, &[], &["auth.proxy.trusted_addresses=10.0.0.0/40"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[auth.proxy.trusted_addresses]") && e.contains("CIDR"),
            "{e}"
        );
        let e = load(None, &[], &["auth.proxy.user_header=bad header"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("[auth.proxy.user_header]"), "{e}");
        let e = load(None, &[], &["auth.admin_roles= , "])
            .unwrap_err()
            .to_string();
        assert!(e.contains("[auth.admin_roles]"), "{e}");
    }

    #[test]
    fn test_memory_budget_defaults_to_all_memory_and_rejects_bad_values() {
        use crate::node_usage::MemoryBudget;
        let c = load(None, &[], &[]).unwrap();
        assert_eq!(c.memory_budget, MemoryBudget::Percent(100.0));
        let c = load(None, &[("SLUICE_NODE_MEMORY_BUDGET", "2gb")], &[]).unwrap();
        assert_eq!(c.memory_budget, MemoryBudget::Bytes(2 << 30));
        let c = load(Some("node:\n  memory_budget: 50%\n"), &[], &[]).unwrap();
        assert_eq!(c.memory_budget, MemoryBudget::Percent(50.0));
        let e = load(None, &[], &["node.memory_budget=150%"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[node.memory_budget]") && e.contains("such as 50%"),
            "{e}"
        );
    }

    #[test]
    fn test_metastore_uri_defaults_to_the_embedded_file_and_hides_passwords() {
        use sluice_meta::{MetaKind, MetastoreUri};
        let c = load(None, &[], &["path.data=data/n1"]).unwrap();
        assert_eq!(
            c.metastore,
            MetastoreUri::embedded(Path::new("data/n1")),
            "default: path.data/meta.sqlite"
        );
        let c = load(
            None,
            &[(
                "SLUICE_METASTORE_URI",
                "postgres://app:hunter2@db.example:5432/sluice",
            )],
            &[],
        )
        .unwrap();
        assert_eq!(c.metastore.kind(), MetaKind::Postgres);
        assert!(
            !format!("{c:?}").contains("hunter2"),
            "Debug shows the password"
        );
        for bad in [
            "mysql://app:hunter2@db/sluice",
            "postgres://app:hunter2@db:notaport/sluice",
            "data/meta.sqlite",
        ] {
            let e = load(None, &[], &[&format!("metastore.uri={bad}")])
                .unwrap_err()
                .to_string();
            assert!(e.contains("[metastore.uri]"), "{e}");
            assert!(
                e.contains("postgres://user:password@host:port/database"),
                "{e}"
            );
            assert!(!e.contains("hunter2"), "the error shows the password: {e}");
        }
    }

    #[test]
    fn test_read_timeout_is_a_time_value_zero_meaning_never() {
        let c = load(None, &[], &[]).unwrap();
        assert_eq!(c.read_timeout, None);
        let c = load(None, &[], &["http.read_timeout=0"]).unwrap();
        assert_eq!(c.read_timeout, None);
        let c = load(None, &[], &["http.shutdown_grace=1s"]).unwrap();
        assert_eq!(c.shutdown_grace, std::time::Duration::from_secs(1));
        assert!(load(None, &[], &["http.shutdown_grace=-1"]).is_err());
        let c = load(None, &[], &["http.read_timeout=30s"]).unwrap();
        assert_eq!(c.read_timeout, Some(std::time::Duration::from_secs(30)));
        for bad in ["-1", "30", "soon", "-5s"] {
            let e = load(None, &[], &[&format!("http.read_timeout={bad}")])
                .unwrap_err()
                .to_string();
            assert!(e.contains("http.read_timeout"), "{e}");
            assert!(e.contains("at least 0ms"), "{e}");
        }
    }

    #[test]
    fn test_env_with_underscored_key() {
        let c = load(None, &[("SLUICE_HTTP_MAX_CONTENT_LENGTH", "1kb")], &[]).unwrap();
        assert_eq!(c.max_content_length, 1024);
    }
}
