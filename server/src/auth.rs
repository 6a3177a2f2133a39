//! Who may call what: bearer tokens, each granted some containers, read-only or admin.
//!
//! The token file (`--auth-tokens`) is JSON:
//! `{"tokens": [{"token": "...", "containers": ["team-a"], "admin": false}]}`; `"*"` grants
//! every container. A request's `authorization: Bearer <token>` header (the scheme's name
//! in any case) is checked once, by the interceptor in front of every data-plane service,
//! which puts the [`Caller`] in the request; handlers then ask the caller about the
//! container they touch (the watch listener, `crate::status::http`, the same way). Without
//! `--allow-unauthenticated`, a request without a token is `UNAUTHENTICATED`; with it,
//! such a request is served as [`Caller::Anonymous`] (every container, every verb).
//! Health and reflection need no token (probes).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::{Result, ServeError};
use crate::limits::RateLimiter;

/// What a token may do.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub token: String,
    /// Containers the token may use (`"*"`: all).
    pub containers: Vec<String>,
    /// Admin verbs too: reset, delete, restore, reset-container.
    #[serde(default)]
    pub admin: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    tokens: Vec<Grant>,
}

/// The kind of verb a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reading, checkpointing, acknowledging, listing, counters.
    Read,
    /// Reset, delete, restore a state, release a container.
    Admin,
}

/// The authenticated caller of one request.
#[derive(Clone, Debug)]
pub enum Caller {
    Anonymous,
    Token(Arc<Grant>),
}

impl Caller {
    /// Whether the caller may `access` `container`; PERMISSION_DENIED names both.
    pub fn check(&self, container: &str, access: Access) -> Result<()> {
        let Caller::Token(grant) = self else { return Ok(()) };
        if !grant.containers.iter().any(|c| c == "*" || c == container) {
            return Err(ServeError::PermissionDenied(format!("this token may not use container {container:?}")));
        }
        if access == Access::Admin && !grant.admin {
            return Err(ServeError::PermissionDenied(format!(
                "this token may read container {container:?} but not reset, delete or restore it"
            )));
        }
        Ok(())
    }
}

/// The tokens of the server, by the SHA-256 of the token (compared without timing leaks).
#[derive(Debug, Default)]
pub struct AccessPolicy {
    grants: HashMap<[u8; 32], Arc<Grant>>,
    allow_unauthenticated: bool,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl AccessPolicy {
    pub fn new(grants: Vec<Grant>, allow_unauthenticated: bool) -> Self {
        let grants = grants.into_iter().map(|grant| (digest(&grant.token), Arc::new(grant))).collect();
        Self { grants, allow_unauthenticated }
    }

    /// Reads a token file; an empty token or an empty container list is refused.
    pub fn load(path: &std::path::Path, allow_unauthenticated: bool) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let file: TokenFile = serde_json::from_str(&text)?;
        for (i, grant) in file.tokens.iter().enumerate() {
            anyhow::ensure!(grant.token.len() >= 16, "tokens[{i}].token: use at least 16 characters");
            anyhow::ensure!(!grant.containers.is_empty(), "tokens[{i}].containers: grant at least one container");
        }
        Ok(Self::new(file.tokens, allow_unauthenticated))
    }

    /// Whether any token is configured.
    pub fn has_tokens(&self) -> bool {
        !self.grants.is_empty()
    }

    /// The caller of a request with this `authorization` header value.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Caller> {
        let Some(header) = authorization else {
            return match self.allow_unauthenticated {
                true => Ok(Caller::Anonymous),
                false => Err(ServeError::Unauthenticated("send `authorization: Bearer <token>`".into())),
            };
        };
        let token = bearer_token(header)
            .ok_or_else(|| ServeError::Unauthenticated("the authorization header is not `Bearer <token>`".into()))?;
        // Hash lookups compare digests, so the time taken says nothing about the token.
        self.grants
            .get(&digest(token))
            .map(|grant| Caller::Token(grant.clone()))
            .ok_or_else(|| ServeError::Unauthenticated("the token is not valid".into()))
    }
}

/// The token of an `authorization` header value `Bearer <token>`: the scheme's name in
/// any case (RFC 7235, 2.1: `bearer`, `BEARER`), then spaces or tabs, then the token.
/// Both doors read the header here: gRPC's interceptor and the watch listener.
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once([' ', '\t'])?;
    let token = token.trim_start_matches([' ', '\t']);
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The caller a handler serves: put in the request by the interceptor.
pub fn caller<T>(request: &tonic::Request<T>) -> Result<Caller> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| ServeError::Unauthenticated("the request was not authenticated".into()))
}

/// The tonic interceptor in front of the data-plane services: authenticates, then takes
/// the request from the caller's rate (a token's, or an anonymous peer address's).
pub fn interceptor(
    policy: Arc<AccessPolicy>,
    rate: Arc<RateLimiter>,
) -> impl Fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |mut request: tonic::Request<()>| {
        let header = request.metadata().get("authorization").map(|value| value.to_str().unwrap_or(""));
        let caller = policy.authenticate(header)?;
        let key = match &caller {
            Caller::Token(grant) => format!("token:{}", grant.token),
            Caller::Anonymous => format!("peer:{:?}", request.remote_addr().map(|addr| addr.ip())),
        };
        rate.admit(&key)?;
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: bool) -> AccessPolicy {
        let grants = vec![
            Grant { token: "reader-token-0123456".into(), containers: vec!["a".into()], admin: false },
            Grant { token: "admin-token-01234567".into(), containers: vec!["*".into()], admin: true },
        ];
        AccessPolicy::new(grants, allow)
    }

    #[test]
    fn tokens_grant_their_containers_and_verbs() {
        let policy = policy(false);
        let reader = policy.authenticate(Some("Bearer reader-token-0123456")).unwrap();
        assert!(reader.check("a", Access::Read).is_ok());
        assert!(matches!(reader.check("b", Access::Read), Err(ServeError::PermissionDenied(_))));
        assert!(matches!(reader.check("a", Access::Admin), Err(ServeError::PermissionDenied(_))));
        // The scheme's name is case-insensitive (RFC 7235); the token is not.
        for header in ["bearer reader-token-0123456", "BEARER  reader-token-0123456", "beArer\treader-token-0123456"] {
            assert!(policy.authenticate(Some(header)).unwrap().check("a", Access::Read).is_ok(), "{header}");
        }
        assert!(policy.authenticate(Some("bearer READER-TOKEN-0123456")).is_err());
        let admin = policy.authenticate(Some("Bearer admin-token-01234567")).unwrap();
        assert!(admin.check("anything", Access::Admin).is_ok());
    }

    #[test]
    fn missing_or_wrong_tokens_are_unauthenticated_unless_allowed() {
        let strict = policy(false);
        for header in [None, Some("Bearer nope"), Some("Basic abc")] {
            assert!(matches!(strict.authenticate(header), Err(ServeError::Unauthenticated(_))), "{header:?}");
        }
        let open = policy(true);
        assert!(matches!(open.authenticate(Some("Bearer")), Err(ServeError::Unauthenticated(_))));
        assert!(matches!(open.authenticate(Some("Bearerreader-token-0123456")), Err(ServeError::Unauthenticated(_))));
        assert!(matches!(open.authenticate(None), Ok(Caller::Anonymous)));
        assert!(matches!(open.authenticate(Some("Bearer nope")), Err(ServeError::Unauthenticated(_))));
    }
}
