//! Local items named like the crates and prelude items the generated code uses must not
//! capture it: the expansion names everything absolutely.
#![allow(dead_code, non_camel_case_types)]

mod tasks {}
mod serde {}
mod serde_json {}
mod inventory {}
mod schemars {}
mod core {}
mod std {}

struct Option;
struct Some;
struct None;
struct Ok;
struct Err;
struct Box;
struct Clone;
struct Duration;
struct Value;
struct WorkflowDefinition;
struct RetryPolicy;
struct String;
struct DerivedConcurrency;
struct DeriveKeyError;
fn file() {}
fn line() {}

type Result<T> = ::std::result::Result<T, ::tasks::WorkflowError>;

#[derive(::serde::Serialize, ::serde::Deserialize, ::schemars::JsonSchema)]
#[schemars(crate = "::schemars")]
struct Input {
    value: u32,
}

#[derive(::std::clone::Clone)]
struct Token(u32);

#[::tasks::step(retry(max_attempts = 2, initial_interval = "1s"))]
async fn double(value: u32, _token: Token) -> ::std::result::Result<u32, ::tasks::WorkflowError> {
    ::std::result::Result::Ok(value * 2)
}

fn bucket(input: &Input) -> u32 {
    input.value % 4
}

#[::tasks::workflow(
    name = "hygiene",
    retry(backoff = 3.0),
    concurrency(key = bucket, limit = 1)
)]
async fn hygiene(
    _ctx: ::tasks::WorkflowContext,
    input: Input,
) -> ::std::result::Result<u32, ::tasks::WorkflowError> {
    double(input.value, Token(1)).await
}

fn main() {
    let definition = <hygiene as ::tasks::Workflow>::definition();
    ::std::assert_eq!(definition.name, "hygiene");
    ::std::assert!(definition.concurrency.is_some());
}
