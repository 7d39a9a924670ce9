//! What keeps the dashboard safe: credentials, cross-site request checks and response
//! headers.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

use super::AppState;

/// The credentials a dashboard requires on every request.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Credentials {
    /// `Authorization: Bearer TOKEN`.
    Bearer(String),
    /// HTTP basic authentication.
    Basic {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out of logs.
        match self {
            Credentials::Bearer(_) => f.write_str("Bearer(..)"),
            Credentials::Basic { user, .. } => write!(f, "Basic {{ user: {user:?}, .. }}"),
        }
    }
}

impl Credentials {
    /// Basic credentials from `user:password` (the password may contain `:`); `None`
    /// without a `:` or with an empty user.
    pub fn basic_from_pair(pair: &str) -> Option<Self> {
        let (user, password) = pair.split_once(':')?;
        (!user.is_empty()).then(|| Credentials::Basic {
            user: user.to_owned(),
            password: password.to_owned(),
        })
    }

    /// Whether an `Authorization` header value carries these credentials.
    fn accepts(&self, authorization: &[u8]) -> bool {
        match self {
            Credentials::Bearer(token) => authorization
                .strip_prefix(b"Bearer ")
                .is_some_and(|given| same_bytes(given.trim_ascii(), token.as_bytes())),
            Credentials::Basic { user, password } => {
                let Some(encoded) = authorization.strip_prefix(b"Basic ") else {
                    return false;
                };
                let Ok(decoded) =
                    base64::engine::general_purpose::STANDARD.decode(encoded.trim_ascii())
                else {
                    return false;
                };
                let expected = format!("{user}:{password}");
                same_bytes(&decoded, expected.as_bytes())
            }
        }
    }

    fn challenge(&self) -> &'static str {
        match self {
            Credentials::Bearer(_) => "Bearer realm=\"tasks\"",
            Credentials::Basic { .. } => "Basic realm=\"tasks\", charset=\"UTF-8\"",
        }
    }
}

/// Compares in time that depends on the lengths only, not on where the bytes differ.
fn same_bytes(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

/// A fresh random token (244 random bits, as hex).
pub(super) fn new_token() -> String {
    let mut token = String::with_capacity(64);
    for _ in 0..2 {
        token.push_str(&crate::uuid::Uuid::new_v4().simple().to_string());
    }
    token
}

/// Whether a form's token is the dashboard's.
pub(super) fn token_matches(state: &AppState, given: &str) -> bool {
    same_bytes(given.as_bytes(), state.csrf_token.as_bytes())
}

/// Refuses requests without the dashboard's credentials, when it has some.
pub(super) async fn authenticate(
    State(credentials): State<Option<Arc<Credentials>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(credentials) = credentials else {
        return next.run(request).await;
    };
    let accepted = request
        .headers()
        .get(header::AUTHORIZATION)
        .is_some_and(|value| credentials.accepts(value.as_bytes()));
    if accepted {
        return next.run(request).await;
    }
    let mut response = (StatusCode::UNAUTHORIZED, "authentication required\n").into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(credentials.challenge()),
    );
    response
}

/// Refuses a POST that another site's page sent: by `Sec-Fetch-Site` (every current
/// browser sends it) or, failing that, by an `Origin` that is not this host. The forms'
/// token is checked by each action (it is in the body).
pub(super) async fn guard_posts(request: Request, next: Next) -> Response {
    if request.method() != Method::GET
        && request.method() != Method::HEAD
        && !same_origin(request.headers())
    {
        return (
            StatusCode::FORBIDDEN,
            "cross-site request refused: actions must come from the dashboard's own pages\n",
        )
            .into_response();
    }
    next.run(request).await
}

fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site == "same-origin" || site == "none";
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        // Neither header: not a browser's cross-site request (the token still applies).
        return true;
    };
    let host = headers.get(header::HOST).map(HeaderValue::as_bytes);
    let authority = origin
        .as_bytes()
        .strip_prefix(b"http://")
        .or_else(|| origin.as_bytes().strip_prefix(b"https://"));
    matches!((authority, host), (Some(authority), Some(host)) if authority == host)
}

/// Headers of every response: no inline scripts or styles, no framing by other sites, no
/// content sniffing, no referrer to other sites.
pub(super) async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_accept_only_their_header() {
        let bearer = Credentials::Bearer("s3cret".into());
        assert!(bearer.accepts(b"Bearer s3cret"));
        assert!(!bearer.accepts(b"Bearer s3cre"));
        assert!(!bearer.accepts(b"Bearer s3cret2"));
        assert!(!bearer.accepts(b"Basic s3cret"));
        let basic = Credentials::basic_from_pair("ada:pa:ss").unwrap();
        // base64("ada:pa:ss")
        assert!(basic.accepts(b"Basic YWRhOnBhOnNz"));
        assert!(!basic.accepts(b"Basic YWRhOnBhc3M="));
        assert!(!basic.accepts(b"Basic !!"));
        assert!(Credentials::basic_from_pair("nopassword").is_none());
        assert!(Credentials::basic_from_pair(":x").is_none());
        assert!(!format!("{basic:?}").contains("pa:ss"));
    }

    #[test]
    fn cross_site_posts_are_recognized() {
        let mut headers = HeaderMap::new();
        assert!(same_origin(&headers));
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("http://evil.test"));
        assert!(!same_origin(&headers));
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&headers));
        headers.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(same_origin(&headers));
    }

    #[test]
    fn tokens_are_fresh() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
