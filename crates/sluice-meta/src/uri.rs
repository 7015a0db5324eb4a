//! [`MetastoreUri`]: which metastore a node uses (the `metastore.uri` setting), and opening it.
//!
//! A PostgreSQL URL carries a password, so this module never lets one out: [`MetastoreUri`]'s
//! `Display` and `Debug` and every message built here mask it ([`redact`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use crate::model::MetaKind;
use crate::{MetaResult, MetaStore, PostgresMetaStore, SqliteMetaStore};

/// The metastore a node opens.
#[derive(Clone, PartialEq, Eq)]
pub enum MetastoreUri {
    /// The embedded SQLite file; the default, `path.data/meta.sqlite`. One node only.
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by the nodes of a cluster; the URL as given.
    Postgres(String),
}

impl MetastoreUri {
    /// What `metastore.uri` accepts, for error messages.
    pub const ACCEPTED: &str = "expected postgres://user:password@host:port/database (a PostgreSQL database, which the nodes of a cluster share), or no value for the embedded SQLite file path.data/meta.sqlite";

    /// The name of the embedded file in the data folder.
    pub const EMBEDDED_FILE: &str = "meta.sqlite";

    /// The default: the embedded SQLite file in the data folder `data`.
    pub fn embedded(data: &Path) -> MetastoreUri {
        MetastoreUri::Sqlite(data.join(Self::EMBEDDED_FILE))
    }

    /// Parses a `metastore.uri` value: a `postgres://` (or `postgresql://`) URL. The error
    /// says what is accepted and never contains the password.
    pub fn parse(text: &str) -> Result<MetastoreUri, String> {
        let text = text.trim();
        let scheme = text.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
            return Err(Self::ACCEPTED.to_string());
        }
        sqlx::postgres::PgConnectOptions::from_str(text)
            .map_err(|e| format!("not a valid PostgreSQL URL ({e}); {}", Self::ACCEPTED))?;
        Ok(MetastoreUri::Postgres(text.to_string()))
    }

    /// Which backend this names.
    pub fn kind(&self) -> MetaKind {
        match self {
            MetastoreUri::Sqlite(_) => MetaKind::Sqlite,
            MetastoreUri::Postgres(_) => MetaKind::Postgres,
        }
    }

    /// Opens the store: creates the SQLite file, or connects to PostgreSQL; either way brings
    /// the schema to the current version.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the schema as it was or migrated whole.
    pub async fn open(&self) -> MetaResult<Arc<dyn MetaStore>> {
        Ok(match self {
            MetastoreUri::Sqlite(path) => Arc::new(SqliteMetaStore::open(path).await?),
            MetastoreUri::Postgres(url) => Arc::new(PostgresMetaStore::open(url).await?),
        })
    }
}

impl fmt::Display for MetastoreUri {
    /// The file path, or the URL with its password masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetastoreUri::Sqlite(path) => write!(f, "{}", path.display()),
            MetastoreUri::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

impl fmt::Debug for MetastoreUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetastoreUri::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            MetastoreUri::Postgres(url) => f.debug_tuple("Postgres").field(&redact(url)).finish(),
        }
    }
}

/// `url` with the password masked as `***`: in the user info (`user:secret@host`) and in a
/// `password=` query parameter. Text that is not a URL comes back unchanged.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest_start = scheme_end + 3;
    let rest = &url[rest_start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let mut out = url[..rest_start].to_string();
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let tail = &rest[authority_end..];
    match tail.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            out.push_str(&params.join("&"));
        }
        None => out.push_str(tail),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_redact_masks_every_password() {
        assert_eq!(
            redact("postgres://app:s3cr%40t@db.example:5432/meta"),
            "postgres://app:***@db.example:5432/meta"
        );
        assert_eq!(
            redact("postgresql://app@db/meta?sslmode=prefer&password=hunter2"),
            "postgresql://app@db/meta?sslmode=prefer&password=***"
        );
        assert_eq!(redact("postgres://db:5432"), "postgres://db:5432");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn test_parse_accepts_postgres_urls_only_and_hides_the_password() {
        let uri = MetastoreUri::parse("postgres://app:hunter2@127.0.0.1:5432/meta").unwrap();
        assert_eq!(uri.kind(), MetaKind::Postgres);
        assert_eq!(uri.to_string(), "postgres://app:***@127.0.0.1:5432/meta");
        assert!(!format!("{uri:?}").contains("hunter2"));
        assert!(MetastoreUri::parse("postgresql://db/meta").is_ok());
        for bad in [
            "",
            "mysql://a:b@c/d",
            "/var/lib/meta.sqlite",
            "sqlite://x",
            "postgres://app:hunter2@host:notaport/db",
        ] {
            let e = MetastoreUri::parse(bad).unwrap_err();
            assert!(
                e.contains("postgres://user:password@host:port/database"),
                "{e}"
            );
            assert!(!e.contains("hunter2"), "{e}");
        }
        let embedded = MetastoreUri::embedded(Path::new("data"));
        assert_eq!(embedded.kind(), MetaKind::Sqlite);
        assert_eq!(embedded.to_string(), "data/meta.sqlite");
    }
}
