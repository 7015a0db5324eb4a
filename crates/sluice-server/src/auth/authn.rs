//! Authentication and principals (DESIGN.md D6): who sends a request, decided by sluice alone.
//!
//! `auth.type` picks the mode ([`AuthMode`]): `none` (no principal), `basic` (HTTP Basic against
//! a users file of argon2 hashes, [`UsersFile`]) or `proxy` (user and roles read from configured
//! headers, only when the peer address is in `auth.proxy.trusted_addresses`).
//!
//! [`authenticate`], a step of every request (`crate::server`'s `check_lines`), finds a request's
//! principal (which [`crate::http::meta`] puts into the request's metadata, so admission
//! registers every task the request starts with its principal) or answers 401
//! `security_exception` with `WWW-Authenticate`. What an authenticated principal may do is [`super::authz`]'s.
//!
//! The principal is never read from a client-chosen header (proxy headers count only from
//! trusted peers), never forwarded, and never logged above DEBUG; passwords and the
//! `Authorization` header are never logged at all.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier};
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sluice_engine::{EngineError, ErrorCode};

use crate::error::ApiError;
use crate::http::header_lines::{HeaderLines, visible};

/// The `WWW-Authenticate` challenge of a 401 in `basic` mode.
pub const BASIC_CHALLENGE: &str = "Basic realm=\"sluice\"";
/// Default `auth.users_file`, relative to the working directory like `config/sluice.yml`.
pub const DEFAULT_USERS_FILE: &str = "config/users.yml";
/// Default `auth.proxy.user_header`.
pub const DEFAULT_USER_HEADER: &str = "x-proxy-user";
/// Default `auth.proxy.roles_header` (comma-separated roles).
pub const DEFAULT_ROLES_HEADER: &str = "x-proxy-roles";
/// Default `auth.roles_file`, used when it exists.
pub const DEFAULT_ROLES_FILE: &str = "config/roles.yml";
/// Default `auth.admin_roles`.
pub const DEFAULT_ADMIN_ROLE: &str = "admin";

/// How long a successful basic-auth verification is remembered: long enough that a client
/// sending a request every few ms pays the argon2 cost (~tens of ms) about once a minute,
/// short enough that a password removed from the users file (after a restart) or a stolen
/// in-memory digest is useful only briefly.
const VERIFIED_TTL: Duration = Duration::from_secs(60);
/// Concurrent argon2 verifications at most: each takes a core and 19 MiB (argon2's default
/// `m`) for tens of ms, so a burst of bad passwords costs at most ~4 cores and ~80 MiB and
/// leaves the blocking pool to engine work.
const MAX_CONCURRENT_VERIFICATIONS: usize = 4;

/// Which authentication the node performs (`auth.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// No authentication; requests have no principal.
    None,
    /// HTTP Basic against the users file.
    Basic,
    /// Headers set by a trusted reverse proxy.
    Proxy,
}

impl AuthMode {
    /// The accepted `auth.type` values, for messages.
    pub const ACCEPTED: &'static str = "none, basic or proxy";

    /// Parses an `auth.type` value.
    pub fn parse(s: &str) -> Option<AuthMode> {
        match s.trim() {
            "none" => Some(AuthMode::None),
            "basic" => Some(AuthMode::Basic),
            "proxy" => Some(AuthMode::Proxy),
            _ => None,
        }
    }
}

/// An IP network: an address and a prefix length (`10.0.0.0/8`, `::1/128`, `127.0.0.1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpCidr {
    addr: IpAddr,
    prefix: u8,
}

impl IpCidr {
    /// Parses `ip` or `ip/prefix`; host bits below the prefix are ignored.
    pub fn parse(s: &str) -> Option<IpCidr> {
        let s = s.trim();
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = ip.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max)?,
        };
        Some(IpCidr { addr, prefix })
    }

    /// Whether `ip` is in this network; an IPv4-mapped IPv6 address counts as its IPv4 form.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for IpCidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The validated `auth.*` settings.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// `auth.type`.
    pub mode: AuthMode,
    /// `auth.users_file`.
    pub users_file: PathBuf,
    /// `auth.proxy.user_header`.
    pub proxy_user_header: HeaderName,
    /// `auth.proxy.roles_header`.
    pub proxy_roles_header: HeaderName,
    /// `auth.proxy.trusted_addresses`.
    pub trusted_addresses: Vec<IpCidr>,
    /// `auth.admin_roles`: roles with every permission.
    pub admin_roles: Vec<String>,
    /// `auth.roles_file`.
    pub roles_file: PathBuf,
    /// Whether `auth.roles_file` was set, so the file must exist (at the default path it is
    /// used only when it exists).
    pub roles_file_required: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            mode: AuthMode::None,
            users_file: PathBuf::from(DEFAULT_USERS_FILE),
            proxy_user_header: HeaderName::from_static(DEFAULT_USER_HEADER),
            proxy_roles_header: HeaderName::from_static(DEFAULT_ROLES_HEADER),
            trusted_addresses: Vec::new(),
            admin_roles: vec![DEFAULT_ADMIN_ROLE.to_string()],
            roles_file: PathBuf::from(DEFAULT_ROLES_FILE),
            roles_file_required: false,
        }
    }
}

/// An authenticated user: a name and roles, established by sluice's own authentication. The
/// core's type, so tagging and the throttle's buckets share its strings instead of copying them.
pub use sluice_core::Principal;

/// One entry of the users file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    /// The user name (no `:`, which Basic auth uses as separator).
    pub username: String,
    /// An argon2 PHC string (`$argon2id$v=19$m=…`).
    #[serde(default)]
    pub password_hash: String,
    /// The user's roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Present only to reject a plaintext password with a clear message.
    #[serde(default, skip_serializing)]
    password: Option<serde_yaml_ng::Value>,
}

/// The users file: `users: [{username, password_hash, roles: [..]}]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsersFile {
    /// The users.
    #[serde(default)]
    pub users: Vec<UserEntry>,
}

/// A users file or users command failure.
#[derive(Debug, thiserror::Error)]
pub enum UsersFileError {
    /// The file cannot be read or written.
    #[error("cannot {action} users file [{path}]: {reason}")]
    Io {
        action: &'static str,
        path: String,
        reason: String,
    },
    /// The file does not parse or holds an invalid entry.
    #[error("invalid users file [{path}]: {reason}")]
    Invalid { path: String, reason: String },
    /// `users add` for a user that exists, without `--update`.
    #[error(
        "user [{username}] already exists in [{path}]; pass --update to replace its password and roles"
    )]
    Duplicate { username: String, path: String },
    /// A username, role or password the file cannot hold.
    #[error("{0}")]
    Argument(String),
}

fn check_username(name: &str) -> Result<(), String> {
    if name.trim().is_empty() || name.contains(':') || name.chars().any(char::is_control) {
        return Err(format!(
            "username [{name}] must be non-empty, without ':' or control characters"
        ));
    }
    Ok(())
}

fn check_role(role: &str) -> Result<(), String> {
    if role.trim().is_empty() || role.contains(',') || role.chars().any(char::is_control) {
        return Err(format!(
            "role [{role}] must be non-empty, without ',' or control characters"
        ));
    }
    Ok(())
}

fn parse_hash(user: &str, hash: &str) -> Result<PasswordHash, String> {
    if hash.is_empty() {
        return Err(format!(
            "user [{user}] has no password_hash; set one with `sluice users add --update`"
        ));
    }
    if hash.starts_with("$2") {
        return Err(format!(
            "user [{user}] has a bcrypt password_hash; sluice accepts argon2 hashes only: re-create the user with `sluice users add --update`"
        ));
    }
    let parsed = PasswordHash::new(hash).map_err(|e| {
        format!(
            "user [{user}] has a password_hash that is not an argon2 PHC string ({e}); create users with `sluice users add`"
        )
    })?;
    if !parsed.algorithm.as_str().starts_with("argon2") || parsed.hash.is_none() {
        return Err(format!(
            "user [{user}] has a password_hash of algorithm [{}]; sluice accepts argon2 hashes only",
            parsed.algorithm
        ));
    }
    Ok(parsed)
}

impl UsersFile {
    /// Parses and validates a users file's text: no plaintext `password` field, unique valid
    /// usernames, argon2 hashes, valid roles.
    pub fn parse(text: &str, path: &Path) -> Result<UsersFile, UsersFileError> {
        let invalid = |reason: String| UsersFileError::Invalid {
            path: path.display().to_string(),
            reason,
        };
        let file: UsersFile = if text.trim().is_empty() {
            UsersFile::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| {
                invalid(format!(
                    "{e}; expected `users: [{{username, password_hash, roles: [..]}}]`"
                ))
            })?
        };
        let mut seen = std::collections::HashSet::new();
        for u in &file.users {
            if u.password.is_some() {
                return Err(invalid(format!(
                    "user [{}] has a plaintext `password` field; sluice never accepts plaintext passwords: remove it and set `password_hash` with `sluice users add`",
                    u.username
                )));
            }
            check_username(&u.username).map_err(invalid)?;
            if !seen.insert(u.username.as_str()) {
                return Err(invalid(format!(
                    "user [{}] is listed twice; keep one entry",
                    u.username
                )));
            }
            parse_hash(&u.username, &u.password_hash).map_err(invalid)?;
            for r in &u.roles {
                check_role(r).map_err(invalid)?;
            }
        }
        Ok(file)
    }

    /// Reads and validates the users file at `path`.
    pub fn load(path: &Path) -> Result<UsersFile, UsersFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| UsersFileError::Io {
            action: "read",
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        UsersFile::parse(&text, path)
    }

    /// Writes the file atomically: a temporary file beside it (mode 0600 on unix), then a
    /// rename over the old one.
    pub fn save(&self, path: &Path) -> Result<(), UsersFileError> {
        let io = |action, e: std::io::Error| UsersFileError::Io {
            action,
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io("create the folder of", e))?;
        }
        let text = serde_yaml_ng::to_string(self).map_err(|e| UsersFileError::Invalid {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io("write", e)
        })
    }
}

/// Hashes a password as an argon2id PHC string with a random salt.
pub fn hash_password(password: &str) -> Result<String, UsersFileError> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| UsersFileError::Argument(format!("cannot hash the password: {e}")))
}

/// What [`add_user`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddOutcome {
    /// A new user was added.
    Added,
    /// An existing user's password and roles were replaced (`--update`).
    Updated,
}

/// Adds (or with `update`, replaces) a user in the users file at `path`, creating the file if
/// needed; the file is rewritten atomically.
pub fn add_user(
    path: &Path,
    username: &str,
    password: &str,
    roles: &[String],
    update: bool,
) -> Result<AddOutcome, UsersFileError> {
    check_username(username).map_err(UsersFileError::Argument)?;
    for r in roles {
        check_role(r).map_err(UsersFileError::Argument)?;
    }
    if password.is_empty() {
        return Err(UsersFileError::Argument(
            "the password is empty; write it on stdin".to_string(),
        ));
    }
    let mut file = match std::fs::read_to_string(path) {
        Ok(text) => UsersFile::parse(&text, path)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => UsersFile::default(),
        Err(e) => {
            return Err(UsersFileError::Io {
                action: "read",
                path: path.display().to_string(),
                reason: e.to_string(),
            });
        }
    };
    let existing = file.users.iter().position(|u| u.username == username);
    if existing.is_some() && !update {
        return Err(UsersFileError::Duplicate {
            username: username.to_string(),
            path: path.display().to_string(),
        });
    }
    let entry = UserEntry {
        username: username.to_string(),
        password_hash: hash_password(password)?,
        roles: roles.to_vec(),
        password: None,
    };
    let outcome = match existing {
        Some(i) => {
            file.users[i] = entry;
            AddOutcome::Updated
        }
        None => {
            file.users.push(entry);
            AddOutcome::Added
        }
    };
    file.save(path)?;
    Ok(outcome)
}

/// A user loaded from the users file.
struct StoredUser {
    hash: PasswordHash,
    principal: Arc<Principal>,
}

/// A remembered successful verification: a keyed digest of (user, password), never the
/// password itself.
struct Verified {
    digest: [u64; 2],
    expires: Instant,
}

/// Authenticates requests and authorizes admin actions for the node's `auth.*` settings.
///
/// # Invariants
/// - `verified` holds at most one entry per user of `users`, so it is bounded by the users
///   file; an entry is only added after a successful argon2 verification.
pub struct Authenticator {
    config: AuthConfig,
    users: HashMap<String, StoredUser>,
    /// A hash verified for unknown users, so a wrong user name costs the same as a wrong
    /// password and response times do not reveal which users exist.
    dummy_hash: Option<PasswordHash>,
    verified: Mutex<HashMap<String, Verified>>,
    /// Per-process random keys of the cache digest: without them a digest reveals nothing and
    /// a password colliding with a cached one cannot be searched for offline.
    digest_keys: [std::collections::hash_map::RandomState; 2],
    verify_permits: Arc<tokio::sync::Semaphore>,
}

impl Authenticator {
    /// Refuses `who` (a request's principal) unless it has a role of `auth.admin_roles` (anyone passes with
    /// `auth.type: none`): for sluice's own operator endpoints (metrics, the dashboard's data),
    /// which name every group and the node's load whatever a roles file grants. 401 without
    /// credentials, 403 `security_exception` naming `action` otherwise.
    pub fn authorize_admin(&self, who: Option<&Principal>, action: &str) -> Result<(), ApiError> {
        if self.config.mode == AuthMode::None {
            return Ok(());
        }
        let Some(p) = who else {
            return Err(ApiError::Engine(unauthenticated(format!(
                "missing authentication credentials for action [{action}]"
            ))));
        };
        if p.has_any_role(&self.config.admin_roles) {
            return Ok(());
        }
        Err(ApiError::Engine(super::authz::forbidden(action, p)))
    }

    /// Builds the authenticator; in `basic` mode it loads and validates the users file.
    pub fn new(config: AuthConfig) -> Result<Authenticator, UsersFileError> {
        let mut users = HashMap::new();
        let mut dummy_hash = None;
        if config.mode == AuthMode::Basic {
            let file = UsersFile::load(&config.users_file).map_err(|e| match e {
                UsersFileError::Io { action, path, reason } => UsersFileError::Io {
                    action,
                    path,
                    reason: format!(
                        "{reason}; auth.type is basic, so create it with `sluice users add --file <auth.users_file> --username <name> --roles admin` or set auth.users_file"
                    ),
                },
                other => other,
            })?;
            for u in file.users {
                let hash = parse_hash(&u.username, &u.password_hash).map_err(|reason| {
                    UsersFileError::Invalid {
                        path: config.users_file.display().to_string(),
                        reason,
                    }
                })?;
                let principal = Arc::new(Principal {
                    username: Arc::from(u.username.as_str()),
                    roles: u.roles.iter().map(|r| Arc::from(r.as_str())).collect(),
                });
                users.insert(u.username, StoredUser { hash, principal });
            }
            let dummy = hash_password("sluice-dummy-password")?;
            dummy_hash = PasswordHash::new(&dummy).ok();
        }
        Ok(Authenticator {
            config,
            users,
            dummy_hash,
            verified: Mutex::new(HashMap::new()),
            digest_keys: Default::default(),
            verify_permits: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_VERIFICATIONS)),
        })
    }

    /// The settings this authenticator enforces.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// The number of users loaded from the users file.
    pub fn num_users(&self) -> usize {
        self.users.len()
    }

    fn digest(&self, user: &str, password: &str) -> [u64; 2] {
        self.digest_keys.each_ref().map(|k| {
            let mut h = k.build_hasher();
            h.write(user.as_bytes());
            h.write_u8(0xff);
            h.write(password.as_bytes());
            h.finish()
        })
    }

    /// Checks a user name and password against the users file.
    ///
    /// A verification remembered from the last [`VERIFIED_TTL`] answers at once; otherwise
    /// argon2 runs on the blocking pool, at most [`MAX_CONCURRENT_VERIFICATIONS`] at a time.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the answer; a verification already on the blocking pool
    /// finishes there (holding its permit) and its result is not remembered.
    pub async fn verify_basic(
        &self,
        username: &str,
        password: &str,
        now: Instant,
    ) -> Option<Arc<Principal>> {
        let digest = self.digest(username, password);
        let stored = self.users.get(username);
        if let Some(user) = stored {
            let cache = self.verified.lock();
            if let Some(v) = cache.get(username)
                && v.digest == digest
                && v.expires > now
            {
                return Some(user.principal.clone());
            }
        }
        let hash = match stored {
            Some(u) => u.hash.clone(),
            None => self.dummy_hash.clone()?,
        };
        let permit = self.verify_permits.clone().acquire_owned().await.ok()?;
        let password = password.to_string();
        let ok = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        })
        .await
        .unwrap_or(false);
        let user = stored.filter(|_| ok)?;
        self.verified.lock().insert(
            username.to_string(),
            Verified {
                digest,
                expires: now + VERIFIED_TTL,
            },
        );
        Some(user.principal.clone())
    }

    /// The principal of a request from `peer` with `headers`, or the 401 to answer.
    ///
    /// # Cancel safety
    /// As [`Authenticator::verify_basic`].
    pub async fn authenticate_request(
        &self,
        headers: &impl HeaderLines,
        peer: Option<IpAddr>,
        path: &str,
    ) -> Result<Option<Arc<Principal>>, EngineError> {
        match self.config.mode {
            AuthMode::None => Ok(None),
            AuthMode::Basic => {
                let Some((user, password)) = basic_credentials(headers) else {
                    return Err(unreadable_credentials(headers, path));
                };
                // The clock read here, not for every request: `none` and `proxy` need none.
                // Boxed: inline, the verification's state (520 bytes) was room in every
                // request's check whatever the mode, copied as its future moved.
                match Box::pin(self.verify_basic(&user, &password, Instant::now())).await {
                    Some(p) => Ok(Some(p)),
                    None => {
                        tracing::debug!(user = %user, "basic authentication failed");
                        Err(unauthenticated(format!(
                            "unable to authenticate user [{user}] for REST request [{path}]"
                        )))
                    }
                }
            }
            AuthMode::Proxy => {
                let trusted = peer
                    .is_some_and(|ip| self.config.trusted_addresses.iter().any(|n| n.contains(ip)));
                if !trusted {
                    if headers.contains(&self.config.proxy_user_header)
                        || headers.contains(&self.config.proxy_roles_header)
                    {
                        tracing::debug!(
                            peer = ?peer,
                            "ignoring proxy authentication headers from a peer not in auth.proxy.trusted_addresses"
                        );
                    }
                    return Err(missing_credentials(path));
                }
                // A proxy that adds its identity headers to the client's rather than replacing
                // them would let the client pick the user (OpenSearch reads the first line) or
                // add roles: a request naming either twice is not believed.
                for name in [
                    &self.config.proxy_user_header,
                    &self.config.proxy_roles_header,
                ] {
                    if headers.values(name).nth(1).is_some() {
                        return Err(unauthenticated(format!(
                            "header [{name}] was sent more than once for REST request [{path}]: \
                             a trusted proxy must replace the client's identity headers, not add to them"
                        )));
                    }
                }
                let user = headers
                    .first(&self.config.proxy_user_header)
                    .and_then(visible)
                    .map(str::trim)
                    .filter(|u| check_username(u).is_ok());
                let Some(user) = user else {
                    return Err(missing_credentials(path));
                };
                let roles = headers
                    .first(&self.config.proxy_roles_header)
                    .and_then(visible)
                    .into_iter()
                    .flat_map(|v| v.split(','))
                    .map(str::trim)
                    .filter(|r| !r.is_empty())
                    .map(Arc::from)
                    .collect();
                Ok(Some(Arc::new(Principal {
                    username: Arc::from(user),
                    roles,
                })))
            }
        }
    }
}

/// The user and password of an `Authorization: Basic` header, if well formed.
fn basic_credentials(headers: &impl HeaderLines) -> Option<(String, String)> {
    let value = visible(headers.first(&header::AUTHORIZATION)?)?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

fn unauthenticated(reason: String) -> EngineError {
    EngineError::new(ErrorCode::Unauthenticated, reason)
}

/// Why `Authorization` gave no Basic credentials: there is none ([`missing_credentials`]), it
/// names another scheme (an Elasticsearch client's `ApiKey`, a `Bearer` token: said so, rather
/// than called missing, as an outside trial found), or its Basic value does not decode.
fn unreadable_credentials(headers: &impl HeaderLines, path: &str) -> EngineError {
    let Some(value) = headers.first(&header::AUTHORIZATION) else {
        return missing_credentials(path);
    };
    let value = String::from_utf8_lossy(value);
    let scheme = value.trim().split(' ').next().unwrap_or_default();
    if scheme.is_empty() || scheme.eq_ignore_ascii_case("basic") {
        return unauthenticated(format!(
            "unable to authenticate with provided credentials for REST request [{path}]: the \
             Authorization header's Basic value is not base64 of user:password"
        ));
    }
    let scheme: String = scheme.chars().take(32).collect();
    unauthenticated(format!(
        "unable to authenticate with provided credentials for REST request [{path}]: the \
         [{scheme}] scheme is not supported; this node reads Authorization: Basic (auth.type: basic)"
    ))
}

fn missing_credentials(path: &str) -> EngineError {
    unauthenticated(format!(
        "missing authentication credentials for REST request [{path}]"
    ))
}

/// Authenticates a request from `peer` to `path` with header lines `headers`, first of the
/// request steps after the single-valued headers' check ([`crate::server::check_lines`]): its principal
/// (none when `auth.type` is `none`), or `Err` is the 401 `security_exception` to answer (with
/// `WWW-Authenticate: Basic realm="sluice"` in `basic` mode).
///
/// # Cancel safety
/// Dropping the future drops the request, as for any handler.
pub async fn authenticate(
    auth: &Authenticator,
    headers: &impl HeaderLines,
    peer: Option<IpAddr>,
    path: &str,
) -> Result<Option<Arc<Principal>>, Response> {
    let checked = auth.authenticate_request(headers, peer, path).await;
    checked.map_err(|e| {
        let basic = auth.config.mode == AuthMode::Basic;
        let e = if basic {
            e.with_extra(
                "header",
                serde_json::json!({"WWW-Authenticate": BASIC_CHALLENGE}),
            )
        } else {
            e
        };
        let mut resp = ApiError::Engine(e).into_response();
        if basic {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(BASIC_CHALLENGE),
            );
        }
        resp
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_cidr_contains_matches_prefix_and_family() {
        let n = IpCidr::parse("10.1.0.0/16").unwrap();
        assert!(n.contains("10.1.200.3".parse().unwrap()));
        assert!(!n.contains("10.2.0.1".parse().unwrap()));
        assert!(n.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one = IpCidr::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!(
            IpCidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(
            !IpCidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("::1".parse().unwrap())
        );
        assert!(
            IpCidr::parse("fd00::/8")
                .unwrap()
                .contains("fd12::1".parse().unwrap())
        );
        assert!(IpCidr::parse("10.0.0.0/33").is_none());
        assert!(IpCidr::parse("nonsense").is_none());
        assert!(IpCidr::parse("10.0.0.0/x").is_none());
    }

    #[test]
    fn test_users_file_rejects_plaintext_password() {
        let e = UsersFile::parse(
            "users:\n  - username: a\n    password: secret\n    password_hash: x\n",
            Path::new("u.yml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("plaintext"), "{e}");
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn test_users_file_rejects_non_argon2_hash_and_duplicates() {
        let e = UsersFile::parse(
            "users:\n  - username: a\n    password_hash: \"$2b$12$abcdefghijklmnopqrstuv\"\n",
            Path::new("u.yml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("bcrypt"), "{e}");
        let h = hash_password("pw").unwrap();
        let text = format!(
            "users:\n  - username: a\n    password_hash: \"{h}\"\n  - username: a\n    password_hash: \"{h}\"\n"
        );
        let e = UsersFile::parse(&text, Path::new("u.yml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("listed twice"), "{e}");
    }

    #[test]
    fn test_add_user_refuses_duplicates_unless_update() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cfg/users.yml");
        let roles = vec!["analyst".to_string()];
        assert_eq!(
            add_user(&path, "alice", "pw1", &roles, false).unwrap(),
            AddOutcome::Added
        );
        let e = add_user(&path, "alice", "pw2", &roles, false).unwrap_err();
        assert!(matches!(e, UsersFileError::Duplicate { .. }), "{e}");
        assert_eq!(
            add_user(&path, "alice", "pw2", &[], true).unwrap(),
            AddOutcome::Updated
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("pw2"), "{text}");
        let file = UsersFile::load(&path).unwrap();
        assert_eq!(file.users.len(), 1);
        assert!(file.users[0].roles.is_empty());
        assert!(file.users[0].password_hash.starts_with("$argon2id$"));
    }

    #[tokio::test]
    async fn test_verify_basic_caches_success_only_for_the_same_password() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.yml");
        add_user(&path, "alice", "right", &["admin".to_string()], false).unwrap();
        let auth = Authenticator::new(AuthConfig {
            mode: AuthMode::Basic,
            users_file: path,
            ..AuthConfig::default()
        })
        .unwrap();
        let now = Instant::now();
        let p = auth.verify_basic("alice", "right", now).await.unwrap();
        assert_eq!(&*p.username, "alice");
        assert_eq!(auth.verified.lock().len(), 1);
        // A cached success does not admit another password.
        assert!(auth.verify_basic("alice", "wrong", now).await.is_none());
        assert!(auth.verify_basic("bob", "right", now).await.is_none());
        assert_eq!(auth.verified.lock().len(), 1);
        // Still right after the entry expired.
        let later = now + VERIFIED_TTL + Duration::from_secs(1);
        assert!(auth.verify_basic("alice", "right", later).await.is_some());
    }

    #[test]
    fn test_users_file_entry_without_hash_is_named() {
        let e = UsersFile::parse("users:\n  - username: a\n", Path::new("u.yml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("user [a] has no password_hash"), "{e}");
    }
}
