//! Trace context stored with a run.
//!
//! Whoever starts a run is usually inside a trace (an HTTP request, a job). The W3C trace
//! context of that trace ([`TraceContext`]: a `traceparent` and, optionally, a
//! `tracestate`) is stored with the run when it is created, and every execution of the run,
//! on any worker, after any number of replays and crashes, reads it back: the execution's
//! `run` span records it as `trace.parent`, and with the `opentelemetry` feature the span
//! becomes an OpenTelemetry child of the caller's span, so the run's `replay` and `step`
//! spans join the caller's trace.
//!
//! The context comes from `StartOptions::trace_context`
//! when given, else (with the `opentelemetry` feature) from the current `tracing` span. A
//! child run started with `ctx.child` takes the trace of its parent. Runs started by a
//! schedule have none.

use serde::{Deserialize, Serialize};

/// A W3C trace context (<https://www.w3.org/TR/trace-context/>): the `traceparent` and
/// `tracestate` headers of the caller of a run's start, as stored with the run. Always
/// valid: every way of building one checks it.
///
/// One pointer wide (so `Option<TraceContext>` adds eight bytes to every run in memory).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawTraceContext")]
pub struct TraceContext(Box<Headers>);

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
struct Headers {
    traceparent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

#[derive(Deserialize)]
struct RawTraceContext {
    traceparent: String,
    #[serde(default)]
    tracestate: Option<String>,
}

impl TryFrom<RawTraceContext> for TraceContext {
    type Error = TraceContextError;

    fn try_from(raw: RawTraceContext) -> Result<Self, Self::Error> {
        TraceContext::new(raw.traceparent, raw.tracestate)
    }
}

/// The longest `tracestate` kept, in bytes: the W3C specification asks every vendor to
/// propagate at least 512 characters, and 32 list members of the longest keys and values
/// fit in far less than this bound.
pub const MAX_TRACESTATE_BYTES: usize = 1024;

/// Why a trace context was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceContextError {
    /// The `traceparent` is not `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>` in
    /// lowercase, or its trace id or parent id is all zeros.
    #[error(
        "invalid traceparent {value:?}: expected 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, lowercase, ids not all zero"
    )]
    Traceparent {
        /// The refused value (at most its first 64 bytes).
        value: String,
    },
    /// The `tracestate` is longer than [`MAX_TRACESTATE_BYTES`] or holds a character outside
    /// printable ASCII.
    #[error("invalid tracestate: {reason}")]
    Tracestate {
        /// What is wrong with it.
        reason: String,
    },
}

impl TraceContext {
    /// A trace context from its `traceparent` and `tracestate` header values.
    ///
    /// Only version `00` of `traceparent` is accepted (55 characters, lowercase hex, with
    /// neither id all zeros); `tracestate` is kept as given when it is printable ASCII of
    /// at most [`MAX_TRACESTATE_BYTES`] bytes, and an empty one counts as none.
    ///
    /// ```
    /// use tasks_core::trace::TraceContext;
    ///
    /// let trace = TraceContext::new(
    ///     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ///     Some("vendor=value".to_owned()),
    /// )?;
    /// assert_eq!(trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    /// assert_eq!(trace.parent_id(), "00f067aa0ba902b7");
    /// assert!(TraceContext::new("00-0-0-0", None).is_err());
    /// # Ok::<(), tasks_core::trace::TraceContextError>(())
    /// ```
    pub fn new(
        traceparent: impl Into<String>,
        tracestate: Option<String>,
    ) -> Result<Self, TraceContextError> {
        let traceparent = traceparent.into();
        if !valid_traceparent(&traceparent) {
            let mut value = traceparent;
            if value.len() > 64 {
                let mut end = 64;
                while !value.is_char_boundary(end) {
                    end -= 1;
                }
                value.truncate(end);
            }
            return Err(TraceContextError::Traceparent { value });
        }
        let tracestate = tracestate.filter(|state| !state.is_empty());
        if let Some(state) = &tracestate {
            if state.len() > MAX_TRACESTATE_BYTES {
                return Err(TraceContextError::Tracestate {
                    reason: format!("{} bytes, more than {MAX_TRACESTATE_BYTES}", state.len()),
                });
            }
            if let Some(bad) = state.chars().find(|c| !(' '..='~').contains(c)) {
                return Err(TraceContextError::Tracestate {
                    reason: format!("character {bad:?} is not printable ASCII"),
                });
            }
        }
        Ok(TraceContext(Box::new(Headers {
            traceparent,
            tracestate,
        })))
    }

    /// The `traceparent` header value.
    pub fn traceparent(&self) -> &str {
        &self.0.traceparent
    }

    /// The `tracestate` header value, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.0.tracestate.as_deref()
    }

    /// The trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.0.traceparent[3..35]
    }

    /// The id of the caller's span, the parent of the run's executions: 16 lowercase hex
    /// digits.
    pub fn parent_id(&self) -> &str {
        &self.0.traceparent[36..52]
    }

    /// Whether the caller sampled its trace (the `sampled` flag).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.0.traceparent[53..55], 16).is_ok_and(|flags| flags & 1 == 1)
    }

    /// The trace context of the current `tracing` span, as OpenTelemetry sees it (through
    /// the `tracing-opentelemetry` layer): `None` when no span is current, no such layer is
    /// installed, or the span has no valid OpenTelemetry context.
    #[cfg(feature = "opentelemetry")]
    pub fn current() -> Option<TraceContext> {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        TraceContext::from_otel(&tracing::Span::current().context())
    }

    /// The trace context of the span of the OpenTelemetry context `cx`, or `None` when it
    /// has no valid span context.
    #[cfg(feature = "opentelemetry")]
    pub fn from_otel(cx: &opentelemetry::Context) -> Option<TraceContext> {
        use opentelemetry::trace::TraceContextExt as _;
        let span = cx.span();
        let span = span.span_context();
        if !span.is_valid() {
            return None;
        }
        let traceparent = format!(
            "00-{}-{}-{:02x}",
            span.trace_id(),
            span.span_id(),
            span.trace_flags().to_u8() & opentelemetry::trace::TraceFlags::SAMPLED.to_u8()
        );
        TraceContext::new(traceparent, Some(span.trace_state().header())).ok()
    }

    /// This context as the remote parent of an OpenTelemetry context.
    #[cfg(feature = "opentelemetry")]
    pub fn to_otel(&self) -> opentelemetry::Context {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
        };
        let trace_id = TraceId::from_hex(self.trace_id()).unwrap_or(TraceId::INVALID);
        let span_id = SpanId::from_hex(self.parent_id()).unwrap_or(SpanId::INVALID);
        let flags = if self.sampled() {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let state = self
            .tracestate()
            .and_then(|state| state.parse::<TraceState>().ok())
            .unwrap_or_default();
        let span = SpanContext::new(trace_id, span_id, flags, true, state);
        opentelemetry::Context::new().with_remote_span_context(span)
    }
}

/// The trace context a new run stores: `explicit` when given, else (with the
/// `opentelemetry` feature) the current span's.
pub fn for_new_run(explicit: Option<TraceContext>) -> Option<TraceContext> {
    #[cfg(feature = "opentelemetry")]
    {
        explicit.or_else(TraceContext::current)
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        explicit
    }
}

/// Makes `span` (an execution's `run` span, not yet entered) a child of the run's stored
/// trace context: it records the context as `trace.parent`, and with the `opentelemetry`
/// feature sets it as the span's OpenTelemetry parent.
pub fn adopt(span: &tracing::Span, trace: Option<&TraceContext>) {
    let Some(trace) = trace else { return };
    span.record("trace.parent", trace.traceparent());
    #[cfg(feature = "opentelemetry")]
    {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        // Fails only without an OpenTelemetry layer (nothing to join) or on a span already
        // started, which this one is not.
        let _ = span.set_parent(trace.to_otel());
    }
}

/// The stored `traceparent` and `tracestate` columns as a trace context; a stored value
/// that no longer parses is dropped (with a warning) rather than failing the run over its
/// telemetry.
pub fn from_columns(
    traceparent: Option<String>,
    tracestate: Option<String>,
) -> Option<TraceContext> {
    let traceparent = traceparent?;
    match TraceContext::new(traceparent, tracestate) {
        Ok(trace) => Some(trace),
        Err(error) => {
            tracing::warn!(%error, "a run's stored trace context is invalid; ignoring it");
            None
        }
    }
}

fn valid_traceparent(value: &str) -> bool {
    let bytes = value.as_bytes();
    let lower_hex = |range: std::ops::Range<usize>| {
        bytes[range]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let not_zero = |range: std::ops::Range<usize>| bytes[range].iter().any(|b| *b != b'0');
    bytes.len() == 55
        && value.starts_with("00-")
        && bytes[35] == b'-'
        && bytes[52] == b'-'
        && lower_hex(3..35)
        && lower_hex(36..52)
        && lower_hex(53..55)
        && not_zero(3..35)
        && not_zero(36..52)
}

#[cfg(test)]
mod tests {
    use super::{MAX_TRACESTATE_BYTES, TraceContext, TraceContextError};

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn accepts_a_w3c_traceparent_and_reads_its_parts() {
        let trace = TraceContext::new(PARENT, Some("a=1,b=2".into())).unwrap();
        assert_eq!(trace.traceparent(), PARENT);
        assert_eq!(trace.tracestate(), Some("a=1,b=2"));
        assert_eq!(trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(trace.parent_id(), "00f067aa0ba902b7");
        assert!(trace.sampled());
        let unsampled = PARENT.replace("-01", "-00");
        assert!(!TraceContext::new(unsampled, None).unwrap().sampled());
        assert_eq!(
            TraceContext::new(PARENT, Some(String::new()))
                .unwrap()
                .tracestate(),
            None
        );
    }

    #[test]
    fn refuses_malformed_traceparents() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
            "00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-01",
        ] {
            assert!(
                matches!(
                    TraceContext::new(bad, None),
                    Err(TraceContextError::Traceparent { .. })
                ),
                "{bad:?} was accepted"
            );
        }
        let long = "é".repeat(100);
        match TraceContext::new(long, None) {
            Err(TraceContextError::Traceparent { value }) => assert!(value.len() <= 64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_oversized_or_unprintable_tracestates() {
        let long = "a".repeat(MAX_TRACESTATE_BYTES + 1);
        assert!(matches!(
            TraceContext::new(PARENT, Some(long)),
            Err(TraceContextError::Tracestate { .. })
        ));
        assert!(matches!(
            TraceContext::new(PARENT, Some("a=1\n".into())),
            Err(TraceContextError::Tracestate { .. })
        ));
    }

    #[test]
    fn deserializing_checks_too() {
        let ok: TraceContext =
            serde_json::from_value(serde_json::json!({ "traceparent": PARENT })).unwrap();
        assert_eq!(ok.traceparent(), PARENT);
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            serde_json::json!({ "traceparent": PARENT })
        );
        assert!(
            serde_json::from_value::<TraceContext>(serde_json::json!({ "traceparent": "x" }))
                .is_err()
        );
    }
}
