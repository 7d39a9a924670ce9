//! Who may do what: bearer tokens, each scoped to namespaces and to reading or operating,
//! and the extractor that turns a request into a client of the namespace it names.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::extract::{FromRequestParts, Path};
use axum::http::header;
use axum::http::request::Parts;
use subtle::ConstantTimeEq as _;

use super::ApiState;
use super::problem::{Problem, ProblemKind};
use crate::Client;
use crate::uuid::Uuid;

/// What a token may do in its namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Rights {
    /// Read runs, their steps and published state; wait on them; list workflows and
    /// schedules.
    Read,
    /// Everything `Read` may, and start runs, send events, cancel, pause, resume, retry and
    /// fork runs, and create, pause, resume and delete schedules.
    Operate,
}

/// Which namespaces a token reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Namespaces {
    Any,
    Only(BTreeSet<String>),
}

/// The fewest characters a token's secret has: shorter ones are guessed too easily.
pub const MIN_SECRET_CHARS: usize = 16;

/// Why a token was refused ([`Token::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenError {
    /// The secret has fewer than [`MIN_SECRET_CHARS`] characters.
    TooShort {
        /// How many characters it has.
        chars: usize,
    },
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenError::TooShort { chars } => write!(
                f,
                "a token's secret must be at least {MIN_SECRET_CHARS} characters, not {chars}"
            ),
        }
    }
}

impl std::error::Error for TokenError {}

/// Refuses a secret shorter than [`MIN_SECRET_CHARS`].
fn check_secret(secret: &str) -> Result<(), TokenError> {
    let chars = secret.chars().count();
    if chars < MIN_SECRET_CHARS {
        return Err(TokenError::TooShort { chars });
    }
    Ok(())
}

/// A bearer token the API accepts (`Authorization: Bearer SECRET`), scoped to namespaces
/// and to [`Rights`].
///
/// ```
/// use tasks::http_api::{Token, TokenError};
///
/// let billing = Token::new("s3cret-billing-7f3a9c")?.namespace("billing").operate();
/// let auditor = Token::new("s3cret-audit-51b2e8d")?.any_namespace(); // read only
/// assert_eq!(Token::new("short").unwrap_err(), TokenError::TooShort { chars: 5 });
/// # let _ = (billing, auditor);
/// # Ok::<(), TokenError>(())
/// ```
#[derive(Clone)]
pub struct Token {
    secret: String,
    namespaces: Namespaces,
    rights: Rights,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret stays out of logs.
        f.debug_struct("Token")
            .field("namespaces", &self.namespaces)
            .field("rights", &self.rights)
            .finish_non_exhaustive()
    }
}

impl Token {
    /// A token with this secret that reaches no namespace yet and may only read: give it
    /// namespaces with [`Token::namespace`] (or [`Token::any_namespace`]) and
    /// [`Token::operate`] to let it write.
    ///
    /// Errors: [`TokenError::TooShort`] for a secret of fewer than [`MIN_SECRET_CHARS`]
    /// characters (the command line's `--token` requires as many).
    pub fn new(secret: impl Into<String>) -> Result<Self, TokenError> {
        let secret = secret.into();
        check_secret(&secret)?;
        Ok(Token {
            secret,
            namespaces: Namespaces::Only(BTreeSet::new()),
            rights: Rights::Read,
        })
    }

    /// Adds a namespace the token reaches.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        match &mut self.namespaces {
            Namespaces::Only(namespaces) => {
                namespaces.insert(namespace.into());
            }
            Namespaces::Any => {}
        }
        self
    }

    /// Adds namespaces the token reaches.
    pub fn namespaces<I: IntoIterator<Item = S>, S: Into<String>>(self, namespaces: I) -> Self {
        namespaces.into_iter().fold(self, Token::namespace)
    }

    /// The token reaches every namespace.
    pub fn any_namespace(mut self) -> Self {
        self.namespaces = Namespaces::Any;
        self
    }

    /// The token may operate (start, send, cancel, ...), not only read.
    pub fn operate(mut self) -> Self {
        self.rights = Rights::Operate;
        self
    }

    /// The token's rights.
    pub fn rights(&self) -> Rights {
        self.rights
    }

    fn reaches(&self, namespace: &str) -> bool {
        match &self.namespaces {
            Namespaces::Any => true,
            Namespaces::Only(namespaces) => namespaces.contains(namespace),
        }
    }

    /// A token of the command line: `SECRET`, `SECRET@ns1,ns2` or `SECRET@*`, then `:read`
    /// or `:operate` (default `:operate`). A secret holds neither `@` nor `:`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (rest, rights) = match text.rsplit_once(':') {
            Some((rest, "read")) => (rest, Rights::Read),
            Some((rest, "operate")) => (rest, Rights::Operate),
            Some((_, other)) => return Err(format!("unknown rights {other:?}: read or operate")),
            None => (text, Rights::Operate),
        };
        let (secret, namespaces) = match rest.split_once('@') {
            Some((secret, "*")) => (secret, Namespaces::Any),
            Some((secret, list)) => (
                secret,
                Namespaces::Only(
                    list.split(',')
                        .map(str::trim)
                        .filter(|ns| !ns.is_empty())
                        .map(str::to_owned)
                        .collect(),
                ),
            ),
            None => (rest, Namespaces::Only(BTreeSet::new())),
        };
        check_secret(secret).map_err(|error| error.to_string())?;
        Ok(Token {
            secret: secret.to_owned(),
            namespaces,
            rights,
        })
    }

    /// Gives a token parsed without namespaces this default namespace.
    pub fn or_namespace(self, namespace: &str) -> Self {
        match &self.namespaces {
            Namespaces::Only(namespaces) if namespaces.is_empty() => self.namespace(namespace),
            _ => self,
        }
    }
}

/// Who a request is: the token it carried, or anyone when the API was built without
/// authentication.
#[derive(Debug, Clone)]
pub(super) enum Caller {
    Anyone,
    Token(Token),
}

impl Caller {
    fn reaches(&self, namespace: &str) -> bool {
        match self {
            Caller::Anyone => true,
            Caller::Token(token) => token.reaches(namespace),
        }
    }

    fn may_operate(&self) -> bool {
        match self {
            Caller::Anyone => true,
            Caller::Token(token) => token.rights == Rights::Operate,
        }
    }
}

/// The token of `parts` among `tokens`, comparing every token in constant time (no early
/// exit: the time taken says nothing of which token, or which byte, differed).
pub(super) fn caller(state: &ApiState, parts: &Parts) -> Result<Caller, Problem> {
    if state.unauthenticated {
        return Ok(Caller::Anyone);
    }
    let unauthorized = || {
        Problem::new(
            ProblemKind::Unauthorized,
            "send `Authorization: Bearer TOKEN` with a token of this API",
        )
    };
    let given = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "))
        .map(<[u8]>::trim_ascii)
        .ok_or_else(unauthorized)?;
    let mut found = None;
    for token in state.tokens.iter() {
        if bool::from(token.secret.as_bytes().ct_eq(given)) {
            found = Some(token.clone());
        }
    }
    found.map(Caller::Token).ok_or_else(unauthorized)
}

/// A request on a namespace the caller reaches: the client of that namespace, and the
/// other parameters of the path. A namespace the caller does not reach is a 404, the same
/// as a missing run's, so that a token learns nothing of other namespaces.
pub(super) struct Scope {
    pub(super) client: Client,
    caller: Caller,
    params: HashMap<String, String>,
}

impl Scope {
    /// Refuses (403) a caller that may only read.
    pub(super) fn operator(&self) -> Result<&Client, Problem> {
        if self.caller.may_operate() {
            Ok(&self.client)
        } else {
            Err(Problem::new(
                ProblemKind::Forbidden,
                "this token may read this namespace but not operate on it",
            ))
        }
    }

    /// A parameter of the path.
    pub(super) fn param(&self, name: &str) -> Result<&str, Problem> {
        self.params
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| Problem::invalid_request(format!("missing path parameter {name}")))
    }

    /// The run id of the path; one that is not a UUID names no run (404).
    pub(super) fn run_id(&self) -> Result<Uuid, Problem> {
        let id = self.param("id")?;
        id.parse()
            .map_err(|_| Problem::not_found(format_args!("run {id}")))
    }
}

impl FromRequestParts<Arc<ApiState>> for Scope {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState>,
    ) -> Result<Self, Self::Rejection> {
        let caller = caller(state, parts)?;
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| Problem::invalid_request(rejection.body_text()))?;
        let namespace = params
            .get("namespace")
            .ok_or_else(|| Problem::invalid_request("missing namespace"))?;
        if !caller.reaches(namespace) {
            return Err(Problem::not_found(format_args!("namespace {namespace:?}")));
        }
        let store = state
            .client
            .store()
            .scoped(namespace)
            .map_err(|_| Problem::not_found(format_args!("namespace {namespace:?}")))?;
        Ok(Scope {
            client: Client::with_registry(store, state.registry.clone()),
            caller,
            params,
        })
    }
}

/// Any caller with a valid token (for what belongs to no namespace: the workflows, the
/// OpenAPI document).
pub(super) struct Authenticated;

impl FromRequestParts<Arc<ApiState>> for Authenticated {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState>,
    ) -> Result<Self, Self::Rejection> {
        caller(state, parts).map(|_| Authenticated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_with_namespaces_and_rights() {
        let token = Token::parse("0123456789abcdef@billing,ops:read").unwrap();
        assert!(token.reaches("billing") && token.reaches("ops") && !token.reaches("x"));
        assert_eq!(token.rights(), Rights::Read);
        let token = Token::parse("0123456789abcdef@*").unwrap();
        assert!(token.reaches("anything"));
        assert_eq!(token.rights(), Rights::Operate);
        let token = Token::parse("0123456789abcdef")
            .unwrap()
            .or_namespace("default");
        assert!(token.reaches("default") && !token.reaches("other"));
        assert!(Token::parse("short@x").is_err());
        assert_eq!(
            Token::new("fifteen-chars-x").unwrap_err(),
            TokenError::TooShort { chars: 15 }
        );
        assert!(Token::new("sixteen-chars-xy").is_ok());
        // Characters, not bytes: sixteen accented letters are enough, eight are not.
        assert!(Token::new("é".repeat(16)).is_ok());
        assert!(Token::new("é".repeat(8)).is_err());
        assert!(Token::parse("0123456789abcdef:admin").is_err());
        assert!(!format!("{token:?}").contains("0123456789abcdef"));
    }
}
